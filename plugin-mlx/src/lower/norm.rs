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
//!
//! Channel-axis norms on NCHW / NCL (rlx-cpu reads rank 4 as `[N, C, H, W]`
//! and rank 3 as `[N, C, L]`; any other rank panics there, so it is refused):
//!
//! - `LayerNorm2d { eps }`: inputs `[x, gamma, beta]`; at each spatial
//!   position normalise across the C channels (biased variance), then
//!   `* gamma[c] + beta[c]` (candle / SAM semantics, not PyTorch's H×W norm).
//!   Lowered as channel-to-last, `mx::fast::layer_norm`, channel back.
//! - `GroupNorm { num_groups, eps }`: inputs `[x, gamma, beta]`; per sample,
//!   each group of `C / num_groups` consecutive channels is normalised over
//!   its `C/G × spatial` values (biased variance), then per-channel affine.
//!   rlx-cpu leaves the trailing `C % G` channels unwritten when G does not
//!   divide C, so that (and G = 0) is refused. Lowered as a reshape to
//!   `[N, G, C/G·spatial]`, `mx::fast::layer_norm` without affine, reshape
//!   back, `* gamma + beta` broadcast per channel.
//!
//! DiT modulation (rlx-cpu `exec_ada_layer_norm` / `exec_gated_residual`):
//!
//! - `AdaLayerNorm { norm, eps }`: inputs `[x, scale, shift]`;
//!   `norm(x) * (1 + scale) + shift`, the norm over the last axis with no
//!   affine (LayerNorm: biased variance; RmsNorm: `x / sqrt(mean(x²) + eps)`).
//! - `GatedResidual`: inputs `[x, y, gate]`; `x + gate * y`.
//!
//! The modulation tensors (`scale`/`shift`, `gate`) broadcast NumPy-style
//! over the leading axes of x and must end in the feature dim D (rlx-ir's
//! documented contract; rlx-cpu reads D-long rows of them, so a last dim of 1
//! would read past the tensor): anything else is refused. `y` must have x's
//! shape. These composites compute in f32 (as rlx-cpu does for f16/bf16
//! graphs) and round once to the declared dtype.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::AdaNormKind;
use rlx_mlx_shim::{fast, ops, Array, DType as MxDType};

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
        row!(
            LayerNorm2d,
            FLOATS,
            Composite,
            "NCHW/NCL: channel axis moved last, mx::fast::layer_norm, moved back (in f32)",
            layer_norm_2d
        ),
        row!(
            GroupNorm,
            FLOATS,
            Composite,
            "NCHW/NCL: reshape [N, G, C/G*spatial], mx::fast::layer_norm without affine, \
             per-channel gamma/beta (in f32); C % G != 0 not lowered",
            group_norm
        ),
        row!(
            AdaLayerNorm,
            FLOATS,
            Composite,
            "mx::fast::layer_norm / rms_norm without affine over the last axis, \
             * (1 + scale) + shift broadcast over leading axes (in f32)",
            ada_layer_norm
        ),
        row!(
            GatedResidual,
            FLOATS,
            Composite,
            "x + gate * y, gate broadcast over leading axes (in f32)",
            gated_residual
        ),
    ]
}

/// `a` as f32 (the composites here compute in f32, as rlx-cpu does, and the
/// executable rounds once to the declared dtype).
pub(crate) fn f32_of(a: &Array) -> LResult {
    Ok(if a.dtype() != MxDType::F32 {
        ops::astype(a, MxDType::F32)?
    } else {
        a.clone_handle()
    })
}

/// Which normalisation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Norm {
    Layer,
    Rms,
}

/// Check that `axis` names the last axis of a rank-`rank` input.
pub(crate) fn check_last_axis(op: &str, axis: i32, rank: usize) -> LResult<()> {
    let r = rank.i32()?;
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

/// gamma or beta must hold one value per feature of the normalised axis.
fn check_affine(name: &str, a: &Array, c: i32) -> LResult<()> {
    if a.size() != c as usize {
        return Err(format!(
            "{name} has {} elements but the normalised axis has {c}",
            a.size()
        )
        .into());
    }
    Ok(())
}

/// gamma or beta as a `[C]` vector of dtype `dt`.
fn affine(name: &str, a: &Array, c: i32, dt: rlx_mlx_shim::DType) -> LResult {
    check_affine(name, a, c)?;
    let v = ops::reshape(a, &[c])?;
    Ok(if v.dtype() != dt {
        ops::astype(&v, dt)?
    } else {
        v
    })
}

/// How a normalisation's `beta` is known at build time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shift {
    /// Any values.
    Values,
    /// All +0.0 (a zero constant): the GPU adds nothing, one kernel fewer
    /// a norm (the CPU kernel still adds it, as rlx-cpu does, for the sign
    /// of a zero result).
    Zero,
}

/// Normalise `x` over its last axis with the affine `gamma` / `beta`,
/// then reshape to `out_dims` (RmsNorm may declare a leading-flattened
/// output). Computed in dtype `dt`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn normalise(
    kind: Norm,
    x: &Array,
    gamma: &Array,
    beta: &Array,
    shift: Shift,
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
    // On the CPU, float32 runs the shim's row kernel: one MLX op where
    // MLX's fast norms fall back to a dozen on its CPU stream.
    let y = if super::cpu_f32(&[&xc, gamma, beta]) {
        check_affine("gamma", gamma, c)?;
        check_affine("beta", beta, c)?;
        rlx_mlx_shim::kernels::norm_last_cpu(&xc, gamma, beta, eps, kind == Norm::Rms)?
    } else {
        let g = affine("gamma", gamma, c, dt)?;
        let b = affine("beta", beta, c, dt)?;
        let b = (shift == Shift::Values).then_some(&*b);
        match kind {
            Norm::Layer => fast::layer_norm(&xc, Some(&g), b, eps)?,
            Norm::Rms => {
                let n = fast::rms_norm(&xc, Some(&g), eps)?;
                match b {
                    Some(b) => ops::add(&n, b)?,
                    None => n,
                }
            }
        }
    };
    Ok(if y.shape() != out_dims {
        ops::reshape(&y, out_dims)?
    } else {
        y
    })
}

/// What input `i` (a beta) is known to be.
fn shift_of(cx: &Ctx, i: usize) -> Shift {
    if cx.input_is_zeros(i) {
        Shift::Zero
    } else {
        Shift::Values
    }
}

fn layer_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "LayerNorm")?;
    crate::op_fields!(cx, LayerNorm { axis, eps });
    check_last_axis("LayerNorm", *axis, a[0].ndim())?;
    normalise(
        Norm::Layer,
        a[0],
        a[1],
        a[2],
        shift_of(cx, 2),
        *eps,
        cx.out_dtype(),
        &cx.out_dims(),
    )
}

fn rms_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "RmsNorm")?;
    crate::op_fields!(cx, RmsNorm { axis, eps });
    check_last_axis("RmsNorm", *axis, a[0].ndim())?;
    normalise(
        Norm::Rms,
        a[0],
        a[1],
        a[2],
        shift_of(cx, 2),
        *eps,
        cx.out_dtype(),
        &cx.out_dims(),
    )
}

/// The `[N, C, spatial..]` dims of an NCHW / NCL input (rank 4 or 3).
fn nchw_dims(op: &str, x: &Array) -> LResult<Vec<i32>> {
    let d = x.shape();
    if d.len() != 3 && d.len() != 4 {
        return Err(format!(
            "{op} on a rank-{} input {d:?} is not lowered (rlx reads NCHW or NCL)",
            d.len()
        )
        .into());
    }
    Ok(d)
}

/// gamma/beta `[C]` reshaped to broadcast over an NC.. tensor of rank `rank`.
fn channel_affine(name: &str, a: &Array, c: i32, rank: usize) -> LResult {
    let v = affine(name, a, c, MxDType::F32)?;
    let mut shape = vec![1; rank];
    shape[1] = c;
    Ok(ops::reshape(&v, &shape)?)
}

fn layer_norm_2d(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "LayerNorm2d")?;
    crate::op_fields!(cx, LayerNorm2d { eps });
    let d = nchw_dims("LayerNorm2d", a[0])?;
    let c = d[1];
    let x = ops::moveaxis(&*f32_of(a[0])?, 1, -1)?;
    let g = affine("gamma", a[1], c, MxDType::F32)?;
    let b = affine("beta", a[2], c, MxDType::F32)?;
    let y = fast::layer_norm(&x, Some(&g), Some(&b), *eps)?;
    Ok(ops::moveaxis(&y, -1, 1)?)
}

fn group_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "GroupNorm")?;
    crate::op_fields!(cx, GroupNorm { num_groups, eps });
    let d = nchw_dims("GroupNorm", a[0])?;
    let (n, c) = (d[0], d[1]);
    let g = *num_groups;
    if g == 0 || !(c as usize).is_multiple_of(g) {
        return Err(format!(
            "GroupNorm with {g} groups over {c} channels is not lowered (rlx-cpu needs the \
             groups to divide the channels: it leaves the remainder unwritten)"
        )
        .into());
    }
    let x = f32_of(a[0])?;
    let grouped = ops::reshape(&x, &[n, g.i32()?, -1])?;
    let y = fast::layer_norm(&grouped, None, None, *eps)?;
    let y = ops::reshape(&y, &d)?;
    let gamma = channel_affine("gamma", a[1], c, d.len())?;
    let beta = channel_affine("beta", a[2], c, d.len())?;
    Ok(ops::add(&*ops::multiply(&y, &gamma)?, &beta)?)
}

/// Check a DiT modulation tensor (scale, shift, gate) against x:
/// right-aligned, rank <= x's, every leading dim 1 or x's, and the last dim
/// x's feature dim. The forward and backward lowerings share it.
pub(crate) fn check_modulation(op: &str, name: &str, m: &Array, x: &Array) -> LResult<()> {
    let (md, xd) = (m.shape(), x.shape());
    let ok = !xd.is_empty()
        && !md.is_empty()
        && md.len() <= xd.len()
        && md.last() == xd.last()
        && md
            .iter()
            .rev()
            .zip(xd.iter().rev())
            .all(|(m, x)| *m == 1 || m == x);
    if !ok {
        return Err(format!(
            "{op} {name} {md:?} over x {xd:?} is not lowered: it must broadcast over the \
             leading axes and end in the feature dim"
        )
        .into());
    }
    Ok(())
}

fn ada_layer_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "AdaLayerNorm")?;
    crate::op_fields!(cx, AdaLayerNorm { norm, eps });
    let x = a[0];
    check_modulation("AdaLayerNorm", "scale", a[1], x)?;
    check_modulation("AdaLayerNorm", "shift", a[2], x)?;
    if a[1].shape() != a[2].shape() {
        return Err(format!(
            "AdaLayerNorm scale {:?} and shift {:?} differ in shape (not supported: rlx \
             requires one modulation shape)",
            a[1].shape(),
            a[2].shape()
        )
        .into());
    }
    let xf = f32_of(x)?;
    let n = match norm {
        AdaNormKind::LayerNorm => fast::layer_norm(&xf, None, None, *eps)?,
        AdaNormKind::RmsNorm => fast::rms_norm(&xf, None, *eps)?,
    };
    let one = super::scalar(1.0, MxDType::F32)?;
    let s1 = ops::add(&*f32_of(a[1])?, &one)?;
    let y = ops::add(&*ops::multiply(&n, &s1)?, &*f32_of(a[2])?)?;
    Ok(y)
}

fn gated_residual(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "GatedResidual")?;
    let (x, y, gate) = (a[0], a[1], a[2]);
    if y.shape() != x.shape() {
        return Err(format!(
            "GatedResidual y {:?} does not match x {:?}",
            y.shape(),
            x.shape()
        )
        .into());
    }
    check_modulation("GatedResidual", "gate", gate, x)?;
    let gy = ops::multiply(&*f32_of(gate)?, &*f32_of(y)?)?;
    Ok(ops::add(&*f32_of(x)?, &gy)?)
}
