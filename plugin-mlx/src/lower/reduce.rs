//! Reductions and softmax.
//!
//! rlx-cpu promotes f16/bf16 graphs to f32 and computes there, so the
//! accumulating reductions (Sum, Mean, Prod) and softmax run in f32 here too
//! and are rounded to the declared dtype once, at the end.

use super::{arity, axis, Ctx, LResult, Lowering};
use crate::dtype::FLOATS;
use crate::row;
use rlx_ir::op::ReduceOp;
use rlx_mlx_shim::{ops, Array, DType as MxDType};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Reduce,
            FLOATS,
            Native,
            "mx::sum/mean/max/min/prod over any non-empty axis set (f32 \
             accumulation for half types), reshaped to the declared dims",
            reduce
        ),
        row!(
            Softmax,
            FLOATS,
            Native,
            "mx::softmax(axis, precise=true): max-subtracted, f32 inside for \
             half types",
            softmax
        ),
    ]
}

fn is_half(d: MxDType) -> bool {
    matches!(d, MxDType::F16 | MxDType::BF16)
}

fn reduce(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Reduce")?;
    crate::op_fields!(cx, Reduce { op, axes, keep_dim });
    let rank = cx.in_dims(0).len();
    if axes.is_empty() {
        // The shape rule makes it an identity, ONNX a reduce-all, and rlx-cpu
        // refuses it: no answer to match.
        return Err(format!("Reduce {op:?} over an empty axis list is not supported").into());
    }
    let mut ax: Vec<i32> = Vec::with_capacity(axes.len());
    for &x in axes {
        if x >= rank {
            return Err(format!("Reduce axis {x} is out of range for rank {rank}").into());
        }
        ax.push(axis(x as i64, rank)?);
    }
    ax.sort_unstable();
    ax.dedup();
    let x = a[0];
    let accumulates = matches!(op, ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod);
    let widened;
    let x = if accumulates && is_half(x.dtype()) {
        widened = ops::astype(x, MxDType::F32)?;
        &*widened
    } else {
        x
    };
    let r = match op {
        ReduceOp::Sum => ops::sum(x, &ax, *keep_dim)?,
        ReduceOp::Mean => ops::mean(x, &ax, *keep_dim)?,
        ReduceOp::Max => ops::max(x, &ax, *keep_dim)?,
        ReduceOp::Min => ops::min(x, &ax, *keep_dim)?,
        ReduceOp::Prod => ops::prod(x, &ax, *keep_dim)?,
    };
    // A full reduction may be declared [] or [1]; both hold one element.
    let out = cx.out_dims();
    if r.shape() != out {
        let n: i64 = out.iter().map(|d| *d as i64).product();
        if n != r.size() as i64 {
            return Err(format!(
                "Reduce {op:?} over {axes:?} (keep_dim {keep_dim}) gives {:?}, the node declares {out:?}",
                r.shape()
            )
            .into());
        }
        return Ok(ops::reshape(&r, &out)?);
    }
    Ok(r)
}

fn softmax(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Softmax")?;
    crate::op_fields!(cx, Softmax { axis: ax });
    let rank = cx.in_dims(0).len();
    if rank == 0 {
        return Err("Softmax of a 0-d value is not supported".into());
    }
    let ax = axis(*ax as i64, rank)?;
    Ok(ops::softmax(a[0], &[ax], true)?)
}
