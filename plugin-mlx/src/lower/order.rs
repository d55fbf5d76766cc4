//! Ordering and selection: Reverse, Cumsum, ArgMax/ArgMin, TopK.
//!
//! Semantics are rlx-cpu's (rlx 0.2.19):
//! - the CPU backend widens f16/bf16 (and i32) to an f32 arena, so scans and
//!   cumulative sums on half dtypes accumulate in f32 here too and round once;
//! - ArgMax/ArgMin keep the first hit of a strict `>`/`<` scan started at
//!   element 0: a NaN at element 0 wins, any other NaN is skipped;
//! - TopK is repeated argmax with masking to -inf: values sorted descending,
//!   ties to the smaller index, a NaN at element 0 comes first, other NaNs
//!   and -inf are never chosen and the slots left over read index 0.

use super::{arity, axis, scalar, Ctx, LResult, Lowering};
use crate::lower::I32;
use crate::row;
use rlx_ir::{DType as IrDType, Op};
use rlx_mlx_shim::{array, ops, Array, DType as MxDType};

/// Pure data movement: every dtype rlx-cpu moves by bytes and MLX holds.
const MOVE: &[IrDType] = &[
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::F64,
    IrDType::I32,
    IrDType::I64,
];
/// rlx-cpu's Cumsum kernel: f32 (f16/bf16 widened to it), i32, i64.
const CUMSUM: &[IrDType] = &[
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::I32,
    IrDType::I64,
];
/// Index outputs rlx-cpu writes correctly: f32-encoded (and the dtypes the
/// CPU arena widens to f32); TopK also writes i64.
const ARG_OUT: &[IrDType] = &[IrDType::F32, IrDType::F16, IrDType::BF16, IrDType::I32];
const TOPK_OUT: &[IrDType] = &[
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::I32,
    IrDType::I64,
];
/// Inputs the CPU's argreduce/top-k kernels read correctly (as f32).
const SELECT_IN: &[IrDType] = &[IrDType::F32, IrDType::F16, IrDType::BF16, IrDType::I32];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Reverse,
            MOVE,
            Native,
            "mx::flip over the listed axes (each once)",
            reverse
        ),
        row!(
            Cumsum,
            CUMSUM,
            Native,
            "mx::cumsum (inclusive, or exclusive), any axis; f16/bf16 accumulate in f32",
            cumsum
        ),
        row!(
            ArgMax,
            ARG_OUT,
            Composite,
            "mx::argmax (first hit) with rlx's NaN rule (NaN at element 0 wins, other NaNs skipped)",
            argmax
        ),
        row!(
            ArgMin,
            ARG_OUT,
            Composite,
            "mx::argmin (first hit) with rlx's NaN rule (NaN at element 0 wins, other NaNs skipped)",
            argmin
        ),
        row!(
            TopK,
            TOPK_OUT,
            Composite,
            "indices of the k largest along the last axis: stable mx::argsort of -x, first k; rlx's NaN/-inf rule",
            top_k
        ),
    ]
}

fn is_half(d: IrDType) -> bool {
    matches!(d, IrDType::F16 | IrDType::BF16)
}

fn is_float(d: IrDType) -> bool {
    matches!(d, IrDType::F32 | IrDType::F16 | IrDType::BF16)
}

fn to_f32(a: &Array) -> LResult {
    Ok(ops::astype(a, MxDType::F32)?)
}

fn reverse(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Reverse")?;
    crate::op_fields!(cx, Reverse { axes });
    let rank = cx.in_dims(0).len();
    // rlx-cpu flips each listed axis once, however often it is listed.
    let mut flip: Vec<i32> = Vec::new();
    for &ax in axes {
        if ax >= rank {
            return Err(
                format!("Reverse axis {ax} on a rank-{rank} input is not supported").into(),
            );
        }
        if !flip.contains(&(ax.i32()?)) {
            flip.push(ax.i32()?);
        }
    }
    if flip.is_empty() {
        return Ok(a[0].clone_handle());
    }
    Ok(ops::flip(a[0], &flip)?)
}

fn cumsum(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Cumsum")?;
    crate::op_fields!(
        cx,
        Cumsum {
            axis: ax,
            exclusive,
        }
    );
    let dims = cx.in_dims(0);
    if dims.is_empty() {
        return Err("Cumsum of a rank-0 input is not supported".into());
    }
    let ax = axis(*ax as i64, dims.len())?;
    let dt = cx.in_dtype(0);
    if !CUMSUM.contains(&dt) {
        return Err(format!("Cumsum of a {dt:?} input is not supported").into());
    }
    let x = if is_half(dt) {
        to_f32(a[0])?
    } else {
        a[0].clone_handle()
    };
    Ok(ops::cumsum(&x, ax, false, !exclusive)?)
}

/// The selection input as f32 (what rlx-cpu's kernels compare), or an error
/// for inputs its kernels do not read correctly.
fn select_input(cx: &Ctx, x: &Array, op: &str) -> LResult {
    let dt = cx.in_dtype(0);
    if !SELECT_IN.contains(&dt) {
        return Err(format!("{op} of a {dt:?} input is not supported").into());
    }
    if dt == IrDType::F32 {
        Ok(x.clone_handle())
    } else {
        to_f32(x)
    }
}

/// `x[..., 0:1, ...]` along `ax`.
fn first_along(x: &Array, dims: &[i32], ax: usize) -> LResult {
    let start = vec![0; dims.len()];
    let mut stop = dims.to_vec();
    stop[ax] = 1;
    Ok(ops::slice(x, &start, &stop, &vec![1; dims.len()])?)
}

fn arg_reduce(cx: &Ctx, a: &[&Array], is_max: bool) -> LResult {
    let op = if is_max { "ArgMax" } else { "ArgMin" };
    arity(a, 1, op)?;
    let (Op::ArgMax { axis: ax, keep_dim } | Op::ArgMin { axis: ax, keep_dim }) = &cx.node.op
    else {
        return Err(super::wrong_op(op, cx));
    };
    let dims = cx.in_dims(0);
    if *ax >= dims.len() {
        return Err(format!("{op} axis {ax} is out of range for rank {}", dims.len()).into());
    }
    if dims[*ax] == 0 {
        return Err(format!("{op} over an empty axis is not supported").into());
    }
    let x = select_input(cx, a[0], op)?;
    let ax_i = (*ax).i32()?;
    let pick = |v: &Array| -> LResult {
        Ok(if is_max {
            ops::argmax(v, ax_i, true)?
        } else {
            ops::argmin(v, ax_i, true)?
        })
    };
    let idx = if is_float(cx.in_dtype(0)) {
        // rlx scans `v > best` from element 0: NaNs never win, except a NaN
        // at element 0, which nothing beats.
        let nan = ops::isnan(&x)?;
        let fill = scalar(
            if is_max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            },
            MxDType::F32,
        )?;
        let clean = ops::where_(&nan, &fill, &x)?;
        let idx = pick(&clean)?;
        let first = first_along(&x, &dims, *ax)?;
        let nan0 = ops::isnan(&first)?;
        let zero = scalar(0.0, idx.dtype())?;
        ops::where_(&nan0, &zero, &idx)?
    } else {
        pick(&x)?
    };
    Ok(if *keep_dim {
        idx
    } else {
        ops::squeeze(&idx, &[ax_i])?
    })
}

fn argmax(cx: &Ctx, a: &[&Array]) -> LResult {
    arg_reduce(cx, a, true)
}

fn argmin(cx: &Ctx, a: &[&Array]) -> LResult {
    arg_reduce(cx, a, false)
}

fn top_k(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "TopK")?;
    crate::op_fields!(cx, TopK { k });
    let dims = cx.in_dims(0);
    let Some(&n) = dims.last() else {
        return Err("TopK of a rank-0 input is not supported".into());
    };
    if *k == 0 || *k > n as usize {
        return Err(format!("TopK k={k} over a last axis of {n} is not supported").into());
    }
    let x = select_input(cx, a[0], "TopK")?;
    let last = dims.len().i32()? - 1;
    // Keys sorted ascending by a stable sort = values descending, ties to the
    // smaller index. NaN and -inf are never chosen by rlx (key +inf, after
    // every valid element); a NaN at element 0 is chosen first (key -inf,
    // and the stable sort puts index 0 before any +inf value).
    let nan = ops::isnan(&x)?;
    let neg_inf = scalar(f64::NEG_INFINITY, MxDType::F32)?;
    let pos_inf = scalar(f64::INFINITY, MxDType::F32)?;
    let is_neg_inf = ops::equal(&x, &neg_inf)?;
    let bad = ops::logical_or(&nan, &is_neg_inf)?;
    let cols = array::arange(0.0, n as f64, 1.0, MxDType::I32)?;
    let zero_i = scalar(0.0, MxDType::I32)?;
    let col0 = ops::equal(&cols, &zero_i)?;
    let nan0 = ops::logical_and(&nan, &col0)?;
    let neg = ops::negative(&x)?;
    let key = ops::where_(&bad, &pos_inf, &neg)?;
    let key = ops::where_(&nan0, &neg_inf, &key)?;
    let order = ops::argsort(&key, last)?;
    let mut start = vec![0; dims.len()];
    let mut stop = dims.clone();
    start[last as usize] = 0;
    stop[last as usize] = (*k).i32()?;
    let order = ops::slice(&order, &start, &stop, &vec![1; dims.len()])?;
    // Past the valid elements every remaining value is -inf to rlx's scan,
    // which then reads index 0.
    let good = ops::logical_not(&bad)?;
    let valid = ops::logical_or(&good, &nan0)?;
    let valid = ops::astype(&valid, MxDType::I32)?;
    let count = ops::sum(&valid, &[last], true)?;
    let pos = array::arange(0.0, *k as f64, 1.0, MxDType::I32)?;
    let keep = ops::less(&pos, &count)?;
    let zero = scalar(0.0, order.dtype())?;
    Ok(ops::where_(&keep, &order, &zero)?)
}
