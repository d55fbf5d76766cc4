//! Tensor descriptors into `executable_bind_param` and `executable_run`
//! through the raw C table: every field of `RlxTensor` / `RlxNamedTensor`
//! comes from the fuzzer (struct_size, ownership, ndim, shape, strides,
//! byte_offset, dtype code/bits/lanes, device, null pointers, names, the
//! input and output counts).
//!
//! What the harness keeps true, because the ABI makes it the caller's
//! promise and no callee can check it: a non-null `data` points at a buffer
//! covering every byte the descriptor's shape, strides and offset address
//! (inputs whose extent exceeds 1 MiB are skipped), `shape` and `strides`
//! hold `ndim` entries (ndim above 4 is skipped), and an `OWNED` tensor's
//! deleter frees exactly what it was given. Everything else may be wrong,
//! and the plugin must refuse it with a status.
//!
//! Checked: no crash; no PANIC status; a bound `OWNED` tensor's deleter
//! runs exactly once by the time the executable is destroyed, whether the
//! call failed or not (when its struct_size reaches the deleter); a run
//! input's never runs (run inputs are borrowed whatever they say); a
//! successful run returns exactly its outputs, each released here through
//! its own deleter. Shared with `tests/tests/fuzz_replay.rs`.

use arbitrary::{Arbitrary, Unstructured};
use rlx_plugin_api::tables::{RlxCompileOptions, RlxExecutable};
use rlx_plugin_api::tensor::RlxDataType;
use rlx_plugin_api::tensor::{ownership, RlxDevice, RlxDlTensor, RlxNamedTensor, RlxTensor};
use rlx_plugin_api::{RlxStatus, RlxStr, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

/// relu(x[2,3] . w[3,2] + b[2,2]); w a param, x and b inputs.
const GRAPH: &str = "rlxmodel 1\nopset 1\n\ngraph @g {\n  %x = input : f32[2, 3]\n  \
%w = param : f32[3, 2]\n  %2 = MatMul %x, %w : f32[2, 2]\n  %b = input : f32[2, 2]\n  \
%4 = Binary(Add) %2, %b : f32[2, 2]\n  %5 = Activation(Relu) %4 : f32[2, 2]\n  return %5\n}\n";

const NAMES: [&str; 6] = ["x", "w", "b", "", "nope", "x\0y"];
const MAX_EXTENT: i128 = 1 << 20;

#[derive(Arbitrary, Debug)]
struct Desc {
    name: u8,
    struct_size: u8,
    ownership: u8,
    ndim: i8,
    dims: [i64; 4],
    small_dims: bool,
    strides: Option<[i64; 4]>,
    byte_offset: u16,
    dtype: (u8, u8, u16),
    device: (i32, i32),
    null_data: bool,
    null_shape: bool,
    fill: u8,
}

#[derive(Arbitrary, Debug)]
enum Call {
    Bind(Desc),
    Run {
        inputs: Vec<Desc>,
        n_outputs: u8,
        null_inputs: bool,
    },
}

/// One tensor's memory, kept until the executable is destroyed (a
/// BORROWED_PERSISTENT param must outlive it) or handed to the plugin
/// (OWNED: freed by `owned_deleter`).
struct Backing {
    buf: Vec<u8>,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

static OWNED_GIVEN: AtomicUsize = AtomicUsize::new(0);
static OWNED_FREED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn owned_deleter(ctx: *mut c_void) {
    OWNED_FREED.fetch_add(1, Ordering::SeqCst);
    drop(Box::from_raw(ctx as *mut Backing));
}

/// The byte range `[lo, hi)` relative to `data` that the descriptor
/// addresses, or None when it cannot be held (too large, overflowing).
fn extent(
    shape: &[i64],
    strides: Option<&[i64]>,
    offset: u64,
    elem_bits: u8,
) -> Option<(i128, i128)> {
    if shape.iter().any(|d| *d < 0) {
        return Some((0, 0)); // refused by any reader; nothing to cover
    }
    if shape.contains(&0) {
        return Some((0, 0));
    }
    let es = ((elem_bits as i128 + 7) / 8).max(1);
    let n = shape.len();
    let row_major: Vec<i128> = (0..n)
        .map(|i| {
            shape[i + 1..]
                .iter()
                .try_fold(1i128, |a, d| a.checked_mul(*d as i128))
        })
        .collect::<Option<_>>()?;
    let (mut lo, mut hi) = (0i128, 0i128);
    for i in 0..n {
        let s = strides.map_or(row_major[i], |s| s[i] as i128);
        let span = (shape[i] as i128 - 1).checked_mul(s)?;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
        if lo < -MAX_EXTENT || hi > MAX_EXTENT {
            return None;
        }
    }
    let lo = offset as i128 + lo * es;
    let hi = offset as i128 + (hi + 1) * es;
    (hi - lo <= MAX_EXTENT).then_some((lo.min(0), hi.max(0)))
}

/// Build a descriptor (and what backs it) from `d`; None to skip.
fn descriptor(d: &Desc) -> Option<(RlxTensor, Option<Box<Backing>>)> {
    let ndim = d.ndim as i32;
    let k = ndim.clamp(0, 4) as usize;
    if ndim > 4 {
        return None; // only 4 entries are held
    }
    let shape: Vec<i64> = d.dims[..k]
        .iter()
        .map(|v| if d.small_dims { v.rem_euclid(5) } else { *v })
        .collect();
    let strides: Option<Vec<i64>> = d.strides.map(|s| s[..k].iter().map(|v| v % 8).collect());
    let (code, bits, lanes) = d.dtype;
    let bits = match bits % 4 {
        0 => 32,
        1 => 16,
        2 => 64,
        _ => bits,
    };
    let (lo, hi) = extent(&shape, strides.as_deref(), d.byte_offset as u64, bits)?;
    let mut back = Box::new(Backing {
        buf: vec![d.fill; (hi - lo) as usize + 8],
        shape,
        strides: strides.clone().unwrap_or_default(),
    });
    let data = if d.null_data {
        std::ptr::null_mut()
    } else {
        // SAFETY: -lo <= buf.len(): data points inside the buffer.
        unsafe { back.buf.as_mut_ptr().offset((-lo) as isize) as *mut c_void }
    };
    let own = match d.ownership % 5 {
        0 => ownership::BORROWED,
        1 => ownership::BORROWED_PERSISTENT,
        2 => ownership::OWNED,
        3 => 3,
        _ => u32::MAX,
    };
    let full = std::mem::size_of::<RlxTensor>();
    let struct_size = match d.struct_size % 4 {
        0 | 1 => full,
        2 => 0,
        _ => full - 8,
    };
    let t = RlxTensor {
        struct_size,
        ownership: own,
        dl: RlxDlTensor {
            data,
            device: RlxDevice {
                device_type: if d.device.0 % 3 == 0 { d.device.0 } else { 1 },
                device_id: if d.device.1 % 3 == 0 { d.device.1 } else { 0 },
            },
            ndim,
            dtype: RlxDataType {
                code: code % 8,
                bits,
                lanes: if lanes % 4 == 0 { lanes } else { 1 },
            },
            shape: if d.null_shape {
                std::ptr::null_mut()
            } else {
                back.shape.as_mut_ptr()
            },
            strides: if strides.is_some() {
                back.strides.as_mut_ptr()
            } else {
                std::ptr::null_mut()
            },
            byte_offset: d.byte_offset as u64,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: None,
    };
    Some((t, Some(back)))
}

/// Run inputs that say OWNED: the ABI has them borrowed whatever their
/// ownership says, so the plugin must never call their deleter.
static WRONGLY_FREED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn must_not_run(_ctx: *mut c_void) {
    WRONGLY_FREED.fetch_add(1, Ordering::SeqCst);
}

/// The descriptor with its ownership settled. A bind's OWNED tensor whose
/// struct_size reaches `deleter` hands its backing to the plugin (to free
/// through `owned_deleter`, also when the call fails); one whose
/// struct_size does not cannot be released by the plugin and stays here,
/// as does every run input (borrowed whatever it says) and every borrowed
/// tensor.
fn settle(
    mut t: RlxTensor,
    back: Option<Box<Backing>>,
    keep: &mut Vec<Backing>,
    bind: bool,
) -> RlxTensor {
    let Some(back) = back else { return t };
    let reaches_deleter =
        t.struct_size >= std::mem::offset_of!(RlxTensor, deleter) + std::mem::size_of::<usize>();
    if t.ownership == ownership::OWNED && bind && reaches_deleter {
        OWNED_GIVEN.fetch_add(1, Ordering::SeqCst);
        t.manager_ctx = Box::into_raw(back) as *mut c_void;
        t.deleter = Some(owned_deleter);
    } else {
        if t.ownership == ownership::OWNED {
            t.deleter = Some(must_not_run);
        }
        keep.push(*back);
    }
    t
}

/// A finding: what went wrong, for the fuzzer to abort on and the replay
/// test to report.
pub struct Finding(pub String);

fn check(p: &LoadedPlugin, s: *mut RlxStatus, what: &str) -> Result<bool, Finding> {
    if s.is_null() {
        return Ok(true);
    }
    let api = p.raw_api();
    // SAFETY: s is a live status of this plugin, freed once below.
    let (code, msg) = unsafe {
        let code = (api.status_code.unwrap())(s);
        let m = (api.status_message.unwrap())(s);
        (code, m.to_string_lossy())
    };
    unsafe { (api.status_free.unwrap())(s) };
    if StatusCode::from_raw(code) == StatusCode::Panic || msg.is_empty() {
        return Err(Finding(format!("{what}: code {code}: {msg:?}")));
    }
    Ok(false)
}

/// One fuzz input: the calls it decodes to, on a fresh executable.
pub fn one_input(p: &LoadedPlugin, data: &[u8]) -> Result<(), Finding> {
    let Ok(calls) = Vec::<Call>::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let api = p.raw_api();
    let given0 = OWNED_GIVEN.load(Ordering::SeqCst);
    let freed0 = OWNED_FREED.load(Ordering::SeqCst);
    let opts = RlxCompileOptions::default();
    let mut exe: *mut RlxExecutable = std::ptr::null_mut();
    // SAFETY: the text and options are borrowed for the call.
    let s = unsafe { (api.compile.unwrap())(RlxStr::from_str(GRAPH), &opts, &mut exe) };
    if !check(p, s, "compile")? || exe.is_null() {
        return Err(Finding("the fixed graph does not compile".into()));
    }
    let mut keep: Vec<Backing> = Vec::new();
    for call in calls.iter().take(8) {
        match call {
            Call::Bind(d) => {
                let Some((t, back)) = descriptor(d) else {
                    continue;
                };
                let t = settle(t, back, &mut keep, true);
                let name = NAMES[d.name as usize % NAMES.len()];
                // SAFETY: exe is live; the descriptor and name are valid for the call.
                let s = unsafe {
                    (api.executable_bind_param.unwrap())(exe, RlxStr::from_str(name), &t)
                };
                check(p, s, "bind_param")?;
            }
            Call::Run {
                inputs,
                n_outputs,
                null_inputs,
            } => {
                let mut named = Vec::new();
                let mut skip = false;
                for d in inputs.iter().take(4) {
                    let Some((t, back)) = descriptor(d) else {
                        skip = true;
                        break;
                    };
                    let t = settle(t, back, &mut keep, false);
                    named.push(RlxNamedTensor {
                        struct_size: std::mem::size_of::<RlxNamedTensor>(),
                        name: RlxStr::from_str(NAMES[d.name as usize % NAMES.len()]),
                        tensor: t,
                    });
                }
                if skip {
                    continue;
                }
                let n_out = (*n_outputs % 3) as usize;
                let mut outs = vec![RlxTensor::empty(); n_out];
                let ptr = if *null_inputs && named.is_empty() {
                    std::ptr::null()
                } else {
                    named.as_ptr()
                };
                // SAFETY: exe is live; inputs and output slots are valid for the call.
                let s = unsafe {
                    (api.executable_run.unwrap())(exe, ptr, named.len(), outs.as_mut_ptr(), n_out)
                };
                if check(p, s, "run")? {
                    if n_out != 1 {
                        return Err(Finding(format!(
                            "a run succeeded with {n_out} output slots"
                        )));
                    }
                    for o in outs {
                        if o.dl.data.is_null() {
                            return Err(Finding("an output without data".into()));
                        }
                        if let Some(del) = o.deleter {
                            // SAFETY: an OWNED output, released once.
                            unsafe { del(o.manager_ctx) };
                        }
                    }
                }
            }
        }
    }
    // SAFETY: exe is live and not used after.
    unsafe { (api.executable_destroy.unwrap())(exe) };
    drop(keep);
    let given = OWNED_GIVEN.load(Ordering::SeqCst) - given0;
    let freed = OWNED_FREED.load(Ordering::SeqCst) - freed0;
    if given != freed {
        return Err(Finding(format!(
            "{given} OWNED tensors handed over, {freed} deleters ran"
        )));
    }
    if WRONGLY_FREED.swap(0, Ordering::SeqCst) != 0 {
        return Err(Finding(
            "the plugin released a tensor it did not own (a run input)".into(),
        ));
    }
    Ok(())
}
