//! Fused ops (what rlx's optimisation passes create), lowered as
//! composites of MLX ops. rlx models each as one node with ONE output.
//!
//! - `FusedMatMulBiasAct { activation }`: inputs `[a, w, bias]`;
//!   `act(a @ w + bias)`. rlx-cpu folds every leading axis of `a` into the
//!   rows of one 2-D GEMM against a 2-D `w` `[K, N]`, with a `[N]` bias.
//! - `FusedSwiGLU { gate_first, cast_to }`: input `[.., 2N]` → `[.., N]`:
//!   `up * silu(gate)` with up = the low half and gate = the high half
//!   (swapped when `gate_first`). `cast_to` only names the output dtype,
//!   which the node's declared dtype already carries (the executable casts
//!   to it; rlx-cpu ignores the field).
//! - `FusedResidualRmsNorm { has_bias, eps }` / `FusedResidualLN`: inputs
//!   `[x, residual, (bias,) gamma, beta]`; `norm(x + residual (+ bias))`
//!   over the last axis (see `norm.rs`). Only the normalised value is an
//!   output: the pre-norm sum is not (a graph that needs it keeps the Add).

use super::norm::{normalise, Norm};
use super::{arity, Ctx, LResult, Lowering};
use crate::dtype::FLOATS;
use crate::row;
use rlx_ir::op::Activation;
use rlx_ir::Op;
use rlx_mlx_shim::{ops, Array};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            FusedMatMulBiasAct,
            FLOATS,
            Composite,
            "mx::matmul + bias + activation (Gelu erf, GeluApprox tanh, Silu, Relu, Sigmoid, \
             Tanh, Exp, Neg, Abs; others not lowered); w must be 2-D",
            matmul_bias_act
        ),
        row!(
            FusedSwiGLU,
            FLOATS,
            Composite,
            "split halves, up * gate * sigmoid(gate)",
            swiglu
        ),
        row!(
            FusedResidualRmsNorm,
            FLOATS,
            Composite,
            "x + residual (+ bias), then mx::fast::rms_norm + beta",
            residual_rms_norm
        ),
        row!(
            FusedResidualLN,
            FLOATS,
            Composite,
            "x + residual (+ bias), then mx::fast::layer_norm",
            residual_ln
        ),
    ]
}

/// The epilogue activations rlx-cpu's `apply_activation_inplace` computes,
/// for the subset this plugin lowers (same formulas: Gelu is the erf form,
/// GeluApprox the tanh form `0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`).
pub(crate) fn activation(act: Activation, x: &Array) -> LResult {
    let dt = x.dtype();
    let c = |v: f64| super::scalar(v, dt);
    Ok(match act {
        Activation::Gelu => {
            let xs = ops::multiply(x, &*c(std::f64::consts::FRAC_1_SQRT_2)?)?;
            let e1 = ops::add(&*ops::erf(&xs)?, &*c(1.0)?)?;
            let h = ops::multiply(x, &*c(0.5)?)?;
            ops::multiply(&h, &e1)?
        }
        Activation::GeluApprox => {
            let x3 = ops::multiply(&*ops::multiply(x, x)?, x)?;
            let inner = ops::add(x, &*ops::multiply(&x3, &*c(0.044715)?)?)?;
            let t = ops::tanh(&*ops::multiply(&inner, &*c(0.797_884_6)?)?)?;
            let h = ops::multiply(x, &*c(0.5)?)?;
            ops::multiply(&h, &*ops::add(&t, &*c(1.0)?)?)?
        }
        Activation::Silu => ops::multiply(x, &*ops::sigmoid(x)?)?,
        Activation::Relu => ops::maximum(x, &*c(0.0)?)?,
        Activation::Sigmoid => ops::sigmoid(x)?,
        Activation::Tanh => ops::tanh(x)?,
        Activation::Exp => ops::exp(x)?,
        Activation::Neg => ops::negative(x)?,
        Activation::Abs => ops::abs(x)?,
        other => return Err(format!("epilogue activation {other:?} is not lowered").into()),
    })
}

fn matmul_bias_act(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "FusedMatMulBiasAct")?;
    let Op::FusedMatMulBiasAct { activation: act } = &cx.node.op else {
        unreachable!()
    };
    let (x, w, bias) = (a[0], a[1], a[2]);
    if x.ndim() < 2 {
        return Err(format!(
            "FusedMatMulBiasAct with a rank-{} input is not supported (rlx's matmul needs rank >= 2)",
            x.ndim()
        )
        .into());
    }
    let ws = w.shape();
    if ws.len() != 2 {
        return Err(format!(
            "FusedMatMulBiasAct with a rank-{} weight is not lowered (rlx runs one 2-D GEMM)",
            ws.len()
        )
        .into());
    }
    let n = ws[1];
    if bias.size() != n as usize {
        return Err(format!(
            "FusedMatMulBiasAct bias has {} elements, the output has {n} columns",
            bias.size()
        )
        .into());
    }
    let b = ops::reshape(bias, &[n])?;
    let y = ops::add(&*ops::matmul(x, w)?, &b)?;
    match act {
        Some(act) => activation(*act, &y),
        None => Ok(y),
    }
}

fn swiglu(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "FusedSwiGLU")?;
    let Op::FusedSwiGLU { gate_first, .. } = &cx.node.op else {
        unreachable!()
    };
    let x = a[0];
    let d = x.shape();
    let out = cx.out_dims();
    let n = *out.last().ok_or("FusedSwiGLU to a scalar is not lowered")?;
    let r = d.len();
    if r == 0 || d[r - 1] != 2 * n || x.size() != 2 * out.iter().product::<i32>() as usize {
        return Err(format!(
            "FusedSwiGLU input {d:?} is not the [.., 2N] concatenation for output {out:?}"
        )
        .into());
    }
    let half = |lo: i32| -> LResult {
        let mut start = vec![0; r];
        let mut stop = d.clone();
        start[r - 1] = lo;
        stop[r - 1] = lo + n;
        Ok(ops::slice(x, &start, &stop, &vec![1; r])?)
    };
    let (up, gate) = if *gate_first {
        (half(n)?, half(0)?)
    } else {
        (half(0)?, half(n)?)
    };
    let silu = ops::multiply(&gate, &*ops::sigmoid(&gate)?)?;
    let y = ops::multiply(&up, &silu)?;
    Ok(if y.shape() != out {
        ops::reshape(&y, &out)?
    } else {
        y
    })
}

/// `norm(x + residual (+ bias))` for the two fused residual norms.
fn residual_norm(cx: &Ctx, a: &[&Array], kind: Norm, has_bias: bool, eps: f32) -> LResult {
    let name = match kind {
        Norm::Rms => "FusedResidualRmsNorm",
        Norm::Layer => "FusedResidualLN",
    };
    arity(a, if has_bias { 5 } else { 4 }, name)?;
    let out = cx.out_dims();
    let numel = out.iter().product::<i32>() as usize;
    if out.is_empty() {
        return Err(format!("{name} of a scalar is not lowered").into());
    }
    for (label, v) in [("x", a[0]), ("residual", a[1])] {
        if v.size() != numel {
            return Err(format!(
                "{name} {label} {:?} does not match the output {out:?}",
                v.shape()
            )
            .into());
        }
    }
    let dt = cx.out_dtype();
    let x = ops::reshape(a[0], &out)?;
    let res = ops::reshape(a[1], &out)?;
    let mut v = ops::add(&x, &res)?;
    let (g, b) = if has_bias {
        let h = *out.last().unwrap();
        if a[2].size() != h as usize {
            return Err(format!(
                "{name} bias has {} elements, the normalised axis has {h}",
                a[2].size()
            )
            .into());
        }
        v = ops::add(&v, &*ops::reshape(a[2], &[h])?)?;
        (a[3], a[4])
    } else {
        (a[2], a[3])
    };
    normalise(kind, &v, g, b, eps, dt, &out)
}

fn residual_rms_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    let Op::FusedResidualRmsNorm { has_bias, eps } = &cx.node.op else {
        unreachable!()
    };
    residual_norm(cx, a, Norm::Rms, *has_bias, *eps)
}

fn residual_ln(cx: &Ctx, a: &[&Array]) -> LResult {
    let Op::FusedResidualLN { has_bias, eps } = &cx.node.op else {
        unreachable!()
    };
    residual_norm(cx, a, Norm::Layer, *has_bias, *eps)
}
