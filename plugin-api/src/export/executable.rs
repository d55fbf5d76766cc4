//! Header §7: compile, signature, bind, run and destroy.

use super::args::{non_null_mut, read_arg, slice_or_empty, write_out, write_owned_outputs};
use super::entry::state;
use super::status::guard;
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::plugin::{
    BoundParam, DeviceInfo, DeviceKind, Mode, OutputBuf, OutputSlot, ParamBytes, Role,
};
use crate::sized::AbiStruct;
use crate::strings::RlxStr;
use crate::tables::*;
use crate::tensor::{ownership, RlxNamedTensor, RlxTensor, TensorRef};
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
struct InUse<'a> {
    owner: &'a ExeBox,
}

impl InUse<'_> {
    fn exe(&mut self) -> &mut dyn crate::plugin::Executable {
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
unsafe fn enter<'a>(exe: *const RlxExecutable, call: &str) -> PluginResult<InUse<'a>> {
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

/// Validated views of a run's named inputs (borrowed for the call).
unsafe fn named_views<'a>(
    inputs: *const RlxNamedTensor,
    n_inputs: usize,
) -> PluginResult<smallvec::SmallVec<[(&'a str, TensorRef<'a>); 4]>> {
    let named = slice_or_empty(inputs, n_inputs, "inputs")?;
    let mut views = smallvec::SmallVec::with_capacity(named.len());
    for nt in named {
        if nt.struct_size != std::mem::size_of::<RlxNamedTensor>() {
            return Err(PluginError::invalid_argument(format!(
                "named tensor struct_size {} is not {}: RlxNamedTensor is frozen in ABI 1",
                nt.struct_size,
                std::mem::size_of::<RlxNamedTensor>()
            )));
        }
        let name = nt
            .name
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("input name is not UTF-8: {e}")))?;
        let view =
            TensorRef::from_raw(&nt.tensor).map_err(|e| e.context(format!("input {name:?}")))?;
        views.push((name, view));
    }
    Ok(views)
}

pub(super) unsafe extern "C" fn executable_run(
    exe: *mut RlxExecutable,
    inputs: *const RlxNamedTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "executable_run")?;
        let views = named_views(inputs, n_inputs)?;
        let outs = exe.exe().run_owned(&views)?;
        if outs.len() != n_outputs {
            return Err(PluginError::invalid_argument(format!(
                "the executable has {} outputs but the caller passed {n_outputs} slots",
                outs.len()
            )));
        }
        write_owned_outputs(outs, outputs, n_outputs).map(|_| ())
    })
}

/// (1.8) `executable_run` with outputs written into memory the caller
/// lends (slots whose `dl.data` is non-null); see `run_into_slots`.
pub(super) unsafe extern "C" fn executable_run_into(
    exe: *mut RlxExecutable,
    inputs: *const RlxNamedTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "executable_run_into")?;
        let views = named_views(inputs, n_inputs)?;
        let mut slots = run_into_slots(outputs, n_outputs, &views)?;
        exe.exe().run_into(&views, &mut slots)?;
        // Every owned output first, so that a slot left empty fails the
        // call before any descriptor is written (the others are released
        // when `slots` drops).
        if let Some(i) = slots
            .iter()
            .position(|s| matches!(s, OutputSlot::Owned(None)))
        {
            return Err(PluginError::internal(format!(
                "run_into left output {i} without a tensor"
            )));
        }
        for (i, slot) in slots.into_iter().enumerate() {
            if let OutputSlot::Owned(Some(t)) = slot {
                outputs.add(i).write(t.into_raw());
            }
        }
        Ok(())
    })
}

/// The caller's output slots as `run_into` takes them: a slot with null
/// data receives an owned tensor; any other must be a `BORROWED`, compact,
/// host-memory descriptor of the frozen size, overlapping no input and no
/// other lent slot (a plugin writes it while it may still read them).
unsafe fn run_into_slots<'a>(
    outputs: *mut RlxTensor,
    n_outputs: usize,
    inputs: &[(&str, TensorRef<'_>)],
) -> PluginResult<smallvec::SmallVec<[OutputSlot<'a>; 4]>> {
    let raw = slice_or_empty(outputs, n_outputs, "outputs")?;
    let mut slots = smallvec::SmallVec::with_capacity(raw.len());
    let mut lent: smallvec::SmallVec<[(usize, std::ops::Range<usize>); 4]> =
        smallvec::SmallVec::new();
    for (i, t) in raw.iter().enumerate() {
        if t.struct_size == std::mem::size_of::<RlxTensor>() && t.dl.data.is_null() {
            slots.push(OutputSlot::Owned(None));
            continue;
        }
        let view = TensorRef::from_raw(t).map_err(|e| e.context(format!("output slot {i}")))?;
        if t.ownership != ownership::BORROWED {
            return Err(PluginError::invalid_argument(format!(
                "output slot {i} lends memory with ownership {}; a lent output buffer is \
                 BORROWED (the caller keeps it)",
                t.ownership
            )));
        }
        let bytes = view
            .compact_bytes()
            .filter(|_| view.is_compact())
            .ok_or_else(|| {
                PluginError::invalid_argument(format!(
                "output slot {i} ({}{:?}) is strided; a lent output buffer is compact row-major",
                view.dtype, view.shape
            ))
            })?;
        let range = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
        let overlaps = |r: &std::ops::Range<usize>| r.start < range.end && range.start < r.end;
        if let Some((j, _)) = lent.iter().find(|(_, r)| overlaps(r)) {
            return Err(PluginError::invalid_argument(format!(
                "output slots {j} and {i} lend overlapping memory"
            )));
        }
        for (name, input) in inputs {
            let Some(b) = input.compact_bytes() else {
                continue;
            };
            let r = b.as_ptr() as usize..b.as_ptr() as usize + b.len();
            if overlaps(&r) {
                return Err(PluginError::invalid_argument(format!(
                    "output slot {i} lends memory that input {name:?} is read from"
                )));
            }
        }
        if !range.is_empty() {
            lent.push((i, range));
        }
        let (dtype, shape, len) = (view.dtype, view.shape.clone(), bytes.len());
        slots.push(OutputSlot::Into(OutputBuf {
            dtype,
            shape,
            // SAFETY: the caller lends these bytes, writable for the call
            // (the ABI's promise), and they overlap nothing else read here.
            bytes: std::slice::from_raw_parts_mut(bytes.as_ptr() as *mut u8, len),
        }));
    }
    Ok(slots)
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
