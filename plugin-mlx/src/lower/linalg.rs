//! Matrix products.

use super::{arity, Ctx, LResult, Lowering};
use crate::dtype::FLOATS;
use crate::row;
use rlx_mlx_shim::{ops, Array};

pub fn entries() -> Vec<Lowering> {
    vec![row!(
        MatMul,
        FLOATS,
        Native,
        "mx::matmul (batched, broadcast)",
        matmul
    )]
}

fn matmul(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "MatMul")?;
    Ok(ops::matmul(a[0], a[1])?)
}
