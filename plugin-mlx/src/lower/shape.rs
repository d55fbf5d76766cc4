//! Shape ops: data movement (reshape, transpose, narrow, concat, expand),
//! gather, and StopGradient (the identity forward). The node's declared shape is authoritative, as on rlx-cpu:
//! reshape and expand target the declared dims (`new_shape` /
//! `target_shape` are not consulted; a reshape must keep the element count,
//! an expand must be a numpy broadcast), and the executable checks every
//! result against them.

use super::{arity, numel, Ctx, LResult, Lowering};
use crate::lower::I32;
use crate::row;
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{ops, Array, ArrayList, DType as MxDType};

/// The data-movement ops and gather copy elements and never compute, so
/// every dtype is moved (each is tested).
const MOVE: &[IrDType] = crate::dtype::ALL;
const GATHER: &[IrDType] = crate::dtype::ALL;
/// The dtypes rlx-cpu passes through StopGradient by bytes.
const STOP_GRADIENT: &[IrDType] = &[
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::F64,
    IrDType::I32,
    IrDType::I64,
];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            StopGradient,
            STOP_GRADIENT,
            Native,
            "mx::stop_gradient (identity forward)",
            stop_gradient
        ),
        row!(
            Reshape,
            MOVE,
            Native,
            "mx::reshape to the declared dims (element count checked)",
            reshape
        ),
        row!(Transpose, MOVE, Native, "mx::transpose(perm)", transpose),
        row!(
            Narrow,
            MOVE,
            Native,
            "mx::slice [start, start+len) on one axis",
            narrow
        ),
        row!(
            Concat,
            MOVE,
            Native,
            "mx::concatenate of N inputs on one axis",
            concat
        ),
        row!(
            DynamicUpdateSlice,
            MOVE,
            Native,
            "mx::slice_update at a run-time start (clamped), in place when nothing else holds the operand",
            dynamic_update_slice
        ),
        row!(
            Expand,
            MOVE,
            Native,
            "mx::broadcast_to the declared dims (numpy rules, leading 1s)",
            expand
        ),
        row!(
            Gather,
            GATHER,
            Composite,
            "mx::take on an axis; indices truncated toward zero, negatives read \
             row 0 and out-of-range rows give zeros (rlx-cpu's semantics)",
            gather
        ),
    ]
}

fn reshape(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Reshape")?;
    crate::op_fields!(cx, Reshape { new_shape });
    let out = cx.out_dims();
    let inp = cx.in_dims(0);
    if numel(&out) != numel(&inp) {
        return Err(format!(
            "Reshape of {inp:?} ({} elements) to the declared {out:?} ({} elements, \
             new_shape {new_shape:?}) changes the element count",
            numel(&inp),
            numel(&out)
        )
        .into());
    }
    Ok(ops::reshape(a[0], &out)?)
}

fn transpose(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Transpose")?;
    crate::op_fields!(cx, Transpose { perm });
    let rank = cx.in_dims(0).len();
    let mut seen = vec![false; rank];
    for &p in perm {
        if p >= rank || seen[p] {
            return Err(
                format!("Transpose perm {perm:?} is not a permutation of rank {rank}").into(),
            );
        }
        seen[p] = true;
    }
    if perm.len() != rank {
        return Err(format!("Transpose perm {perm:?} is not a permutation of rank {rank}").into());
    }
    let p: Vec<i32> = perm.iter().map(|p| p.i32()).collect::<LResult<_>>()?;
    Ok(ops::transpose(a[0], &p)?)
}

/// `operand` with `update` written at a run-time `start` along `axis`
/// (`[operand, update, start]`), the start clamped into
/// `[0, extent - rows]` as rlx-ir (and JAX) define it. MLX writes into the
/// operand's buffer when nothing else holds it (a decode cache's row, O(1)
/// in the context); otherwise it copies first, as the ScatterNd rlx would
/// lower it to always does.
fn dynamic_update_slice(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "DynamicUpdateSlice")?;
    crate::op_fields!(cx, DynamicUpdateSlice { axis });
    let (od, ud) = (cx.in_dims(0), cx.in_dims(1));
    if *axis >= od.len()
        || ud.len() != od.len()
        || od
            .iter()
            .zip(&ud)
            .enumerate()
            .any(|(i, (o, u))| i != *axis && o != u)
        || ud[*axis] > od[*axis]
    {
        return Err(format!(
            "DynamicUpdateSlice on axis {axis}: update {ud:?} does not fit operand {od:?}"
        )
        .into());
    }
    if numel(&cx.in_dims(2)) != 1 {
        return Err(format!(
            "DynamicUpdateSlice: start {:?} must hold one element",
            cx.in_dims(2)
        )
        .into());
    }
    let last = od[*axis] - ud[*axis];
    // Every cache write of a step starts at one position: clamped once.
    let start = cx
        .memo
        .get_or(cx.input(2), "update start", last.into(), || {
            let start = ops::reshape(a[2], &[1])?;
            // Floats truncate toward zero, as rlx-cpu reads an f32 start.
            let start = ops::astype(&start, MxDType::F32)?;
            let start = ops::clip(&start, 0.0, last.into())?;
            Ok(ops::astype(&start, MxDType::I32)?)
        })?;
    let update = ops::astype(a[1], a[0].dtype())?;
    Ok(ops::slice_update_dynamic(
        a[0],
        &update,
        &start,
        &[(*axis).i32()?],
    )?)
}

fn narrow(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Narrow")?;
    crate::op_fields!(cx, Narrow { axis, start, len });
    let dims = cx.in_dims(0);
    if *axis >= dims.len() {
        return Err(format!("Narrow axis {axis} is out of range for rank {}", dims.len()).into());
    }
    let extent = dims[*axis] as usize;
    if start + len > extent {
        return Err(format!(
            "Narrow window [{start}, {}) exceeds axis {axis} of extent {extent}",
            start + len
        )
        .into());
    }
    let lo: Vec<i32> = (0..dims.len())
        .map(|i| if i == *axis { start.i32() } else { Ok(0) })
        .collect::<LResult<_>>()?;
    let hi: Vec<i32> = dims
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i == *axis {
                (start + len).i32()
            } else {
                Ok(*d)
            }
        })
        .collect::<LResult<_>>()?;
    let strides = vec![1; dims.len()];
    Ok(ops::slice(a[0], &lo, &hi, &strides)?)
}

fn concat(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, Concat { axis });
    if a.is_empty() {
        return Err("Concat takes at least one input, got 0".into());
    }
    let rank = cx.out_dims().len();
    if *axis >= rank {
        return Err(format!("Concat axis {axis} is out of range for rank {rank}").into());
    }
    // Inputs of another dtype than the output (the graph allows it) are
    // cast first, so mx::concatenate's type promotion never decides.
    let dt = cx.out_dtype();
    let cast: Vec<_> = a
        .iter()
        .map(|x| {
            if x.dtype() == dt {
                Ok(x.clone_handle())
            } else {
                ops::astype(x, dt)
            }
        })
        .collect::<Result<_, _>>()?;
    let list = ArrayList::from_arrays(cast.iter().map(|x| &**x));
    Ok(ops::concatenate(&list, (*axis).i32()?)?)
}

fn expand(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Expand")?;
    let out = cx.out_dims();
    if out.len() < cx.in_dims(0).len() {
        return Err(format!("Expand of {:?} to {out:?} lowers the rank", cx.in_dims(0)).into());
    }
    Ok(ops::broadcast_to(a[0], &out)?)
}

/// rlx-cpu's gather reads index `i` as `i as usize` (f32 indices: truncated
/// toward zero, negatives and NaN saturate to 0; i64 indices: negatives
/// clamp to 0) and skips an index `>= axis extent`, leaving that output
/// slice unwritten. MLX's `take` wraps negatives and does not bound-check,
/// so the indices are normalised here first: negative/NaN → 0, truncated,
/// and every out-of-range index reads row 0 and is then zeroed (a fresh
/// output buffer's contents on the CPU). No MLX read ever leaves the table.
fn gather(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "Gather")?;
    crate::op_fields!(cx, Gather { axis });
    let tdims = cx.in_dims(0);
    if *axis >= tdims.len() {
        return Err(format!(
            "Gather axis {axis} is out of range for rank {}",
            tdims.len()
        )
        .into());
    }
    let extent = tdims[*axis];
    if extent == 0 {
        return Err("Gather from an empty axis is not supported".into());
    }
    let (table, idx) = (a[0], a[1]);
    let idt = idx.dtype();
    if *axis == 0 && super::cpu_f32(&[table, idx]) {
        // An embedding lookup: one task instead of the 17 ops below.
        return Ok(rlx_mlx_shim::kernels::gather_rows_cpu(table, idx)?);
    }
    let (safe, valid) = match idt {
        MxDType::F32 | MxDType::F16 | MxDType::BF16 | MxDType::F64 => {
            // Compare in f32 at least (an f16 index above 2048 is still an
            // integer; bf16 above 256 too: both are exact in f32).
            let i = if idt == MxDType::F64 {
                idx.clone_handle()
            } else {
                ops::astype(idx, MxDType::F32)?
            };
            let zero = super::scalar(0.0, i.dtype())?;
            let nan = ops::isnan(&i)?;
            let i = ops::where_(&nan, &zero, &i)?;
            let i = ops::maximum(&i, &zero)?;
            let i = ops::floor(&i)?;
            let lim = super::scalar(extent as f64, i.dtype())?;
            let valid = ops::less(&i, &lim)?;
            let safe = ops::where_(&valid, &i, &zero)?;
            (ops::astype(&safe, MxDType::I32)?, valid)
        }
        MxDType::I8 | MxDType::I16 | MxDType::I32 | MxDType::I64 | MxDType::U8 | MxDType::U32 => {
            let zero = super::scalar(0.0, idt)?;
            let i = ops::maximum(idx, &zero)?;
            let lim = super::scalar(extent as f64, idt)?;
            let valid = ops::less(&i, &lim)?;
            let safe = ops::where_(&valid, &i, &zero)?;
            (ops::astype(&safe, MxDType::I32)?, valid)
        }
        other => return Err(format!("Gather with {other} indices is not supported").into()),
    };
    let got = ops::take(table, &safe, (*axis).i32()?)?;
    // `valid` has the indices' shape; the output is
    // table[:axis] ++ indices ++ table[axis+1:]: give it trailing unit axes
    // and let it broadcast over the leading ones.
    let trailing = tdims.len() - axis - 1;
    let mut vshape = valid.shape();
    vshape.extend(std::iter::repeat_n(1, trailing));
    let valid = ops::reshape(&valid, &vshape)?;
    let zeros = super::scalar(0.0, got.dtype())?;
    Ok(ops::where_(&valid, &got, &zeros)?)
}

fn stop_gradient(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "StopGradient")?;
    Ok(ops::stop_gradient(a[0])?)
}
