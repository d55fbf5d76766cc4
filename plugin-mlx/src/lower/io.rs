//! Graph leaves: inputs and params are bound by the executable; constants
//! carry their bytes inline.

use super::{Ctx, LResult, Lowering};
use crate::dtype::LEAVES;
use crate::row;
use rlx_mlx_shim::Array;

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(Input, LEAVES, Native, "bound at run time", leaf),
        row!(Param, LEAVES, Native, "bound by name (bind_param)", leaf),
        row!(
            Constant,
            LEAVES,
            Native,
            "array from inline bytes",
            constant
        ),
    ]
}

fn constant(cx: &Ctx, _args: &[&Array]) -> LResult {
    crate::op_fields!(cx, Constant { data });
    let dims = cx.out_dims();
    let want = dims
        .iter()
        .try_fold(cx.out_ir_dtype().size_bytes(), |n, d| {
            usize::try_from(*d).ok().and_then(|d| n.checked_mul(d))
        });
    if want != Some(data.len()) {
        return Err(format!(
            "constant holds {} bytes, its shape needs {}",
            data.len(),
            want.map_or_else(|| "more than 2^64".to_string(), |w| w.to_string())
        )
        .into());
    }
    Ok(rlx_mlx_shim::array::array_from_bytes(
        data,
        &dims,
        cx.out_dtype(),
    )?)
}
