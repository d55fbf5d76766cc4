//! Training ops of the activation / loss / fake-quantisation family
//! (issue #15). Semantics are rlx-ir 0.2.19 `src/op.rs` and rlx-cpu 0.2.19
//! (`thunk/ops/elementwise.rs`, `thunk/ops/reduce.rs`, `thunk/ops/quant.rs`,
//! `thunk/ops/norm.rs`); every composite here computes in f32, as rlx-cpu
//! does, and the executable rounds once to the declared dtype.
//!
//! - `ReluBackward`: inputs `[x, dy]`; `dy where x > 0 else 0` (NaN x → 0).
//! - `ActivationBackward { kind }`: inputs `[x, dy]`; `f'(x) · dy` with
//!   rlx-cpu's `activation_backward_kernel` formulas (Sqrt / Rsqrt are 0
//!   where `sqrt(x)` is not positive; Round is the straight-through
//!   identity; Floor / Ceil / Sign are 0). The six kinds rlx-cpu's kernel
//!   panics on (Erf, HardSwish, HardSigmoid, Mish, Softsign, LogSigmoid)
//!   use rlx-autodiff's closed forms (`activation_deriv.rs`): `(2/√π)e^(−x²)`,
//!   `hardsigmoid(x) + x·hardsigmoid'(x)`, `1/6 on |x| < 3 else 0`,
//!   `tanh(sp) + x(1 − tanh²(sp))σ(x)`, `1/(1+|x|)²`, `σ(−x)`.
//! - `SoftmaxCrossEntropy`: inputs `[logits, targets]`, both `[N, C]`;
//!   `logsumexp(l) − Σ targets·l` per row.
//! - `SoftmaxCrossEntropyWithLogits`: inputs `[logits, labels]`, labels one
//!   per row, f32-encoded; `logsumexp(l) − l[label]`.
//! - `SoftmaxCrossEntropyBackward`: inputs `[logits, labels, d_loss]`;
//!   `(softmax(l) − one_hot(label)) · d_loss`.
//!   Logits must be `[N, C]` and labels / d_loss `[N]` (rlx-ir's verifier;
//!   rlx-cpu skips any other rank): anything else is refused. A label is read
//!   as rlx-cpu's `label as usize` reads it (truncated toward zero, negative
//!   or NaN → 0); a label ≥ C (an out-of-bounds index, a panic on rlx-cpu)
//!   selects no class.
//! - `FakeQuantize { bits, axis, ste, scale_mode }`: input `x` (PerBatch) or
//!   `[x, state]` with the `[chan]` scale state (EMA / Fixed), as rlx-ir's
//!   arity says; `clamp(round(x/s), −q, q)·s` with
//!   `q` = 127 / 7 / 1 for 8 / 4 / 2 bits (other widths are refused, as
//!   rlx-cpu panics on them), round half away from zero (Rust's `round`),
//!   `s` per channel of `axis` (one scale for `None`):
//!   PerBatch `s = max(max|x| / q, 1e-12)`; EMA `{ decay }`
//!   `s = state ≤ 0 ? cur : decay·state + (1−decay)·cur` with `cur` the
//!   per-batch scale, written back into the state when it is a param;
//!   Fixed `s = max(state, 1e-12)`. NaNs in `x` are skipped by the max, as
//!   rlx-cpu's `a > max` loop skips them. `ste` only affects the backward.
//! - `FakeQuantizeBackward { bits, axis, ste }`: inputs `[x, dy]` (exactly:
//!   rlx-ir's verifier rejects any other count). The scale is the one its
//!   forward used: the op has no scale input, so at compile
//!   [`link_forward_scales`] finds the `FakeQuantize` on the same `x` with
//!   the same bits and axis and, when that forward is EMA or Fixed, hands
//!   its state to the backward as a third input (plugin-internal, never
//!   seen by the host); the backward then computes the forward's scale
//!   from it (the state as it was before this run's write-back). With no
//!   such forward, or a PerBatch one, the per-batch scale recomputed from
//!   `x`. rlx-cpu always recomputes the per-batch scale, which is wrong
//!   after an EMA / Fixed forward. Identity `dy`; ClippedIdentity
//!   `dy·(|x| ≤ q·s)`; Tanh `dy·(1 − tanh²(x/s))`; HardTanh
//!   `dy·max(0, 1 − |x/(q·s)|)`.
//! - `GatedResidualBackward`: inputs `[x, y, gate, dy]`; 1-D output
//!   `[dx ‖ dy·gate ‖ dgate]` with `dx = dy`, `dgate = Σ dy·y` over the axes
//!   `gate` broadcasts along (NumPy right-aligned, ending in the feature
//!   dim, as `GatedResidual` requires).

use super::{arity, axis as norm_axis, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::{Activation, ScaleMode, SteKind};
use rlx_ir::{Graph, Node, NodeId, Op};
use rlx_mlx_shim::{ops, Array, ArrayList, DType as MxDType};
use rlx_plugin_api::{PluginError, PluginResult};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            ReluBackward,
            FLOATS,
            Composite,
            "where(x > 0, dy, 0) (in f32)",
            relu_backward
        ),
        row!(
            ActivationBackward,
            FLOATS,
            Composite,
            "f'(x)·dy with rlx-cpu's closed forms, every Activation kind (in f32)",
            activation_backward
        ),
        row!(
            SoftmaxCrossEntropy,
            FLOATS,
            Composite,
            "logsumexp over the last axis − Σ targets·logits (in f32)",
            softmax_cross_entropy
        ),
        row!(
            SoftmaxCrossEntropyWithLogits,
            FLOATS,
            Composite,
            "logsumexp over the last axis − logits[label], label one-hot by comparison (in f32)",
            softmax_cross_entropy_with_logits
        ),
        row!(
            SoftmaxCrossEntropyBackward,
            FLOATS,
            Composite,
            "(softmax − one_hot(label))·d_loss (in f32)",
            softmax_cross_entropy_backward
        ),
        row!(
            FakeQuantize,
            FLOATS,
            Composite,
            "clamp(round(x/s), −q, q)·s, s per batch / EMA (state written back when a param) / \
             fixed, per channel of axis; bits 8/4/2 (in f32)",
            fake_quantize
        ),
        row!(
            FakeQuantizeBackward,
            FLOATS,
            Composite,
            "STE attenuation of dy with the scale of the forward FakeQuantize on the same x \
             (EMA / Fixed state linked at compile), else per batch; bits 8/4/2 (in f32)",
            fake_quantize_backward
        ),
        row!(
            GatedResidualBackward,
            FLOATS,
            Composite,
            "packed [dy ‖ dy·gate ‖ Σ dy·y over gate's broadcast axes] (in f32)",
            gated_residual_backward
        ),
    ]
}

/// `a` as f32.
fn f32_of(a: &Array) -> LResult {
    Ok(if a.dtype() != MxDType::F32 {
        ops::astype(a, MxDType::F32)?
    } else {
        a.clone_handle()
    })
}

/// A 0-d f32.
fn s(v: f64) -> LResult {
    super::scalar(v, MxDType::F32)
}

fn zeros_like(x: &Array) -> LResult {
    Ok(rlx_mlx_shim::array::full(&x.shape(), 0.0, MxDType::F32)?)
}

/// `1/(1 + e^−x)`.
fn sigmoid(x: &Array) -> LResult {
    Ok(ops::reciprocal(&*ops::add(
        &*s(1.0)?,
        &*ops::exp(&*ops::negative(x)?)?,
    )?)?)
}

/// Rust's `f32::round`: half away from zero. `x − trunc(x)` is exact.
fn round_away(x: &Array) -> LResult {
    let t = ops::trunc(x)?;
    let frac = ops::abs(&*ops::subtract(x, &t)?)?;
    let up = ops::greater_equal(&frac, &*s(0.5)?)?;
    Ok(ops::where_(&up, &*ops::add(&t, &*ops::sign(x)?)?, &t)?)
}

/// `max(a, lo)` as Rust's `f32::max` (a NaN `a` gives `lo`).
fn max_nan_lo(a: &Array, lo: f64) -> LResult {
    let l = s(lo)?;
    Ok(ops::where_(&*ops::greater(a, &l)?, a, &l)?)
}

// ── ReluBackward / ActivationBackward ──────────────────────────────────

fn relu_backward(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "ReluBackward")?;
    let (x, dy) = (f32_of(a[0])?, f32_of(a[1])?);
    relu_bwd(&x, &dy)
}

fn relu_bwd(x: &Array, dy: &Array) -> LResult {
    let pos = ops::greater(x, &*s(0.0)?)?;
    Ok(ops::where_(&pos, dy, &*s(0.0)?)?)
}

fn activation_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "ActivationBackward")?;
    crate::op_fields!(cx, ActivationBackward { kind });
    let (x, dy) = (f32_of(a[0])?, f32_of(a[1])?);
    let (x, dy) = (&*x, &*dy);
    let m = |a: &Array, b: &Array| -> LResult { Ok(ops::multiply(a, b)?) };
    let zero = s(0.0)?;
    let one = s(1.0)?;
    Ok(match kind {
        Activation::Relu => relu_bwd(x, dy)?,
        Activation::Sigmoid => {
            let sg = sigmoid(x)?;
            m(&*m(&sg, &*ops::subtract(&one, &sg)?)?, dy)?
        }
        Activation::Tanh => {
            let t = ops::tanh(x)?;
            m(&*ops::subtract(&one, &*m(&t, &t)?)?, dy)?
        }
        Activation::Silu => {
            let sg = sigmoid(x)?;
            let inner = ops::add(&one, &*m(x, &*ops::subtract(&one, &sg)?)?)?;
            m(&*m(&sg, &inner)?, dy)?
        }
        Activation::Gelu => {
            // 0.5(1 + erf(x/√2)) + x·e^(−x²/2)/√(2π)
            let phi = m(
                &*s(0.5)?,
                &*ops::add(
                    &one,
                    &*ops::erf(&*m(x, &*s(std::f64::consts::FRAC_1_SQRT_2)?)?)?,
                )?,
            )?;
            let pdf = m(
                &*s(0.398_942_280_401_432_7)?,
                &*ops::exp(&*m(&*m(x, x)?, &*s(-0.5)?)?)?,
            )?;
            m(&*ops::add(&phi, &*m(x, &pdf)?)?, dy)?
        }
        Activation::GeluApprox => {
            let c = s(0.797_884_6)?;
            let aa = 0.044_715;
            let x2 = m(x, x)?;
            let inner = m(&c, &*ops::add(x, &*m(&*s(aa)?, &*m(&x2, x)?)?)?)?;
            let t = ops::tanh(&inner)?;
            let dinner = m(&c, &*ops::add(&one, &*m(&*s(3.0 * aa)?, &x2)?)?)?;
            let d1 = m(&*s(0.5)?, &*ops::add(&one, &t)?)?;
            let d2 = m(
                &*m(&*m(&*s(0.5)?, x)?, &*ops::subtract(&one, &*m(&t, &t)?)?)?,
                &dinner,
            )?;
            m(&*ops::add(&d1, &d2)?, dy)?
        }
        Activation::Exp => m(&*ops::exp(x)?, dy)?,
        Activation::Log => ops::divide(dy, x)?,
        Activation::Sqrt => {
            let sq = ops::sqrt(x)?;
            let v = ops::divide(&*m(&*s(0.5)?, dy)?, &sq)?;
            ops::where_(&*ops::greater(&sq, &zero)?, &v, &zero)?
        }
        Activation::Rsqrt => {
            let sq = ops::sqrt(x)?;
            let v = ops::divide(&*m(&*s(-0.5)?, dy)?, &*m(x, &sq)?)?;
            ops::where_(&*ops::greater(&sq, &zero)?, &v, &zero)?
        }
        Activation::Neg => ops::negative(dy)?,
        Activation::Abs => {
            // sign(x), 0 at 0 and for NaN (rlx-cpu's x > 0 / x < 0 tests).
            let sg = ops::subtract(
                &*ops::astype(&*ops::greater(x, &zero)?, MxDType::F32)?,
                &*ops::astype(&*ops::less(x, &zero)?, MxDType::F32)?,
            )?;
            m(&sg, dy)?
        }
        // Straight-through: identity.
        Activation::Round => ops::add(dy, &*zeros_like(x)?)?,
        Activation::Sin => m(&*ops::cos(x)?, dy)?,
        Activation::Cos => ops::negative(&*m(&*ops::sin(x)?, dy)?)?,
        Activation::Tan => {
            let t = ops::tan(x)?;
            m(&*ops::add(&one, &*m(&t, &t)?)?, dy)?
        }
        Activation::Atan => ops::divide(dy, &*ops::add(&one, &*m(x, x)?)?)?,
        Activation::Recip => ops::divide(&*ops::negative(dy)?, &*m(x, x)?)?,
        Activation::Floor | Activation::Ceil | Activation::Sign => zeros_like(x)?,
        Activation::Softplus => {
            ops::divide(dy, &*ops::add(&one, &*ops::exp(&*ops::negative(x)?)?)?)?
        }
        Activation::Elu => ops::where_(&*ops::greater(x, &zero)?, dy, &*m(dy, &*ops::exp(x)?)?)?,
        // rlx-autodiff's closed forms (rlx-cpu's kernel panics on these).
        Activation::Erf => m(
            &*m(
                &*s(std::f64::consts::FRAC_2_SQRT_PI)?,
                &*ops::exp(&*ops::negative(&*m(x, x)?)?)?,
            )?,
            dy,
        )?,
        Activation::HardSigmoid => m(&*hard_sigmoid_deriv(x)?, dy)?,
        Activation::HardSwish => {
            let hs = ops::clip(
                &*ops::add(&*ops::divide(x, &*s(6.0)?)?, &*s(0.5)?)?,
                0.0,
                1.0,
            )?;
            let d = ops::add(&hs, &*m(x, &*hard_sigmoid_deriv(x)?)?)?;
            m(&d, dy)?
        }
        Activation::Mish => {
            // softplus = max(x, 0) + ln(1 + e^−|x|)
            let sp = ops::add(
                &*ops::maximum(x, &zero)?,
                &*ops::log1p(&*ops::exp(&*ops::negative(&*ops::abs(x)?)?)?)?,
            )?;
            let t = ops::tanh(&sp)?;
            let sech2 = ops::subtract(&one, &*m(&t, &t)?)?;
            let d = ops::add(&t, &*m(&*m(x, &sech2)?, &*sigmoid(x)?)?)?;
            m(&d, dy)?
        }
        Activation::Softsign => {
            let den = ops::add(&one, &*ops::abs(x)?)?;
            ops::divide(dy, &*m(&den, &den)?)?
        }
        Activation::LogSigmoid => m(&*sigmoid(&*ops::negative(x)?)?, dy)?,
    })
}

/// `1/6` on `|x| < 3`, else 0.
fn hard_sigmoid_deriv(x: &Array) -> LResult {
    let inside = ops::less(&*ops::abs(x)?, &*s(3.0)?)?;
    Ok(ops::where_(&inside, &*s(1.0 / 6.0)?, &*s(0.0)?)?)
}

// ── Softmax cross-entropy ──────────────────────────────────────────────

/// Logits must be `[N, C]` (rlx-ir's verifier and every rlx kernel; rlx-cpu
/// skips any other rank); per-row operands (`labels`, `d_loss`) `[N]`.
fn check_rows(op: &str, l: &Array, per_row: &[(&str, &Array)]) -> LResult<()> {
    let ld = l.shape();
    if ld.len() != 2 {
        return Err(format!("{op} on logits {ld:?} is not lowered: logits must be [N, C]").into());
    }
    for (name, a) in per_row {
        if a.shape() != [ld[0]] {
            return Err(format!(
                "{op} {name} {:?} is not lowered: it must be [N] = [{}] (one per row)",
                a.shape(),
                ld[0]
            )
            .into());
        }
    }
    Ok(())
}

/// `one_hot(label)` `[N, C]` for `[N, C]` logits (checked), f32, with
/// rlx-cpu's reading of an f32-encoded label (`as usize`).
fn one_hot(logits: &Array, labels: &Array) -> LResult {
    let ld = logits.shape();
    let c = ld[1];
    let t = ops::trunc(&*f32_of(labels)?)?;
    let zero = s(0.0)?;
    let idx = ops::where_(&*ops::greater(&t, &zero)?, &t, &zero)?;
    let idx = ops::reshape(&idx, &[ld[0], 1])?;
    let classes = rlx_mlx_shim::array::arange(0.0, c as f64, 1.0, MxDType::F32)?;
    Ok(ops::astype(&*ops::equal(&classes, &idx)?, MxDType::F32)?)
}

fn softmax_cross_entropy(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "SoftmaxCrossEntropy")?;
    check_rows("SoftmaxCrossEntropy", a[0], &[])?;
    if a[1].shape() != a[0].shape() {
        return Err(format!(
            "SoftmaxCrossEntropy targets {:?} do not match logits {:?}",
            a[1].shape(),
            a[0].shape()
        )
        .into());
    }
    let (l, t) = (f32_of(a[0])?, f32_of(a[1])?);
    let lse = ops::logsumexp(&l, &[1], false)?;
    let dot = ops::sum(&*ops::multiply(&t, &l)?, &[1], false)?;
    Ok(ops::subtract(&lse, &dot)?)
}

fn softmax_cross_entropy_with_logits(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "SoftmaxCrossEntropyWithLogits")?;
    check_rows("SoftmaxCrossEntropyWithLogits", a[0], &[("labels", a[1])])?;
    let l = f32_of(a[0])?;
    let oh = one_hot(&l, a[1])?;
    let lse = ops::logsumexp(&l, &[1], false)?;
    // Σ one_hot·l, but without 0·inf: pick the labelled logit by where.
    let picked = ops::sum(
        &*ops::where_(&*ops::greater(&oh, &*s(0.0)?)?, &l, &*s(0.0)?)?,
        &[1],
        false,
    )?;
    Ok(ops::subtract(&lse, &picked)?)
}

fn softmax_cross_entropy_backward(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "SoftmaxCrossEntropyBackward")?;
    check_rows(
        "SoftmaxCrossEntropyBackward",
        a[0],
        &[("labels", a[1]), ("d_loss", a[2])],
    )?;
    let l = f32_of(a[0])?;
    let oh = one_hot(&l, a[1])?;
    let dl = ops::reshape(&*f32_of(a[2])?, &[l.shape()[0], 1])?;
    let p = ops::softmax(&l, &[1], true)?;
    Ok(ops::multiply(&*ops::subtract(&p, &oh)?, &dl)?)
}

// ── FakeQuantize ───────────────────────────────────────────────────────

fn q_max(op: &str, bits: u8) -> LResult<f64> {
    Ok(match bits {
        8 => 127.0,
        4 => 7.0,
        2 => 1.0,
        n => {
            return Err(format!(
                "{op} with bits = {n} is not lowered (rlx defines 8, 4 and 2 bits)"
            )
            .into())
        }
    })
}

/// The channel layout of `x` for `axis`: the kept axis (None: one scale),
/// the scale's broadcast shape (keepdims) and the channel count.
fn chan_layout(op: &str, x: &Array, axis: Option<usize>) -> LResult<(Option<i32>, Vec<i32>, i32)> {
    let d = x.shape();
    match axis {
        None => Ok((None, vec![1; d.len()], 1)),
        Some(ax) => {
            if ax >= d.len() {
                return Err(format!("{op} axis {ax} is out of range for x {d:?}").into());
            }
            let ax = norm_axis(ax as i64, d.len())?;
            let mut bd = vec![1; d.len()];
            bd[ax as usize] = d[ax as usize];
            Ok((Some(ax), bd, d[ax as usize]))
        }
    }
}

/// `max(max|x| / q, 1e-12)` per channel, keepdims; NaNs skipped.
fn per_batch_scale(x: &Array, chan: Option<i32>, q: f64) -> LResult {
    let ax = ops::abs(x)?;
    let ax = ops::where_(&*ops::isnan(&ax)?, &*s(0.0)?, &ax)?;
    let axes: Vec<i32> = (0..x.ndim().i32()?).filter(|&i| Some(i) != chan).collect();
    let m = if axes.is_empty() {
        ax
    } else {
        ops::max(&ax, &axes, true)?
    };
    max_nan_lo(&*ops::divide(&m, &*s(q)?)?, 1e-12)
}

/// The `[chan]` state (any shape of `chan` elements) in the scale's
/// broadcast shape.
fn state_as_scale(op: &str, st: &Array, bshape: &[i32], chan: i32) -> LResult {
    if st.size() as i64 != chan as i64 {
        return Err(format!(
            "{op} scale state {:?} does not hold one value per channel ({chan})",
            st.shape()
        )
        .into());
    }
    Ok(ops::reshape(&*f32_of(st)?, bshape)?)
}

fn fake_quantize(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        FakeQuantize {
            bits,
            axis,
            ste: _,
            scale_mode
        }
    );
    let op = "FakeQuantize";
    let q = q_max(op, *bits)?;
    let x = f32_of(a.first().ok_or("FakeQuantize takes an input")?)?;
    let (chan, bshape, nch) = chan_layout(op, &x, *axis)?;
    let scale = match scale_mode {
        ScaleMode::PerBatch => {
            arity(a, 1, "FakeQuantize (per batch)")?;
            per_batch_scale(&x, chan, q)?
        }
        ScaleMode::EMA { decay } => {
            arity(a, 2, "FakeQuantize (EMA)")?;
            let st = state_as_scale(op, a[1], &bshape, nch)?;
            let new = ema_scale(&st, &*per_batch_scale(&x, chan, q)?, *decay)?;
            let sd = cx.in_dims(1);
            let mut w = ops::reshape(&new, &sd)?;
            let sdt = crate::dtype::ir_to_mx(cx.in_dtype(1))
                .ok_or("FakeQuantize state dtype has no MLX equivalent")?;
            if sdt != MxDType::F32 {
                w = ops::astype(&w, sdt)?;
            }
            cx.writes.record(cx.graph, cx.input(1), w);
            new
        }
        ScaleMode::Fixed => {
            arity(a, 2, "FakeQuantize (Fixed)")?;
            let st = state_as_scale(op, a[1], &bshape, nch)?;
            max_nan_lo(&st, 1e-12)?
        }
    };
    let qv = ops::clip(&*round_away(&*ops::divide(&x, &scale)?)?, -q, q)?;
    Ok(ops::multiply(&qv, &scale)?)
}

/// The EMA scale: `state ≤ 0 ? cur : decay·state + (1 − decay)·cur`, in
/// f32 as rlx-cpu.
fn ema_scale(st: &Array, cur: &Array, decay: f32) -> LResult {
    let blend = ops::add(
        &*ops::multiply(&*s(decay as f64)?, st)?,
        &*ops::multiply(&*s((1.0 - decay) as f64)?, cur)?,
    )?;
    let cold = ops::less_equal(st, &*s(0.0)?)?;
    Ok(ops::where_(&cold, cur, &blend)?)
}

/// The forward `FakeQuantize` nodes a `FakeQuantizeBackward` node
/// differentiates: those on the same `x` with the same bits and axis.
fn forwards_of<'g>(g: &'g Graph, bwd: &Node) -> impl Iterator<Item = &'g Node> + 'g {
    let (x, key) = match &bwd.op {
        Op::FakeQuantizeBackward { bits, axis, .. } => (bwd.inputs[0], (*bits, *axis)),
        _ => unreachable!(),
    };
    g.nodes().iter().filter(move |n| {
        matches!(&n.op, Op::FakeQuantize { bits, axis, .. }
            if (*bits, *axis) == key && n.inputs.first() == Some(&x))
    })
}

/// Give every `FakeQuantizeBackward` whose forward (same x, bits and axis)
/// is EMA or Fixed that forward's state as a third input, so that it
/// computes the scale the forward used (the op itself has no scale input).
/// Run once on a graph as read, before anything is built; nested bodies
/// are left alone (their backward keeps the per-batch scale). A node that
/// does not have exactly `[x, dy]`, or whose forwards disagree on the scale
/// (different modes or states), is refused naming it, as is one whose
/// forward's state is defined after it (it could not be read in order).
pub fn link_forward_scales(g: &mut Graph) -> PluginResult<()> {
    let mut links = Vec::new();
    for n in g.nodes() {
        if !matches!(n.op, Op::FakeQuantizeBackward { .. }) {
            continue;
        }
        let what = crate::graph_text::describe(g, n);
        if n.inputs.len() != 2 {
            return Err(PluginError::invalid_argument(format!(
                "{what}: takes exactly [x, dy], got {} inputs",
                n.inputs.len()
            )));
        }
        let mut chosen: Option<(Option<NodeId>, String)> = None;
        for f in forwards_of(g, n) {
            let Op::FakeQuantize { scale_mode, .. } = &f.op else {
                unreachable!()
            };
            let state = match scale_mode {
                ScaleMode::PerBatch => None,
                _ => f.inputs.get(1).copied(),
            };
            let this = (state, format!("{scale_mode:?}"));
            match &chosen {
                Some(c) if *c != this => {
                    return Err(PluginError::unsupported(format!(
                        "{what}: the forward FakeQuantize nodes on its x disagree on the scale \
                         ({} vs {}): not lowered",
                        c.1, this.1
                    )))
                }
                _ => chosen = Some(this),
            }
        }
        if let Some((Some(state), _)) = chosen {
            if state.0 >= n.id.0 {
                return Err(PluginError::unsupported(format!(
                    "{what}: its forward's scale state (node {state}) is defined after it: \
                     not lowered"
                )));
            }
            links.push((n.id, state));
        }
    }
    for (id, state) in links {
        g.node_mut(id).inputs.push(state);
    }
    Ok(())
}

fn fake_quantize_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, FakeQuantizeBackward { bits, axis, ste });
    let op = "FakeQuantizeBackward";
    // [x, dy], or [x, dy, state] when link_forward_scales found an EMA /
    // Fixed forward.
    if a.len() != 2 && a.len() != 3 {
        arity(a, 2, op)?;
    }
    let q = q_max(op, *bits)?;
    let x = f32_of(a[0])?;
    let dy = f32_of(a[1])?;
    let (chan, bshape, nch) = chan_layout(op, &x, *axis)?;
    let scale = match (
        a.get(2),
        forwards_of(cx.graph, cx.node).next().map(|f| &f.op),
    ) {
        (Some(st), Some(Op::FakeQuantize { scale_mode, .. })) => {
            let st = state_as_scale(op, st, &bshape, nch)?;
            match scale_mode {
                ScaleMode::EMA { decay } => {
                    ema_scale(&st, &*per_batch_scale(&x, chan, q)?, *decay)?
                }
                _ => max_nan_lo(&st, 1e-12)?,
            }
        }
        _ => per_batch_scale(&x, chan, q)?,
    };
    let one = s(1.0)?;
    let zero = s(0.0)?;
    Ok(match ste {
        SteKind::Identity => ops::add(&dy, &*zeros_like(&x)?)?,
        SteKind::ClippedIdentity => {
            let bound = ops::multiply(&*s(q)?, &scale)?;
            let inside = ops::less_equal(&*ops::abs(&x)?, &bound)?;
            ops::where_(&inside, &dy, &zero)?
        }
        SteKind::Tanh => {
            let t = ops::tanh(&*ops::divide(&x, &scale)?)?;
            ops::multiply(&dy, &*ops::subtract(&one, &*ops::multiply(&t, &t)?)?)?
        }
        SteKind::HardTanh => {
            let bound = ops::multiply(&*s(q)?, &scale)?;
            let r = ops::abs(&*ops::divide(&x, &bound)?)?;
            let att = ops::maximum(&*ops::subtract(&one, &r)?, &zero)?;
            ops::multiply(&dy, &att)?
        }
    })
}

// ── GatedResidualBackward ──────────────────────────────────────────────

fn gated_residual_backward(_cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 4, "GatedResidualBackward")?;
    let op = "GatedResidualBackward";
    let (xd, yd, gd, dyd) = (a[0].shape(), a[1].shape(), a[2].shape(), a[3].shape());
    if yd != xd || dyd != xd {
        return Err(format!("{op} y {yd:?} and dy {dyd:?} must both match x {xd:?}").into());
    }
    super::norm::check_modulation(op, "gate", a[2], a[0])?;
    let y = f32_of(a[1])?;
    let gate = f32_of(a[2])?;
    let dy = f32_of(a[3])?;
    let dy_y = ops::multiply(&*ops::broadcast_to(&gate, &xd)?, &dy)?;
    // Axes of x that gate broadcasts along.
    let pad = xd.len() - gd.len();
    let axes: Vec<i32> = (0..xd.len())
        .filter(|&i| i < pad || gd[i - pad] == 1)
        .map(|i| i.i32())
        .collect::<LResult<_>>()?;
    let prod = ops::multiply(&dy, &y)?;
    let dg = if axes.is_empty() {
        prod
    } else {
        ops::sum(&prod, &axes, true)?
    };
    let flat = |v: &Array| -> LResult { Ok(ops::reshape(v, &[-1])?) };
    let parts: [A; 3] = [flat(&dy)?, flat(&dy_y)?, flat(&dg)?];
    let list = ArrayList::from_arrays(parts.iter().map(|p| &**p));
    Ok(ops::concatenate(&list, 0)?)
}
