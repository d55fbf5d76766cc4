//! Header §7: a run, with outputs handed over (`executable_run`) or written
//! into memory the caller lends (`executable_run_into`).

use super::args::{slice_or_empty, write_owned_outputs};
use super::handle::enter;
use super::status::guard;
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::plugin::{OutputBuf, OutputSlot};
use crate::tables::*;
use crate::tensor::{ownership, RlxNamedTensor, RlxTensor, TensorRef};

/// Validated views of a run's named inputs (borrowed for the call).
pub(super) unsafe fn named_views<'a>(
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

/// `executable_run` with outputs written into memory the caller lends (slots
/// whose `dl.data` is non-null); see `run_into_slots`.
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
        hand_over(slots, outputs)
    })
}

/// Write each slot the run filled with an owned tensor into the caller's
/// descriptor. Every owned output first, so that a slot left empty fails
/// the call before any descriptor is written (the others are released
/// when `slots` drops).
pub(super) unsafe fn hand_over(
    slots: smallvec::SmallVec<[OutputSlot<'_>; 4]>,
    outputs: *mut RlxTensor,
) -> PluginResult<()> {
    if let Some(i) = slots
        .iter()
        .position(|s| matches!(s, OutputSlot::Owned(None)))
    {
        return Err(PluginError::internal(format!(
            "the run left output {i} without a tensor"
        )));
    }
    for (i, slot) in slots.into_iter().enumerate() {
        if let OutputSlot::Owned(Some(t)) = slot {
            outputs.add(i).write(t.into_raw());
        }
    }
    Ok(())
}

/// The caller's output slots as `run_into` takes them: a slot with null data
/// receives an owned tensor, or nothing when its ownership is `SKIP`; any other
/// must be a `BORROWED`, compact, host-memory descriptor of the frozen size,
/// overlapping no input and no other lent slot (a plugin writes it while it may
/// still read them).
pub(super) unsafe fn run_into_slots<'a>(
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
            slots.push(match t.ownership {
                // Not wanted: left as it is.
                ownership::SKIP => OutputSlot::Skip,
                _ => OutputSlot::Owned(None),
            });
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
        let strided = || {
            PluginError::invalid_argument(format!(
                "output slot {i} ({}{:?}) is strided; a lent output buffer is compact \
                 row-major",
                view.dtype, view.shape
            ))
        };
        let bytes = view.compact_bytes().ok_or_else(strided)?;
        let range = view.byte_range();
        let overlaps = |r: &std::ops::Range<usize>| r.start < range.end && range.start < r.end;
        if let Some((j, _)) = lent.iter().find(|(_, r)| overlaps(r)) {
            return Err(PluginError::invalid_argument(format!(
                "output slots {j} and {i} lend overlapping memory"
            )));
        }
        // Every byte an input may be read from, strided inputs included.
        for (name, input) in inputs {
            if overlaps(&input.byte_range()) {
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
