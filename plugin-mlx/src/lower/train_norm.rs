//! Normalisation backward ops (issue #15, training): the adjoints of the
//! forward lowerings in `norm.rs`, with the same semantics (biased
//! variance, `eps` inside the square root, gamma/beta one value per
//! feature or channel).
//!
//! rlx-ir 0.2.19 (`src/op.rs`, builders in `src/ops/backward.rs`), with
//! `x̂` the normalised input recomputed from `x` and `inv = 1/sqrt(var + eps)`:
//!
//! - `LayerNormBackwardInput { axis, eps }` `[x, gamma, dy]` → `dx` shaped
//!   like `x`: `inv · (dy·γ − mean(dy·γ) − x̂ · mean(dy·γ·x̂))` over the last
//!   axis. gamma holds one value per feature (any shape of that size).
//! - `LayerNormBackwardGamma { axis, eps }` `[x, dy]` → the declared gamma
//!   shape (C elements): `Σ_rows dy · x̂`.
//!
//!   As in the forward, `axis` must name the last axis: rlx-cpu normalises
//!   the last axis whatever `axis` says, the forward lowering refuses any
//!   other, and so do these ("not lowered").
//! - `GroupNormBackwardInput { num_groups, eps }` `[x, gamma, beta, dy]` →
//!   `dx` shaped like `x` (beta does not enter): per sample and group of
//!   `C/G` consecutive channels, the LayerNorm formula above over the
//!   group's `C/G × spatial` values with `γ` per channel.
//! - `GroupNormBackwardGamma` `[x, dy]` → the declared gamma shape:
//!   `dγ[c] = Σ_{n, spatial} dy · x̂`.
//! - `GroupNormBackwardBeta` `[x, dy]` → the declared beta shape:
//!   `dβ[c] = Σ_{n, spatial} dy`.
//!
//!   GroupNorm takes NCL (rank 3) and NCHW (rank 4) like the forward
//!   lowering (rlx-cpu's backward kernels read rank 4 only); other ranks
//!   and `num_groups` that is 0 or does not divide C are refused, as the
//!   forward refuses them (the forward leaves the remainder channels
//!   undefined, so no gradient is defined either). The three are lowered
//!   as a reshape to `[N, G, C/G·spatial]` and reductions over the last axis.
//! - `AdaLayerNormBackward { norm, eps }` `[x, scale, shift, dy]` → 1-D
//!   `[dx ∥ dscale ∥ dshift]` (numels `nx`, `ns`, `ns`), the adjoint of
//!   `y = n(x) · (1 + scale) + shift` with `n` over the last axis, no affine:
//!   with `dn = dy · (1 + scale)`,
//!   - `AdaNormKind::LayerNorm`: `n = x̂`, `dx = inv · (dn − mean(dn) − n · mean(dn·n))`;
//!   - `AdaNormKind::RmsNorm`: `n = x · inv`, `inv = 1/sqrt(mean(x²) + eps)`,
//!     `dx = inv · (dn − n · mean(dn·n))`;
//!
//!   `dscale = Σ dy · n`, `dshift = Σ dy`, each summed over the axes the
//!   modulation broadcasts across. scale and shift share one shape that
//!   broadcasts over x's leading axes and ends in the feature dim (the
//!   forward lowering's contract); anything else is refused.
//!
//! Everything computes in f32 (as rlx-cpu does) and is rounded once to the
//! declared dtype.

use super::norm::{check_last_axis, f32_of};
use super::{arity, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::AdaNormKind;
use rlx_mlx_shim::{ops, Array, ArrayList};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            LayerNormBackwardInput,
            FLOATS,
            Composite,
            "inv*(dy*g - mean(dy*g) - xh*mean(dy*g*xh)) over the last axis, statistics \
             recomputed (in f32); axis must be the last",
            layer_norm_backward_input
        ),
        row!(
            LayerNormBackwardGamma,
            FLOATS,
            Composite,
            "sum over the leading axes of dy*xh, xh recomputed (in f32); axis must be the last",
            layer_norm_backward_gamma
        ),
        row!(
            GroupNormBackwardInput,
            FLOATS,
            Composite,
            "NCHW/NCL: reshape [N, G, C/G*spatial], LayerNorm input adjoint per group with \
             per-channel gamma (in f32); C % G != 0 not lowered",
            group_norm_backward_input
        ),
        row!(
            GroupNormBackwardGamma,
            FLOATS,
            Composite,
            "NCHW/NCL: sum over batch and spatial of dy*xh per channel, xh recomputed per \
             group (in f32); C % G != 0 not lowered",
            group_norm_backward_gamma
        ),
        row!(
            GroupNormBackwardBeta,
            FLOATS,
            Composite,
            "NCHW/NCL: sum over batch and spatial of dy per channel (in f32); C % G != 0 \
             not lowered",
            group_norm_backward_beta
        ),
        row!(
            AdaLayerNormBackward,
            FLOATS,
            Composite,
            "packed [dx | dscale | dshift]: LayerNorm / RmsNorm adjoint without affine over \
             the last axis, dscale/dshift summed over the modulation's broadcast axes (in f32)",
            ada_layer_norm_backward
        ),
    ]
}

/// `(x̂, inv)` of `x` normalised over axis `ax` (kept as size 1 in `inv`):
/// biased variance, `inv = 1/sqrt(var + eps)`; with `center` false the RMS
/// form `x̂ = x / sqrt(mean(x²) + eps)`.
fn normalised(x: &Array, ax: i32, eps: f32, center: bool) -> LResult<(A, A)> {
    let xc: A = if center {
        ops::subtract(x, &*ops::mean(x, &[ax], true)?)?
    } else {
        x.clone_handle()
    };
    let ms = ops::mean(&*ops::square(&xc)?, &[ax], true)?;
    let eps = super::scalar(eps as f64, rlx_mlx_shim::DType::F32)?;
    let inv = ops::rsqrt(&*ops::add(&ms, &eps)?)?;
    Ok((ops::multiply(&xc, &inv)?, inv))
}

/// The input adjoint of a normalisation over axis `ax` given the upstream
/// gradient `sy` of the normalised value `xh` (already times gamma / the
/// modulation): `inv · (sy − mean(sy) − xh · mean(sy·xh))`, the `mean(sy)`
/// term only when the norm centres.
fn input_adjoint(sy: &Array, xh: &Array, inv: &Array, ax: i32, center: bool) -> LResult {
    let proj = ops::multiply(xh, &*ops::mean(&*ops::multiply(sy, xh)?, &[ax], true)?)?;
    let mut d = ops::subtract(sy, &proj)?;
    if center {
        d = ops::subtract(&d, &*ops::mean(sy, &[ax], true)?)?;
    }
    Ok(ops::multiply(&d, inv)?)
}

/// An affine vector with one value per feature: check its size, as `[c]` f32.
fn per_feature(op: &str, name: &str, a: &Array, c: i32) -> LResult {
    if a.size() != c as usize {
        return Err(format!(
            "{op}: {name} has {} elements but the normalised axis has {c}",
            a.size()
        )
        .into());
    }
    Ok(ops::reshape(&*f32_of(a)?, &[c])?)
}

/// The declared output must hold one value per feature / channel.
fn check_out_size(op: &str, cx: &Ctx, c: i32) -> LResult<()> {
    let n: i64 = cx.out_dims().iter().map(|d| *d as i64).product();
    if n != c as i64 {
        return Err(format!(
            "{op} declares {:?} ({n} elements) but the normalised axis has {c} features",
            cx.out_dims()
        )
        .into());
    }
    Ok(())
}

fn check_same(op: &str, x: &Array, dy: &Array) -> LResult<()> {
    if x.shape() != dy.shape() {
        return Err(format!("{op}: dy {:?} does not match x {:?}", dy.shape(), x.shape()).into());
    }
    Ok(())
}

fn layer_norm_backward_input(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "LayerNormBackwardInput")?;
    crate::op_fields!(cx, LayerNormBackwardInput { axis, eps });
    let (x, gamma, dy) = (a[0], a[1], a[2]);
    check_last_axis("LayerNormBackwardInput", *axis, x.ndim())?;
    check_same("LayerNormBackwardInput", x, dy)?;
    let c = *x.shape().last().expect("rank checked");
    let g = per_feature("LayerNormBackwardInput", "gamma", gamma, c)?;
    let (xh, inv) = normalised(&*f32_of(x)?, -1, *eps, true)?;
    let sy = ops::multiply(&*f32_of(dy)?, &g)?;
    input_adjoint(&sy, &xh, &inv, -1, true)
}

fn layer_norm_backward_gamma(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "LayerNormBackwardGamma")?;
    crate::op_fields!(cx, LayerNormBackwardGamma { axis, eps });
    let (x, dy) = (a[0], a[1]);
    check_last_axis("LayerNormBackwardGamma", *axis, x.ndim())?;
    check_same("LayerNormBackwardGamma", x, dy)?;
    let c = *x.shape().last().expect("rank checked");
    check_out_size("LayerNormBackwardGamma", cx, c)?;
    let (xh, _) = normalised(&*f32_of(x)?, -1, *eps, true)?;
    let p = ops::reshape(&*ops::multiply(&*f32_of(dy)?, &xh)?, &[-1, c])?;
    Ok(ops::reshape(&*ops::sum(&p, &[0], false)?, &cx.out_dims())?)
}

/// `[N, C, spatial..]` of a GroupNorm operand, checked as the forward
/// lowering checks it (rank 3 or 4; G > 0 divides C).
fn group_dims(op: &str, x: &Array, dy: &Array, g: usize) -> LResult<Vec<i32>> {
    let d = x.shape();
    if d.len() != 3 && d.len() != 4 {
        return Err(format!(
            "{op} on a rank-{} input {d:?} is not lowered (rlx reads NCHW or NCL)",
            d.len()
        )
        .into());
    }
    check_same(op, x, dy)?;
    let c = d[1] as usize;
    if g == 0 || !c.is_multiple_of(g) {
        return Err(format!(
            "{op} with {g} groups over {c} channels is not lowered (the groups must divide \
             the channels: rlx-cpu's GroupNorm leaves the remainder undefined)"
        )
        .into());
    }
    Ok(d)
}

/// `x̂` of a GroupNorm input with dims `d`, as `[N, G, C/G·spatial]`, and its `inv`.
fn group_normalised(x: &Array, d: &[i32], g: usize, eps: f32) -> LResult<(A, A)> {
    let grouped = ops::reshape(&*f32_of(x)?, &[d[0], g.i32()?, -1])?;
    normalised(&grouped, 2, eps, true)
}

/// Sum an NC.. tensor over every axis but the channel axis, shaped to
/// the node's declared output.
fn per_channel_sum(cx: &Ctx, t: &Array) -> LResult {
    let axes: Vec<i32> = (0..t.ndim().i32()?).filter(|&i| i != 1).collect();
    Ok(ops::reshape(&*ops::sum(t, &axes, false)?, &cx.out_dims())?)
}

fn group_norm_backward_input(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 4, "GroupNormBackwardInput")?;
    crate::op_fields!(cx, GroupNormBackwardInput { num_groups, eps });
    let (x, gamma, dy) = (a[0], a[1], a[3]);
    let op = "GroupNormBackwardInput";
    let d = group_dims(op, x, dy, *num_groups)?;
    let c = d[1];
    let mut gshape = vec![1; d.len()];
    gshape[1] = c;
    let gm = ops::reshape(&*per_feature(op, "gamma", gamma, c)?, &gshape)?;
    let sy = ops::multiply(&*f32_of(dy)?, &gm)?;
    let sy = ops::reshape(&sy, &[d[0], (*num_groups).i32()?, -1])?;
    let (xh, inv) = group_normalised(x, &d, *num_groups, *eps)?;
    let dx = input_adjoint(&sy, &xh, &inv, 2, true)?;
    Ok(ops::reshape(&dx, &d)?)
}

fn group_norm_backward_gamma(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "GroupNormBackwardGamma")?;
    crate::op_fields!(cx, GroupNormBackwardGamma { num_groups, eps });
    let (x, dy) = (a[0], a[1]);
    let op = "GroupNormBackwardGamma";
    let d = group_dims(op, x, dy, *num_groups)?;
    check_out_size(op, cx, d[1])?;
    let (xh, _) = group_normalised(x, &d, *num_groups, *eps)?;
    let p = ops::multiply(&*f32_of(dy)?, &*ops::reshape(&xh, &d)?)?;
    per_channel_sum(cx, &p)
}

fn group_norm_backward_beta(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "GroupNormBackwardBeta")?;
    crate::op_fields!(cx, GroupNormBackwardBeta { num_groups, eps: _ });
    let (x, dy) = (a[0], a[1]);
    let op = "GroupNormBackwardBeta";
    let d = group_dims(op, x, dy, *num_groups)?;
    check_out_size(op, cx, d[1])?;
    per_channel_sum(cx, &*f32_of(dy)?)
}

/// Sum `t` (x's shape) down to the modulation shape `md` it was broadcast
/// from, flattened to 1-D.
fn unbroadcast_flat(t: &Array, md: &[i32]) -> LResult {
    let xd = t.shape();
    let lead = xd.len() - md.len();
    let axes: Vec<i32> = (0..xd.len())
        .filter(|&i| i < lead || (md[i - lead] == 1 && xd[i] != 1))
        .map(|i| i.i32())
        .collect::<LResult<_>>()?;
    let s = if axes.is_empty() {
        t.clone_handle()
    } else {
        ops::sum(t, &axes, false)?
    };
    Ok(ops::reshape(&s, &[-1])?)
}

fn ada_layer_norm_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 4, "AdaLayerNormBackward")?;
    crate::op_fields!(cx, AdaLayerNormBackward { norm, eps });
    let (x, scale, shift, dy) = (a[0], a[1], a[2], a[3]);
    super::norm::check_modulation("AdaLayerNormBackward", "scale", scale, x)?;
    super::norm::check_modulation("AdaLayerNormBackward", "shift", shift, x)?;
    if scale.shape() != shift.shape() {
        return Err(format!(
            "AdaLayerNormBackward scale {:?} and shift {:?} differ in shape (not supported: \
             rlx requires one modulation shape)",
            scale.shape(),
            shift.shape()
        )
        .into());
    }
    check_same("AdaLayerNormBackward", x, dy)?;
    let center = match norm {
        AdaNormKind::LayerNorm => true,
        AdaNormKind::RmsNorm => false,
    };
    let (n, inv) = normalised(&*f32_of(x)?, -1, *eps, center)?;
    let dyf = f32_of(dy)?;
    let one = super::scalar(1.0, rlx_mlx_shim::DType::F32)?;
    let s1 = ops::add(&*f32_of(scale)?, &one)?;
    let dn = ops::multiply(&dyf, &s1)?;
    let dx = input_adjoint(&dn, &n, &inv, -1, center)?;
    let md = scale.shape();
    let dscale = unbroadcast_flat(&*ops::multiply(&dyf, &n)?, &md)?;
    let dshift = unbroadcast_flat(&dyf, &md)?;
    let dx = ops::reshape(&dx, &[-1])?;
    Ok(ops::concatenate(
        &ArrayList::from_arrays([&*dx, &*dscale, &*dshift]),
        0,
    )?)
}
