//! Header §7: compile, signature, bind, device and destroy (the runs are
//! in `run.rs`).

use super::args::{non_null_mut, read_arg, write_out};
use super::entry::state;
use super::status::guard;
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::plugin::{BoundParam, DeviceInfo, DeviceKind, Mode, ParamBytes, Role};
use crate::sized::AbiStruct;
use crate::strings::RlxStr;
use crate::tables::*;
use crate::tensor::{ownership, RlxTensor, TensorRef};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An executable, the device it said it runs on (asked once, at compile:
/// `executable_device` hands out its name until destroy), and whether a
/// call is using it now.
///
/// The ABI lets one thread at a time use an executable (§14). A host that
/// breaks that rule gets `INVALID_ARGUMENT` from the call that overlaps,
/// not a data race: every entry takes the executable through [`enter`],
/// which claims it atomically, and only then touches its state.
struct ExeBox {
    exe: std::cell::UnsafeCell<Box<dyn crate::plugin::Executable>>,
    device: Option<DeviceInfo>,
    busy: std::sync::atomic::AtomicBool,
}

/// The executable claimed for one call; released when dropped.
pub(super) struct InUse<'a> {
    owner: &'a ExeBox,
}

impl InUse<'_> {
    pub(super) fn exe(&mut self) -> &mut dyn crate::plugin::Executable {
        // SAFETY: `enter` set `busy`, so this call is the only one using
        // the executable until this guard drops; `&mut self` keeps the
        // borrow unique within the call.
        unsafe { &mut **self.owner.exe.get() }
    }
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.owner
            .busy
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Claim `exe` for this call, or refuse a call that overlaps another.
pub(super) unsafe fn enter<'a>(exe: *const RlxExecutable, call: &str) -> PluginResult<InUse<'a>> {
    let owner = (exe as *const ExeBox)
        .as_ref()
        .ok_or_else(|| PluginError::invalid_argument("executable is null"))?;
    owner
        .busy
        .compare_exchange(
            false,
            true,
            std::sync::atomic::Ordering::Acquire,
            std::sync::atomic::Ordering::Relaxed,
        )
        .map_err(|_| {
            PluginError::invalid_argument(format!(
                "{call}: the executable is in use by another call; calls on one executable \
                 must not overlap (docs/ABI.md §14): serialise them, or compile one executable \
                 per thread"
            ))
        })?;
    Ok(InUse { owner })
}

pub(super) unsafe extern "C" fn compile(
    graph: RlxStr,
    options: *const RlxCompileOptions,
    out: *mut *mut RlxExecutable,
) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let st = state()?;
        crate::log::sync_max_level();
        // Fields an older host did not send keep their defaults (the 1.3
        // reading rule, in RlxCompileOptions::read).
        let raw = RlxCompileOptions::read(options);
        let mode = Mode::from_raw(raw.mode).ok_or_else(|| {
            PluginError::unsupported(format!("unknown execution mode {}", raw.mode))
        })?;
        let device = match raw.device_kind {
            device_kind::DEFAULT => None,
            k => Some((
                DeviceKind::from_raw(k)
                    .ok_or_else(|| PluginError::unsupported(format!("unknown device kind {k}")))?,
                raw.device_ordinal,
            )),
        };
        let opts = crate::plugin::CompileOptions {
            mode,
            rng_policy: raw.rng_policy,
            rng_seed: raw.rng_seed,
            device,
            memory_limit: (raw.memory_limit_bytes > 0).then_some(raw.memory_limit_bytes),
        };
        let text = graph
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("graph text is not UTF-8: {e}")))?;
        // A device the descriptor does not list is refused here, for every
        // plugin alike.
        let listed =
            |k: DeviceKind, o: u32| st.devices.iter().find(|d| d.kind == k && d.ordinal == o);
        if let Some((k, o)) = opts.device {
            if !st.devices.is_empty() && listed(k, o).is_none() {
                return Err(PluginError::unsupported(format!(
                    "no device {}:{o} in plugin {}; it has {}",
                    k.name(),
                    st.plugin.descriptor().name,
                    st.devices
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        let exe = st.plugin.compile(text, &opts)?;
        // A plugin that does not say where an executable runs runs it where
        // it was asked to, or on its default device.
        let device = exe.device().or_else(|| match opts.device {
            Some((k, o)) => listed(k, o).cloned(),
            None => st.devices.first().cloned(),
        });
        *out = Box::into_raw(Box::new(ExeBox {
            exe: std::cell::UnsafeCell::new(exe),
            device,
            busy: std::sync::atomic::AtomicBool::new(false),
        })) as *mut RlxExecutable;
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_destroy(exe: *mut RlxExecutable) {
    if exe.is_null() {
        return;
    }
    // Freed under a running call, the executable would be used after free:
    // a destroy that overlaps a call leaks it instead, and says so.
    if (*(exe as *const ExeBox))
        .busy
        .swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        log::error!(
            "executable_destroy overlapped another call on the same executable (docs/ABI.md \
             §14); it is leaked, not freed"
        );
        return;
    }
    // Dropping runs the plugin's own code: keep a panic inside (and say
    // so: destroy has no status to carry it).
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(exe as *mut ExeBox)))) {
        log::error!(
            "executable_destroy: the executable panicked while it was dropped: {}",
            crate::error::panic_message(&*p)
        );
    }
}

pub(super) unsafe extern "C" fn executable_signature(
    exe: *const RlxExecutable,
    visitor: *const RlxValueVisitor,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "executable_signature")?;
        let visitor = read_arg(visitor, "visitor")?;
        let (visit, ctx) = (
            visitor
                .visit
                .ok_or_else(|| PluginError::invalid_argument("`visitor.visit` is null"))?,
            visitor.ctx,
        );
        for v in exe.exe().signature() {
            let shape: Vec<i64> = v.shape.iter().map(|d| d.map_or(-1, |d| d as i64)).collect();
            let info = RlxValueInfo {
                struct_size: RlxValueInfo::STRUCT_SIZE,
                role: match v.role {
                    Role::Input => role::INPUT,
                    Role::Param => role::PARAM,
                    Role::Output => role::OUTPUT,
                },
                name: RlxStr::from_str(&v.name),
                dtype: v.dtype.to_dl(),
                ndim: shape.len() as i32,
                shape: shape.as_ptr(),
            };
            visit(ctx, &info);
        }
        Ok(())
    })
}

pub(super) unsafe extern "C" fn executable_bind_param(
    exe: *mut RlxExecutable,
    name: RlxStr,
    tensor: *const RlxTensor,
) -> *mut RlxStatus {
    // An OWNED tensor is ours from here on, even if we fail: wrap it first
    // so every path releases it exactly once. Only a descriptor whose
    // struct_size reaches `deleter` (the whole frozen struct) is read past
    // its struct_size: a shorter one is refused below, and its deleter,
    // which its writer did not write, is never called.
    let whole = !tensor.is_null()
        && std::ptr::read_unaligned(tensor as *const usize) >= std::mem::size_of::<RlxTensor>();
    let owned = if whole {
        tensor
            .as_ref()
            .filter(|t| t.ownership == ownership::OWNED)
            .copied()
    } else {
        None
    };
    let guard_owned = OwnedGuard(owned);
    guard(move || {
        let mut exe = enter(exe, "executable_bind_param")?;
        let t = tensor
            .as_ref()
            .ok_or_else(|| PluginError::invalid_argument("`tensor` is null"))?;
        let name = name
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("param name is not UTF-8: {e}")))?;
        let view = TensorRef::from_raw(t).map_err(|e| e.context(format!("param {name:?}")))?;
        let (dtype, shape) = (view.dtype, view.shape.clone());
        if view.compact_bytes().is_none() {
            // A strided view is gathered into a copy: check it against the
            // param first, since a broadcast view (zero strides) may claim
            // any number of elements.
            let declared = exe
                .exe()
                .signature()
                .into_iter()
                .find(|v| v.role == crate::plugin::Role::Param && v.name == name);
            if let Some(v) = declared {
                let want: Option<Vec<usize>> = v.shape.iter().copied().collect();
                if v.dtype != dtype || want.as_deref() != Some(shape.as_slice()) {
                    return Err(PluginError::invalid_argument(format!(
                        "param {name:?} is {}{:?}, got {dtype}{shape:?}",
                        v.dtype,
                        want.unwrap_or_default()
                    )));
                }
            }
        }
        let bytes = match (t.ownership, view.compact_bytes()) {
            (ownership::BORROWED_PERSISTENT, Some(b)) => ParamBytes::Persistent(b),
            (ownership::OWNED, Some(b)) => ParamBytes::Owned {
                bytes: b,
                raw: guard_owned.disarm().expect("owned tensor"),
            },
            // Lent for this call (or strided): the plugin copies what it
            // keeps, reading the host's memory while the call lasts. An
            // owned tensor read this way is released when `guard_owned`
            // drops at the end of this closure.
            _ => return exe.exe().bind_param_lent(name, view),
        };
        exe.exe().bind_param(
            name,
            BoundParam {
                dtype,
                shape: shape.to_vec(),
                bytes,
            },
        )
    })
}

struct OwnedGuard(Option<RlxTensor>);

impl OwnedGuard {
    fn disarm(mut self) -> Option<RlxTensor> {
        self.0.take()
    }
}

impl Drop for OwnedGuard {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            // SAFETY: the caller handed us this OWNED tensor; it is released once, here.
            unsafe { crate::tensor::release(t) };
        }
    }
}

/// (1.4) The device an executable runs on, as the out-struct `*out`.
pub(super) unsafe extern "C" fn executable_device(
    exe: *const RlxExecutable,
    out: *mut RlxDeviceInfo,
) -> *mut RlxStatus {
    guard(|| {
        let exe = enter(exe, "executable_device")?;
        let out = non_null_mut(out, "out")?;
        let d = exe.owner.device.as_ref().ok_or_else(|| {
            PluginError::unsupported("this plugin does not say which device an executable uses")
        })?;
        write_out(out, raw_device_info(d));
        Ok(())
    })
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
