//! Executable handles: what an `RlxExecutable*` points at, the set of the
//! live ones, and claiming one for a call.
//!
//! The ABI lets one thread at a time use an executable (§14). A host that
//! breaks that rule gets `INVALID_ARGUMENT` from the call that overlaps,
//! not a data race: every entry takes the executable through [`enter`],
//! which claims it atomically, and only then touches it. A pointer that
//! is not a live executable of this plugin (destroyed, another plugin's,
//! never one) is refused the same way before it is dereferenced, so that
//! a host's mistake is an error, never a crash.

use crate::error::{PluginError, PluginResult};
use crate::plugin::{DeviceInfo, Executable};
use crate::sized::AbiStruct;
use crate::strings::RlxStr;
use crate::tables::{RlxDeviceInfo, RlxExecutable};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, RwLock};

/// An executable, the device it said it runs on (asked once, at compile:
/// `executable_device` hands out its name until destroy), and whether a
/// call is using it now.
pub(super) struct ExeBox {
    exe: std::cell::UnsafeCell<Box<dyn Executable>>,
    pub(super) device: Option<DeviceInfo>,
    busy: AtomicBool,
}

/// The addresses of the live executables. Read on every call (a shared
/// lock, uncontended but for compiles and destroys); `destroy` takes it
/// exclusively, so no call can claim a handle while it is being freed.
static LIVE: LazyLock<RwLock<HashSet<usize>>> = LazyLock::new(Default::default);

fn live() -> std::sync::RwLockReadGuard<'static, HashSet<usize>> {
    // The set stays consistent even if a holder panicked: use it.
    LIVE.read().unwrap_or_else(|e| e.into_inner())
}

/// A new handle for `exe`, owned by the caller until `destroy`.
pub(super) fn adopt(exe: Box<dyn Executable>, device: Option<DeviceInfo>) -> *mut RlxExecutable {
    let raw = Box::into_raw(Box::new(ExeBox {
        exe: std::cell::UnsafeCell::new(exe),
        device,
        busy: AtomicBool::new(false),
    }));
    LIVE.write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(raw as usize);
    raw as *mut RlxExecutable
}

/// The executable claimed for one call; released when dropped.
pub(super) struct InUse<'a> {
    pub(super) owner: &'a ExeBox,
}

impl InUse<'_> {
    pub(super) fn exe(&mut self) -> &mut dyn Executable {
        // SAFETY: `enter` set `busy`, so this call is the only one using
        // the executable until this guard drops; `&mut self` keeps the
        // borrow unique within the call.
        unsafe { &mut **self.owner.exe.get() }
    }
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.owner.busy.store(false, Ordering::Release);
    }
}

/// Claim `exe` for this call, or refuse a pointer that is not a live
/// executable of this plugin and a call that overlaps another.
///
/// # Safety
/// None beyond the ABI's: any pointer value is checked before use.
pub(super) unsafe fn enter<'a>(exe: *const RlxExecutable, call: &str) -> PluginResult<InUse<'a>> {
    if exe.is_null() {
        return Err(PluginError::invalid_argument(format!(
            "{call}: the executable is null"
        )));
    }
    // Held while claiming, so `destroy` cannot free it in between.
    let live = live();
    if !live.contains(&(exe as usize)) {
        return Err(PluginError::invalid_argument(format!(
            "{call}: {exe:p} is not a live executable of this plugin (destroyed, or made by \
             another plugin)"
        )));
    }
    // SAFETY: a live handle: a Box<ExeBox> this module leaked and has not
    // freed (destroy removes it from LIVE, under the write lock, first).
    let owner = unsafe { &*(exe as *const ExeBox) };
    owner
        .busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .map_err(|_| {
            PluginError::invalid_argument(format!(
                "{call}: the executable is in use by another call; calls on one executable \
                 must not overlap (docs/ABI.md §14): serialise them, or compile one executable \
                 per thread"
            ))
        })?;
    Ok(InUse { owner })
}

/// Free `exe`. A pointer that is not live (already destroyed, another
/// plugin's) is logged and left alone; one that a call is using is leaked
/// (logged) rather than freed under the running call.
pub(super) fn destroy(exe: *mut RlxExecutable) {
    if exe.is_null() {
        return;
    }
    {
        let mut live = LIVE.write().unwrap_or_else(|e| e.into_inner());
        if !live.contains(&(exe as usize)) {
            log::error!(
                "executable_destroy: {exe:p} is not a live executable of this plugin (destroyed \
                 twice, or made by another plugin); nothing was freed"
            );
            return;
        }
        // SAFETY: live, checked above under the exclusive lock.
        let owner = unsafe { &*(exe as *const ExeBox) };
        if owner.busy.swap(true, Ordering::AcqRel) {
            log::error!(
                "executable_destroy overlapped another call on the same executable (docs/ABI.md \
                 §14); it is leaked, not freed"
            );
            return;
        }
        live.remove(&(exe as usize));
    }
    // Dropping runs the plugin's own code: keep a panic inside (and say
    // so: destroy has no status to carry it).
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: removed from LIVE above, so this is the only reference.
        drop(unsafe { Box::from_raw(exe as *mut ExeBox) })
    })) {
        log::error!(
            "executable_destroy: the executable panicked while it was dropped: {}",
            crate::error::panic_message(&*p)
        );
    }
}

/// The ABI form of a device; the name borrows from `d`.
pub(super) fn raw_device_info(d: &DeviceInfo) -> RlxDeviceInfo {
    RlxDeviceInfo {
        struct_size: RlxDeviceInfo::STRUCT_SIZE,
        kind: d.kind.to_raw(),
        ordinal: d.ordinal,
        name: RlxStr::from_str(&d.name),
        memory_bytes: d.memory_bytes,
    }
}
