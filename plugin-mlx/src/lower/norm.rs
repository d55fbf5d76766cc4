//! Normalisation over the feature (last) axis: LayerNorm and RmsNorm.
//!
//! rlx semantics (rlx-ir `Op::LayerNorm` / `Op::RmsNorm`, computed by
//! rlx-cpu's `exec_layer_norm` / `exec_rms_norm`): inputs `[x, gamma, beta]`,
//! all three required; gamma and beta hold one value per feature of the
//! last axis (any shape that collapses to `[C]`);
//!
//! - LayerNorm: `(x - mean) / sqrt(var + eps) * gamma + beta` (biased var);
//! - RmsNorm:   `x / sqrt(mean(x^2) + eps) * gamma + beta` (plain gamma, not
//!   `1 + gamma`, and an additive beta).
//!
//! Both map onto `mx::fast::{layer_norm, rms_norm}`, whose eps placement is
//! the same. rlx-ir's `axis` field names the feature axis, but every rlx
//! kernel (and rlx-ir's own verifier, which sizes gamma to the last axis)
//! treats the last axis as the feature axis; an `axis` other than the last
//! has no defined meaning we could match, so it is refused ("not lowered").

use super::{arity, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::row;
use rlx_ir::Op;
use rlx_mlx_shim::{fast, ops, Array};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            LayerNorm,
            FLOATS,
            Native,
            "mx::fast::layer_norm over the last axis (axis must be the last)",
            layer_norm
        ),
        row!(
            RmsNorm,
            FLOATS,
            Composite,
            "mx::fast::rms_norm over the last axis, + beta (axis must be the last)",
            rms_norm
        ),
    ]
}

/// Which normalisation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Norm {
    Layer,
    Rms,
}

/// Check that `axis` names the last axis of a rank-`rank` input.
pub(crate) fn check_last_axis(op: &str, axis: i32, rank: usize) -> LResult<()> {
    let r = rank as i32;
    if rank == 0 {
        return Err(format!("{op} of a scalar is not lowered").into());
    }
    if axis == -1 || axis == r - 1 {
        return Ok(());
    }
    Err(format!(
        "{op} over axis {axis} of a rank-{rank} input is not lowered: rlx normalises \
         the last axis only (gamma/beta are sized to it)"
    )
    .into())
}

/// gamma or beta as a `[C]` vector of dtype `dt`.
fn affine(name: &str, a: &Array, c: i32, dt: rlx_mlx_shim::DType) -> LResult {
    if a.size() != c as usize {
        return Err(format!(
            "{name} has {} elements but the normalised axis has {c}",
            a.size()
        )
        .into());
    }
    let v = ops::reshape(a, &[c])?;
    Ok(if v.dtype() != dt {
        ops::astype(&v, dt)?
    } else {
        v
    })
}

/// Normalise `x` over its last axis with the affine `gamma` / `beta`,
/// then reshape to `out_dims` (RmsNorm may declare a leading-flattened
/// output). Computed in dtype `dt`.
pub(crate) fn normalise(
    kind: Norm,
    x: &Array,
    gamma: &Array,
    beta: &Array,
    eps: f32,
    dt: rlx_mlx_shim::DType,
    out_dims: &[i32],
) -> LResult {
    let dims = x.shape();
    let c = *dims
        .last()
        .ok_or("normalisation of a scalar is not lowered")?;
    let xc: A = if x.dtype() != dt {
        ops::astype(x, dt)?
    } else {
        x.clone_handle()
    };
    let g = affine("gamma", gamma, c, dt)?;
    let b = affine("beta", beta, c, dt)?;
    let y = match kind {
        Norm::Layer => fast::layer_norm(&xc, Some(&g), Some(&b), eps)?,
        Norm::Rms => {
            let n = fast::rms_norm(&xc, Some(&g), eps)?;
            ops::add(&n, &b)?
        }
    };
    Ok(if y.shape() != out_dims {
        ops::reshape(&y, out_dims)?
    } else {
        y
    })
}

fn layer_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "LayerNorm")?;
    let Op::LayerNorm { axis, eps } = &cx.node.op else {
        unreachable!()
    };
    check_last_axis("LayerNorm", *axis, a[0].ndim())?;
    normalise(
        Norm::Layer,
        a[0],
        a[1],
        a[2],
        *eps,
        cx.out_dtype(),
        &cx.out_dims(),
    )
}

fn rms_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "RmsNorm")?;
    let Op::RmsNorm { axis, eps } = &cx.node.op else {
        unreachable!()
    };
    check_last_axis("RmsNorm", *axis, a[0].ndim())?;
    normalise(
        Norm::Rms,
        a[0],
        a[1],
        a[2],
        *eps,
        cx.out_dtype(),
        &cx.out_dims(),
    )
}
