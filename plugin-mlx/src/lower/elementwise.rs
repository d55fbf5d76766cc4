//! Elementwise ops: binary arithmetic and casts.

use super::{arity, Ctx, LResult, Lowering};
use crate::dtype::{ALL, FLOATS};
use crate::row;
use rlx_ir::op::BinaryOp;
use rlx_ir::Op;
use rlx_mlx_shim::{ops, Array};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Binary,
            FLOATS,
            Native,
            "Add Sub Mul Div Max Min Pow (numpy broadcasting)",
            binary
        ),
        row!(Cast, ALL, Native, "mx::astype", cast),
    ]
}

fn binary(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "Binary")?;
    let Op::Binary(op) = &cx.node.op else {
        unreachable!()
    };
    let (x, y) = (a[0], a[1]);
    Ok(match op {
        BinaryOp::Add => ops::add(x, y)?,
        BinaryOp::Sub => ops::subtract(x, y)?,
        BinaryOp::Mul => ops::multiply(x, y)?,
        BinaryOp::Div => ops::divide(x, y)?,
        BinaryOp::Max => ops::maximum(x, y)?,
        BinaryOp::Min => ops::minimum(x, y)?,
        BinaryOp::Pow => ops::power(x, y)?,
        other => return Err(format!("Binary {other:?} is not lowered").into()),
    })
}

fn cast(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Cast")?;
    Ok(ops::astype(a[0], cx.out_dtype())?)
}
