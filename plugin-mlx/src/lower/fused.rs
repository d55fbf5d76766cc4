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
//!
//! Whole blocks, composed from the attention/norm helpers and computed in
//! f32 (rlx-cpu computes them in f32; the executable rounds once to the
//! declared dtype):
//!
//! - `FusedAttentionBlock { num_heads, head_dim, has_bias, has_rope }`:
//!   inputs `[hidden, qkv_w, out_w, mask, (qkv_b, out_b,) (cos, sin)]`. What
//!   rlx-cpu runs is its native `FusedAttnBlock` thunk: hidden `[B, S, hs]`
//!   (rank 2 `[S, hs]` is one batch), `hs = num_heads * head_dim`;
//!   `qkv = hidden @ qkv_w [hs, 3hs] (+ qkv_b)`, split into Q | K | V with
//!   head `h` at columns `h*head_dim..`; with `has_rope`, NeoX rotation of Q
//!   and K over the whole head from `[S, head_dim/2]` tables (row = position);
//!   scores `q·k * head_dim^-0.5`, the mask (below), softmax, `@ V`, then
//!   `@ out_w [hs, hs] (+ out_b)`. Refused:
//!   other ranks or widths, an odd head_dim with rope (the thunk would drop
//!   the last dim from the dot), tables that are not `head_dim/2` wide, too
//!   short, or exactly `B*H*S` rows (which rlx-ir's unfused form would read
//!   per token).
//! - The blocks' mask (`FusedAttentionBlock` input 3, `FusedTransformerLayer`
//!   last input) is read as rlx-cpu reads mask values: a value `< 0.5`
//!   excludes the score (it becomes -1e9, so a row with every key excluded
//!   attends uniformly), any other value (NaN included) keeps it; it is a
//!   keep/drop mask, not an additive bias. Shapes: a `[B, S]` key mask (any
//!   shape of `B * S` elements other than rank 4, as before), or a rank-4
//!   `[B|1, H|1, S|1, S]` mask — `[B, H, S, S]`, `[B, 1, S, S]`, `[1, 1, S,
//!   S]`, `[B, 1, 1, S]`, ... — broadcast over the scores `(B, H, S_q, S_k)`
//!   with numpy's rules. rlx-cpu 0.2.19 runs a rank-4 mask without
//!   broadcasting it: both its fused-block thunk and its expansion (into an
//!   `Attention` with a `Custom` mask) read the first `B * S` values of the
//!   buffer as a `[B, S]` key mask, whatever the mask's shape; we read the
//!   shape the mask has. Other shapes are refused.
//! - `FusedTransformerLayer { num_heads, head_dim, intermediate_size, eps1,
//!   eps2, activation, has_bias }`: rlx-cpu expands it (rlx-fusion's
//!   `unfuse_fused_transformer_layer`) into a BERT post-norm layer. Inputs
//!   with bias (14): `hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b,
//!   fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask`; without (8): `hidden,
//!   qkv_w, out_w, ln1_g, fc1_w, fc2_w, ln2_g, mask` (zero betas). hidden is
//!   `[B, S, H]`, `inner = num_heads * head_dim`: `qkv = hidden @ qkv_w
//!   [H, 3inner] (+b)`, attention as above (no rope, the same masks), `@
//!   out_w [inner, H] (+b)`, `h1 = LN(attn + hidden; ln1, eps1)`, `ffn =
//!   act(h1 @ fc1_w (+b)) @ fc2_w (+b)`, `LN(ffn + h1; ln2, eps2)`. The
//!   activation is one of the epilogue set below (others not lowered).

use super::attention::{attend, rope_neox_bhld, ScoreMask};
use super::norm::{f32_of, normalise, Norm, Shift};
use super::{arity, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::Activation;
use rlx_mlx_shim::{ops, Array, DType as MxDType};

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
            "CPU float32: the shim's kernel (rlx-cpu's swiglu_rows); else split halves, \
             up * gate * sigmoid(gate)",
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
        row!(
            FusedAttentionBlock,
            FLOATS,
            Composite,
            "QKV matmul (+bias), split, [NeoX rope], SDPA with a [B, S] key mask or a \
             rank-4 [B|1, H|1, S|1, S] keep mask, output matmul (+bias), in f32",
            attention_block
        ),
        row!(
            FusedTransformerLayer,
            FLOATS,
            Composite,
            "BERT post-norm layer: QKV matmul, SDPA ([B, S] key mask or rank-4 \
             [B|1, H|1, S|1, S] keep mask), out proj, residual + \
             layer_norm, act(fc1) @ fc2, residual + layer_norm, in f32",
            transformer_layer
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
        Activation::Gelu => super::elementwise::gelu_erf(x)?,
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
    crate::op_fields!(cx, FusedMatMulBiasAct { activation: act });
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
    crate::op_fields!(cx, FusedSwiGLU { gate_first, .. });
    let x = a[0];
    let d = x.shape();
    let out = cx.out_dims();
    let n = *out.last().ok_or("FusedSwiGLU to a scalar is not lowered")?;
    let r = d.len();
    if r == 0
        || i64::from(d[r - 1]) != 2 * i64::from(n)
        || x.size() as i64 != super::numel(&out).saturating_mul(2)
    {
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
    // On the CPU, float32 runs the shim's kernel (rlx-cpu's formula and
    // exp polynomial), one MLX op where the halves, sigmoid and products
    // were four.
    let y = if super::cpu_f32(&[x]) {
        rlx_mlx_shim::kernels::swiglu_cpu(x, *gate_first)?
    } else {
        let (up, gate) = if *gate_first {
            (half(n)?, half(0)?)
        } else {
            (half(0)?, half(n)?)
        };
        let silu = ops::multiply(&gate, &*ops::sigmoid(&gate)?)?;
        ops::multiply(&up, &silu)?
    };
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
    let numel = super::numel(&out);
    if out.is_empty() {
        return Err(format!("{name} of a scalar is not lowered").into());
    }
    for (label, v) in [("x", a[0]), ("residual", a[1])] {
        if v.size() as i64 != numel {
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
    normalise(kind, &v, g, b, Shift::Values, eps, dt, &out)
}

fn residual_rms_norm(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, FusedResidualRmsNorm { has_bias, eps });
    residual_norm(cx, a, Norm::Rms, *has_bias, *eps)
}

fn residual_ln(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, FusedResidualLN { has_bias, eps });
    residual_norm(cx, a, Norm::Layer, *has_bias, *eps)
}

/// `x [m, k] @ w [k, n] (+ bias [n])` in f32, checking the weight's shape.
fn linear(op: &str, name: &str, x: &Array, w: &Array, bias: Option<&Array>, n: i32) -> LResult {
    let k = *x.shape().last().unwrap();
    if w.shape() != [k, n] {
        return Err(format!(
            "{op} {name} weight {:?} is not [{k}, {n}] (not lowered)",
            w.shape()
        )
        .into());
    }
    let y = ops::matmul(x, &*f32_of(w)?)?;
    match bias {
        None => Ok(y),
        Some(b) => {
            if b.size() != n as usize {
                return Err(format!(
                    "{op} {name} bias has {} elements, the projection has {n} outputs",
                    b.size()
                )
                .into());
            }
            let b = ops::reshape(&*f32_of(b)?, &[n])?;
            Ok(ops::add(&y, &b)?)
        }
    }
}

/// Split `qkv [B*S, 3*inner]` into Q, K, V as `(B, H, S, D)`.
fn split_heads(qkv: &Array, b: i32, s: i32, nh: i32, dh: i32) -> LResult<[A; 3]> {
    let inner = nh as i64 * dh as i64;
    let rows = (b as i64 * s as i64).i32()?;
    let part = |i: i64| -> LResult {
        let (lo, hi) = ((i * inner).i32()?, ((i + 1) * inner).i32()?);
        let p = ops::slice(qkv, &[0, lo], &[rows, hi], &[1, 1])?;
        let p = ops::reshape(&p, &[b, s, nh, dh])?;
        Ok(ops::transpose(&p, &[0, 2, 1, 3])?)
    };
    Ok([part(0)?, part(1)?, part(2)?])
}

/// `(B, H, S, D)` back to `[B*S, H*D]`.
fn merge_heads(o: &Array) -> LResult {
    let d = o.shape();
    let t = ops::transpose(o, &[0, 2, 1, 3])?;
    let rows = (d[0] as i64 * d[2] as i64).i32()?;
    let cols = (d[1] as i64 * d[3] as i64).i32()?;
    Ok(ops::reshape(&t, &[rows, cols])?)
}

/// The mask of a fused block (see the module docs): a rank-4 mask
/// broadcastable as `[B|1, H|1, S|1, S]` is read per score, any other is a
/// key mask (`attention::key_mask_bhqk`).
fn block_mask<'a>(op: &str, m: &'a Array, b: i32, nh: i32, s: i32) -> LResult<ScoreMask<'a>> {
    let d = m.shape();
    if d.len() == 4 {
        let fits = |i: usize, n: i32| d[i] == 1 || d[i] == n;
        if fits(0, b) && fits(1, nh) && fits(2, s) && d[3] == s {
            return Ok(ScoreMask::PerScore(m));
        }
        return Err(format!(
            "{op} mask {d:?} is not lowered: a rank-4 mask must broadcast as \
             [B|1, H|1, S|1, S] = [{b}|1, {nh}|1, {s}|1, {s}]"
        )
        .into());
    }
    // Any other rank is a key mask; `attend` checks that it broadcasts.
    Ok(ScoreMask::Keys(m))
}

/// A rope table of a FusedAttentionBlock as `[S, half]` f32 (see the module
/// docs for what is refused).
fn block_rope_table(name: &str, t: &Array, b: i32, s: i32, nh: i32, half: i32) -> LResult {
    let d = t.shape();
    let stride = if d.len() >= 2 {
        *d.last().unwrap()
    } else {
        half
    };
    let rows = if stride > 0 {
        t.size().i32()? / stride
    } else {
        0
    };
    if stride != half || rows < s || (rows == b * nh * s && rows != s) {
        return Err(format!(
            "FusedAttentionBlock rope {name} table {d:?} is not lowered: it must hold at least \
             {s} rows of head_dim/2 = {half} angles (and not exactly B*H*S = {} rows)",
            b * nh * s
        )
        .into());
    }
    let flat = ops::reshape(t, &[t.size().i32()?])?;
    let flat = ops::slice(&flat, &[0], &[s * half], &[1])?;
    Ok(ops::reshape(&*f32_of(&flat)?, &[s, half])?)
}

fn attention_block(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        FusedAttentionBlock {
            num_heads,
            head_dim,
            has_bias,
            has_rope,
        }
    );
    const OP: &str = "FusedAttentionBlock";
    let want = 4 + if *has_bias { 2 } else { 0 } + if *has_rope { 2 } else { 0 };
    arity(a, want, OP)?;
    let (nh, dh) = ((*num_heads).i32()?, (*head_dim).i32()?);
    let hs = nh * dh;
    let hd = a[0].shape();
    let (b, s) = match hd.len() {
        3 => (hd[0], hd[1]),
        2 => (1, hd[0]),
        r => {
            return Err(format!(
                "{OP} on a rank-{r} hidden {hd:?} is not lowered (rlx reads [B, S, hs] or [S, hs])"
            )
            .into())
        }
    };
    if hs == 0 || *hd.last().unwrap() != hs {
        return Err(format!(
            "{OP} hidden {hd:?} is not {nh} heads x {dh} wide (not lowered: rlx-cpu's block \
             has hidden == num_heads * head_dim)"
        )
        .into());
    }
    let mask = block_mask(OP, a[3], b, nh, s)?;
    let (qkv_b, out_b) = if *has_bias {
        (Some(a[4]), Some(a[5]))
    } else {
        (None, None)
    };
    let x = ops::reshape(&*f32_of(a[0])?, &[b * s, hs])?;
    let qkv = linear(OP, "qkv", &x, a[1], qkv_b, 3 * hs)?;
    let [mut q, mut k, v] = split_heads(&qkv, b, s, nh, dh)?;
    if *has_rope {
        if dh % 2 != 0 {
            return Err(format!(
                "{OP} with rope and an odd head_dim {dh} is not lowered (rlx-cpu's NeoX pairs \
                 leave the last dim out of the scores)"
            )
            .into());
        }
        let i = if *has_bias { 6 } else { 4 };
        let cos = block_rope_table("cos", a[i], b, s, nh, dh / 2)?;
        let sin = block_rope_table("sin", a[i + 1], b, s, nh, dh / 2)?;
        q = rope_neox_bhld(&q, &cos, &sin)?;
        k = rope_neox_bhld(&k, &cos, &sin)?;
    }
    let scale = (dh as f32).powf(-0.5);
    let o = attend(&q, &k, &v, scale, mask, None)?;
    let y = linear(OP, "out", &*merge_heads(&o)?, a[2], out_b, hs)?;
    Ok(ops::reshape(&y, &hd)?)
}

fn transformer_layer(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        FusedTransformerLayer {
            num_heads,
            head_dim,
            intermediate_size,
            eps1,
            eps2,
            activation: act,
            has_bias,
        }
    );
    const OP: &str = "FusedTransformerLayer";
    arity(a, if *has_bias { 14 } else { 8 }, OP)?;
    let hd = a[0].shape();
    if hd.len() != 3 {
        return Err(format!(
            "{OP} on a rank-{} hidden {hd:?} is not lowered (rlx expands [B, S, H] only)",
            hd.len()
        )
        .into());
    }
    let (b, s, h) = (hd[0], hd[1], hd[2]);
    let (nh, dh) = ((*num_heads).i32()?, (*head_dim).i32()?);
    let inner = nh * dh;
    let inter = (*intermediate_size).i32()?;
    if inner == 0 {
        return Err(format!("{OP} with {nh} heads of width {dh} is not lowered").into());
    }
    // (qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b,
    //  ln2_g, ln2_b, mask); betas None = zeros.
    let (qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w, fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, m) =
        if *has_bias {
            (
                a[1],
                Some(a[2]),
                a[3],
                Some(a[4]),
                a[5],
                Some(a[6]),
                a[7],
                Some(a[8]),
                a[9],
                Some(a[10]),
                a[11],
                Some(a[12]),
                a[13],
            )
        } else {
            (
                a[1], None, a[2], None, a[3], None, a[4], None, a[5], None, a[6], None, a[7],
            )
        };
    let mask = block_mask(OP, m, b, nh, s)?;
    let f = MxDType::F32;
    let zeros: A = rlx_mlx_shim::array::full(&[h], 0.0, f)?;
    let ln = |v: &Array, g: &Array, beta: Option<&Array>, eps: f32, out: &[i32]| -> LResult {
        let shift = if beta.is_some() {
            Shift::Values
        } else {
            Shift::Zero
        };
        normalise(
            Norm::Layer,
            v,
            g,
            beta.unwrap_or(&zeros),
            shift,
            eps,
            f,
            out,
        )
    };
    let m2 = [b * s, h];
    let x = ops::reshape(&*f32_of(a[0])?, &m2)?;
    let qkv = linear(OP, "qkv", &x, qkv_w, qkv_b, 3 * inner)?;
    let [q, k, v] = split_heads(&qkv, b, s, nh, dh)?;
    let scale = (dh as f32).powf(-0.5);
    let o = attend(&q, &k, &v, scale, mask, None)?;
    let attn = linear(OP, "out", &*merge_heads(&o)?, out_w, out_b, h)?;
    let h1 = ln(&*ops::add(&attn, &x)?, ln1_g, ln1_b, *eps1, &m2)?;
    let f1 = linear(OP, "fc1", &h1, fc1_w, fc1_b, inter)?;
    let f1 = activation(*act, &f1)?;
    let f2 = linear(OP, "fc2", &f1, fc2_w, fc2_b, h)?;
    ln(&*ops::add(&f2, &h1)?, ln2_g, ln2_b, *eps2, &hd)
}
