//! Header §7: compile, signature, bind, device and destroy (the runs are in
//! `run.rs`), param ranges, RNG changes and active extents.

use super::args::{non_null_mut, read_arg, visit_values, write_out};
use super::handle::{self, enter};
use super::loaded::loaded;
use super::status::guard;
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::plugin::{BoundParam, CompileOptions, DeviceKind, Executable, Mode, ParamBytes, Plugin};
use crate::strings::RlxStr;
use crate::tables::*;
use crate::tensor::{ownership, RlxTensor, TensorRef};
use std::ffi::c_void;

pub(super) unsafe extern "C" fn compile(
    graph: RlxStr,
    options: *const RlxCompileOptions,
    out: *mut *mut RlxExecutable,
) -> *mut RlxStatus {
    guard(|| {
        compile_into(options, out, |plugin, opts| {
            let text = graph.to_str().map_err(|e| {
                PluginError::invalid_argument(format!("graph text is not UTF-8: {e}"))
            })?;
            plugin.compile(text, opts)
        })
    })
}

/// What every compile does around the plugin's own, whatever form the
/// graph came in (text here, others in `graph_forms.rs`): read the
/// options, refuse a device the descriptor does not list, and hand the
/// executable out through `out`.
///
/// # Safety
/// `options` is null or a readable `RlxCompileOptions`; `out` is null or
/// writable.
pub(super) unsafe fn compile_into(
    options: *const RlxCompileOptions,
    out: *mut *mut RlxExecutable,
    compile: impl FnOnce(&dyn Plugin, &CompileOptions) -> PluginResult<Box<dyn Executable>>,
) -> PluginResult<()> {
    let out = non_null_mut(out, "out")?;
    *out = std::ptr::null_mut();
    let st = loaded()?;
    crate::log::sync_max_level();
    // Fields beyond the host's struct_size keep their defaults, and the RNG
    // fields are read as one group (RlxCompileOptions::read).
    let raw = RlxCompileOptions::read(options);
    let mode = Mode::from_raw(raw.mode)
        .ok_or_else(|| PluginError::unsupported(format!("unknown execution mode {}", raw.mode)))?;
    let device = match raw.device_kind {
        device_kind::DEFAULT => None,
        k => Some((
            DeviceKind::from_raw(k)
                .ok_or_else(|| PluginError::unsupported(format!("unknown device kind {k}")))?,
            raw.device_ordinal,
        )),
    };
    let opts = CompileOptions {
        mode,
        rng_policy: raw.rng_policy,
        rng_seed: raw.rng_seed,
        device,
        memory_limit: (raw.memory_limit_bytes > 0).then_some(raw.memory_limit_bytes),
    };
    // A device the descriptor does not list is refused here, for every
    // plugin alike.
    let listed = |k: DeviceKind, o: u32| st.devices.iter().find(|d| d.kind == k && d.ordinal == o);
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
    let exe = compile(&*st.plugin, &opts)?;
    // A plugin that does not say where an executable runs runs it where
    // it was asked to, or on its default device.
    let device = exe.device().or_else(|| match opts.device {
        Some((k, o)) => listed(k, o).cloned(),
        None => st.devices.first().cloned(),
    });
    *out = handle::adopt(exe, device);
    Ok(())
}

pub(super) unsafe extern "C" fn executable_destroy(exe: *mut RlxExecutable) {
    handle::destroy(exe)
}

pub(super) unsafe extern "C" fn executable_signature(
    exe: *const RlxExecutable,
    visitor: *const RlxValueVisitor,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "executable_signature")?;
        let visitor = read_arg(visitor, "visitor")?;
        visit_values(&visitor, exe.exe().signature())
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

/// The device an executable runs on, as the out-struct `*out`.
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
        write_out(out, handle::raw_device_info(d));
        Ok(())
    })
}

/// Overwrite a byte range of a bound param.
pub(super) unsafe extern "C" fn executable_bind_param_range(
    exe: *mut RlxExecutable,
    name: RlxStr,
    byte_offset: u64,
    data: *const c_void,
    len: usize,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "executable_bind_param_range")?;
        let name = name
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("param name is not UTF-8: {e}")))?;
        let bytes = super::args::slice_or_empty(data as *const u8, len, "data")?;
        let offset = usize::try_from(byte_offset).map_err(|_| {
            PluginError::invalid_argument(format!("byte offset {byte_offset} is too large"))
        })?;
        exe.exe().bind_param_range(name, offset, bytes)
    })
}

/// Another RNG policy and seed from the next run on.
pub(super) unsafe extern "C" fn executable_set_rng(
    exe: *mut RlxExecutable,
    policy: u32,
    seed: u64,
) -> *mut RlxStatus {
    guard(|| {
        enter(exe, "executable_set_rng")?
            .exe()
            .set_rng(policy, seed)
    })
}

/// Narrow the next runs to `active` of `upper` rows (0, 0 clears).
pub(super) unsafe extern "C" fn executable_set_active_extent(
    exe: *mut RlxExecutable,
    active: u64,
    upper: u64,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "executable_set_active_extent")?;
        let extent = match (active, upper) {
            (0, 0) => None,
            (a, u) if a == 0 || a > u => {
                return Err(PluginError::invalid_argument(format!(
                    "active extent {a} of {u}: it must be between 1 and the upper extent (or \
                     0 of 0 to clear it)"
                )))
            }
            (a, u) => {
                let n = |v: u64| {
                    usize::try_from(v).map_err(|_| {
                        PluginError::invalid_argument(format!("extent {v} is too large"))
                    })
                };
                Some((n(a)?, n(u)?))
            }
        };
        exe.exe().set_active_extent(extent)
    })
}
