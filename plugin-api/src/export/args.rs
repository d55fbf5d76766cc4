//! Checked views of the pointers and counts callers pass.

use crate::error::{PluginError, PluginResult};
use crate::sized::AbiStruct;
use crate::tensor::{HostTensor, OwnedTensor, RlxTensor};

pub(super) unsafe fn non_null_mut<'a, T>(p: *mut T, what: &str) -> PluginResult<&'a mut T> {
    p.as_mut()
        .ok_or_else(|| PluginError::invalid_argument(format!("`{what}` is null")))
}

pub(super) unsafe fn slice_or_empty<'a, T>(
    p: *const T,
    n: usize,
    what: &str,
) -> PluginResult<&'a [T]> {
    if n == 0 {
        Ok(&[])
    } else if p.is_null() {
        Err(PluginError::invalid_argument(format!(
            "`{what}` is null but its count is {n}"
        )))
    } else {
        Ok(std::slice::from_raw_parts(p, n))
    }
}

pub(super) unsafe fn copy_inputs(
    inputs: *const RlxTensor,
    n: usize,
) -> PluginResult<Vec<HostTensor>> {
    slice_or_empty(inputs, n, "inputs")?
        .iter()
        .enumerate()
        .map(|(i, t)| HostTensor::copy_from_raw(t).map_err(|e| e.context(format!("input {i}"))))
        .collect()
}

/// Write `outs` as owned tensors into `slots`; on a count mismatch nothing
/// is written and the outputs are dropped here.
pub(super) unsafe fn write_outputs(
    outs: Vec<HostTensor>,
    slots: *mut RlxTensor,
    capacity: usize,
) -> PluginResult<usize> {
    let owned = outs.into_iter().map(OwnedTensor::from_host).collect();
    write_owned_outputs(owned, slots, capacity)
}

/// As [`write_outputs`], for outputs already made descriptors; on a count
/// mismatch they are released here.
pub(super) unsafe fn write_owned_outputs(
    outs: Vec<OwnedTensor>,
    slots: *mut RlxTensor,
    capacity: usize,
) -> PluginResult<usize> {
    if outs.len() > capacity {
        return Err(PluginError::invalid_argument(format!(
            "the op produced {} outputs but the caller has room for {capacity}",
            outs.len()
        )));
    }
    if !outs.is_empty() && slots.is_null() {
        return Err(PluginError::invalid_argument("`outputs` is null"));
    }
    let n = outs.len();
    for (i, t) in outs.into_iter().enumerate() {
        slots.add(i).write(t.into_raw());
    }
    Ok(n)
}

/// Read a struct the caller passed (null is an error naming `what`) by the
/// size rule: fields beyond its `struct_size` read as zero (absent).
///
/// # Safety
/// `p` is null or points at a struct starting with `struct_size`, readable
/// for that size; all-zero is a valid `T`.
pub(super) unsafe fn read_arg<T>(p: *const T, what: &str) -> PluginResult<T> {
    if p.is_null() {
        return Err(PluginError::invalid_argument(format!("`{what}` is null")));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { crate::sized::read_zero_filled(p) })
}

/// Write an out-struct by the size rule for out-structs (docs/ABI.md §2):
/// the caller sets `struct_size` to the size it knows before the call (a
/// caller before 1.3 left 0, meaning the struct's 1.0 size, which for the
/// op list and lowering table is this build's size), and no byte beyond it
/// is written; `struct_size` then says how much was.
pub(super) fn write_out<T: AbiStruct>(out: &mut T, value: T) {
    // SAFETY: `out` is a live &mut T; its first field is the usize
    // struct_size of every ABI struct.
    let declared = unsafe { std::ptr::read(out as *mut T as *const usize) };
    let n = match declared {
        0 => T::STRUCT_SIZE,
        d => d.min(T::STRUCT_SIZE),
    };
    // SAFETY: `value` and `*out` are both T, and n <= size_of::<T>(); then
    // the struct_size field is overwritten with what was written.
    unsafe {
        std::ptr::copy_nonoverlapping(&value as *const T as *const u8, out as *mut T as *mut u8, n);
        std::ptr::write(out as *mut T as *mut usize, n);
    }
}

/// Call `visitor` once per value, each record borrowed for its visit. A
/// visitor without a function is refused before any value is visited.
pub(super) unsafe fn visit_values(
    visitor: &crate::tables::RlxValueVisitor,
    values: Vec<crate::plugin::ValueInfo>,
) -> PluginResult<()> {
    use crate::tables::RlxValueInfo;
    let visit = visitor
        .visit
        .ok_or_else(|| PluginError::invalid_argument("`visitor.visit` is null"))?;
    for v in values {
        let shape: Vec<i64> = v.shape.iter().map(|d| d.map_or(-1, |d| d as i64)).collect();
        let info = RlxValueInfo {
            struct_size: RlxValueInfo::STRUCT_SIZE,
            role: v.role.to_raw(),
            name: crate::strings::RlxStr::from_str(&v.name),
            dtype: v.dtype.to_dl(),
            ndim: shape.len() as i32,
            shape: shape.as_ptr(),
        };
        visit(visitor.ctx, &info);
    }
    Ok(())
}
