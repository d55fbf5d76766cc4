//! Attention and rotary position embedding.
//!
//! ## Attention (`Op::Attention`)
//!
//! rlx semantics (rlx-ir op docs; rlx-cpu `compile_attention` and the
//! `Thunk::Attention` executor):
//!
//! - Layouts: rank 4 is `[B, S, H, D]` or `[B, H, S, D]`, decided from Q,
//!   K, V and the mask together ([`rank4_layout`]): the reading in which all
//!   of them agree. rlx-ir leaves the choice to "which axis equals
//!   num_heads", and rlx-cpu decides it from Q alone (`dims[1] ==
//!   num_heads`), which misreads a decode step of one head (Q `[B, 1, 1,
//!   D]`) and a prefill of as many rows as heads; shapes that fit both
//!   readings differently are refused. Rank 3 is packed `[B, S, H*D]`; rank
//!   2 is `[S, H*D]` (B = 1). K/V use the same layout with their own
//!   sequence length and head count.
//! - GQA/MQA: the KV head count is read from K's shape; query head `h` uses
//!   KV head `h / (num_heads / kv_heads)` (MLX's grouping too).
//! - Scale: `score_scale`, default `head_dim^-0.5`.
//! - Masks: `None`; `Causal` and `SlidingWindow(w)` place the `S_q` queries
//!   at the end of the `S_k` keys (query `qi` is at `S_k - S_q + qi`, or `qi`
//!   when `S_q > S_k`); causal keeps `ki <= pos`, the window keeps
//!   `pos - w <= ki <= pos`. `Custom` reads a `[B, S_k]` key mask (`< 0.5`
//!   masks the key: its score is replaced by -1e9, so a batch whose keys are
//!   all masked attends uniformly); `Bias` adds a `[B, H, S_q, S_k]` tensor to
//!   the scaled scores.
//! - `v_head_dim`: V and the output are `v_head_dim` wide per head.
//! - `attn_logit_softcap = Some(c)`, `c > 0`: the Gemma 2 logit cap, as
//!   rlx-ir defines it — on the scores before the softmax, in this order:
//!   scale, cap `c * tanh(s / c)`, then the mask (the `Bias` add, or the
//!   -1e9 of a Causal/SlidingWindow/Custom exclusion). A masked key keeps
//!   exactly zero weight, in every layout and mask kind. (rlx-cpu 0.2.19
//!   caps after masking on its `[B, H, S, D]` path, so a masked score
//!   becomes `-c` and keeps a weight of `exp(-c - max)`, and it ignores the
//!   field in its other layouts: both are its bugs, not rlx's semantics; see
//!   [`attend`].) `c <= 0` or NaN means no cap.
//!
//! Lowered to `mx::fast::scaled_dot_product_attention` on `(B, H, L, D)`
//! with transposes/reshapes around it; with a softcap, to an f32 composite
//! (matmul, tanh cap, mask, softmax, matmul).
//!
//! ## Rope (`Op::Rope`)
//!
//! Inputs `[x, cos, sin]`; the tables are explicit (no theta/base, no
//! position offset: positions are the table rows). rlx-cpu's `exec_rope`:
//! `x` is viewed as `[batch, seq, hidden]` (seq = the second-to-last axis,
//! batch = the product of the leading axes; rank 2 is `[seq, hidden]`), each
//! row holding `hidden / head_dim` heads. The tables have `rows x stride`
//! elements (stride = the table's last dim when its rank >= 2, else
//! `n_rot/2`); a table with exactly `batch*seq` rows (and `!= seq`) is per
//! token, otherwise row `si` serves position `si`. Only the first `n_rot/2`
//! values of a row are used. In each head, NeoX pairs `(i, i + n_rot/2)`,
//! GptJ pairs `(2i, 2i+1)`: `(x1 c - x2 s, x2 c + x1 s)`; dims `n_rot..
//! head_dim` are copied. Lowered as a composite of slices, multiplies and a
//! concatenate (MLX's `fast::rope` derives its angles from a base and
//! offset, not from tables).

use super::{Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::{MaskKind, RopeStyle};
use rlx_mlx_shim::{fast, ops, Array, ArrayList, DType as MxDType};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Attention,
            FLOATS,
            Composite,
            "mx::fast::scaled_dot_product_attention (+layout transposes); masks None/Causal/\
             SlidingWindow/Custom/Bias, GQA, score_scale, v_head_dim; with a logit softcap an f32 \
             composite (scores, cap*tanh(s/cap), then mask, softmax, @V) in every layout",
            attention
        ),
        row!(
            Rope,
            FLOATS,
            Composite,
            "table-driven rotation (NeoX half-split or GptJ interleaved, partial n_rot) \
             from slices, multiplies and concatenate",
            rope
        ),
    ]
}

fn cast(a: &Array, dt: MxDType) -> LResult {
    Ok(if a.dtype() != dt {
        ops::astype(a, dt)?
    } else {
        a.clone_handle()
    })
}

/// `a[.., lo:hi]` on the last axis.
fn last_slice(a: &Array, lo: i32, hi: i32) -> LResult {
    let d = a.shape();
    let mut start = vec![0; d.len()];
    let mut stop = d.clone();
    let r = d.len() - 1;
    start[r] = lo;
    stop[r] = hi;
    Ok(ops::slice(a, &start, &stop, &vec![1; d.len()])?)
}

fn concat(parts: &[&Array], axis: i32) -> LResult {
    let list = ArrayList::from_arrays(parts.iter().copied());
    Ok(ops::concatenate(&list, axis)?)
}

/// A boolean `[lq, lk]` keep-mask from a predicate on (query, key).
fn keep_mask(lq: usize, lk: usize, keep: impl Fn(usize, usize) -> bool) -> LResult {
    let v: Vec<bool> = (0..lq * lk).map(|i| keep(i / lk, i % lk)).collect();
    Ok(Array::from_slice(&v, &[lq.i32()?, lk.i32()?])?)
}

/// How rlx lays Q/K/V out (see the module docs); the backward's lowering
/// reads its operands the same way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Layout {
    Bhsd,
    Bshd,
    /// `[B, S, H*D]`
    Packed3,
    /// `[S, H*D]`
    Packed2,
}

/// The layout of rank-4 operands: the reading, `[B, S, H, D]` or `[B, H,
/// S, D]`, in which Q holds `nh` heads of width `dh`, K and V agree on
/// batch, key length and a head count that divides `nh`, V's heads are
/// `dv` wide and the mask (if any) covers that key length. Q alone cannot
/// tell the two apart (a decode step's one query row in front of one head,
/// or a prefill of as many rows as heads); Q, K, V and the mask together
/// decide. Shapes that fit both readings, where the two would attend
/// differently, are refused: no guess.
fn rank4_layout(
    nh: i32,
    dh: i32,
    dv: i32,
    [q, k, v]: [&Array; 3],
    mask_keys: Option<i32>,
) -> LResult<Layout> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let fits = |seq: usize, head: usize| {
        ks.len() == 4
            && vs.len() == 4
            && qs[head] == nh
            && qs[3] == dh
            && ks[3] == dh
            && vs[3] == dv
            && ks[0] == qs[0]
            && vs[0] == qs[0]
            && ks[head] > 0
            && ks[head] == vs[head]
            && nh % ks[head] == 0
            && ks[seq] == vs[seq]
    };
    // The mask's key length only breaks a tie (a key mask may also come
    // as any shape of B * S_k elements).
    let keys = |seq: usize| mask_keys.is_none_or(|m| m == ks[seq]);
    let (mut bshd, mut bhsd) = (fits(1, 2), fits(2, 1));
    if bshd && bhsd && keys(1) != keys(2) {
        (bshd, bhsd) = (keys(1), keys(2));
    }
    match (bshd, bhsd) {
        (true, false) => Ok(Layout::Bshd),
        (false, true) => Ok(Layout::Bhsd),
        // Both readings are the same one when every operand has one row
        // and one head.
        (true, true) if [&qs, &ks, &vs].iter().all(|d| d[1] == 1 && d[2] == 1) => Ok(Layout::Bshd),
        (true, true) => Err(format!(
            "Attention Q {qs:?}, K {ks:?}, V {vs:?} with {nh} heads read as [B, S, H, D] and as \
             [B, H, S, D] alike, attending differently: the layout is ambiguous (give Q a \
             sequence length other than the head count)"
        )
        .into()),
        (false, false) => Err(format!(
            "Attention Q {qs:?}, K {ks:?}, V {vs:?}{} fit neither [B, S, H, D] nor [B, H, S, D] \
             with {nh} heads of width {dh} (V {dv}) and K/V heads dividing {nh}",
            mask_keys.map_or(String::new(), |m| format!(", mask of {m} keys"))
        )
        .into()),
    }
}

/// Bring one operand to MLX's `(B, H, L, D)`; returns it with its head count.
fn to_bhld(name: &str, a: &Array, layout: Layout, d: i32) -> LResult<(A, i32)> {
    let s = a.shape();
    let want_rank = match layout {
        Layout::Bhsd | Layout::Bshd => 4,
        Layout::Packed3 => 3,
        Layout::Packed2 => 2,
    };
    if s.len() != want_rank {
        return Err(format!(
            "Attention {name} is rank {} but Q is rank {want_rank}: mixed layouts are not lowered",
            s.len()
        )
        .into());
    }
    let bad_width = || -> LResult<(A, i32)> {
        Err(format!(
            "Attention {name} of shape {s:?} does not hold heads of width {d} in the \
             {layout:?} layout (not lowered)"
        )
        .into())
    };
    match layout {
        Layout::Bhsd => {
            if s[3] != d {
                return bad_width();
            }
            Ok((a.clone_handle(), s[1]))
        }
        Layout::Bshd => {
            if s[3] != d {
                return bad_width();
            }
            Ok((ops::transpose(a, &[0, 2, 1, 3])?, s[2]))
        }
        Layout::Packed3 | Layout::Packed2 => {
            let w = *s.last().unwrap();
            if d == 0 || w % d != 0 {
                return bad_width();
            }
            let h = w / d;
            let (b, l) = if layout == Layout::Packed3 {
                (s[0], s[1])
            } else {
                (1, s[0])
            };
            let r = ops::reshape(a, &[b, l, h, d])?;
            Ok((ops::transpose(&r, &[0, 2, 1, 3])?, h))
        }
    }
}

fn attention(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        Attention {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            score_scale,
            attn_logit_softcap,
        }
    );
    let want = if matches!(mask_kind, MaskKind::Custom | MaskKind::Bias) {
        4
    } else {
        3
    };
    if a.len() != want {
        return Err(format!(
            "Attention with mask {mask_kind:?} takes {want} inputs, got {}",
            a.len()
        )
        .into());
    }
    let (nh, dh) = ((*num_heads).i32()?, (*head_dim).i32()?);
    let dv = match v_head_dim {
        Some(v) => v.i32()?,
        None => dh,
    };
    let dt = cx.out_dtype();
    let qs = a[0].shape();
    let layout = match qs.len() {
        4 => {
            let mask_keys = a.get(3).and_then(|m| m.shape().last().copied());
            rank4_layout(nh, dh, dv, [a[0], a[1], a[2]], mask_keys)?
        }
        3 => Layout::Packed3,
        2 => Layout::Packed2,
        r => return Err(format!("Attention on a rank-{r} Q is not lowered").into()),
    };
    let q = cast(a[0], dt)?;
    let k = cast(a[1], dt)?;
    let v = cast(a[2], dt)?;
    let fast = Fast {
        nh,
        dh,
        dv,
        mask: mask_kind,
        scale: score_scale.unwrap_or((*head_dim as f32).powf(-0.5)),
        softcap: *attn_logit_softcap,
    };
    if let Some(o) = attend_bshd_cpu(&q, &k, &v, a.get(3).copied(), layout, &fast)? {
        return Ok(o);
    }
    let (q, hq) = to_bhld("Q", &q, layout, dh)?;
    let (k, hk) = to_bhld("K", &k, layout, dh)?;
    let (v, hv) = to_bhld("V", &v, layout, dv)?;
    if hq != nh {
        return Err(format!("Attention Q holds {hq} heads but num_heads is {nh}").into());
    }
    if hk != hv || hk == 0 || nh % hk != 0 {
        return Err(format!(
            "Attention with {nh} query heads, {hk} key heads and {hv} value heads is not lowered"
        )
        .into());
    }
    let (b, lq) = (q.shape()[0], q.shape()[2]);
    let (kb, lk) = (k.shape()[0], k.shape()[2]);
    if kb != b || v.shape()[0] != b || v.shape()[2] != lk {
        return Err(format!(
            "Attention Q {:?}, K {:?}, V {:?} disagree on batch or key length",
            a[0].shape(),
            a[1].shape(),
            a[2].shape()
        )
        .into());
    }
    let scale = score_scale.unwrap_or((*head_dim as f32).powf(-0.5));
    let mask = match mask_kind {
        MaskKind::None => ScoreMask::None,
        MaskKind::Causal => ScoreMask::Causal,
        MaskKind::SlidingWindow(w) => ScoreMask::Window(*w),
        MaskKind::Custom => ScoreMask::Keys(a[3]),
        MaskKind::Bias => ScoreMask::Bias(a[3]),
    };
    let o = attend(&q, &k, &v, scale, mask, *attn_logit_softcap)?;
    // (B, H, Lq, Dv) back to rlx's layout.
    let o = match layout {
        Layout::Bhsd => o,
        Layout::Bshd => ops::transpose(&o, &[0, 2, 1, 3])?,
        Layout::Packed3 => {
            let t = ops::transpose(&o, &[0, 2, 1, 3])?;
            ops::reshape(&t, &[b, lq, nh * dv])?
        }
        Layout::Packed2 => {
            let t = ops::transpose(&o, &[0, 2, 1, 3])?;
            ops::reshape(&t, &[lq, nh * dv])?
        }
    };
    let out = cx.out_dims();
    Ok(
        if o.shape() != out && o.size() as i64 == super::numel(&out) {
            ops::reshape(&o, &out)?
        } else {
            o
        },
    )
}

/// What the transpose-free kernel path needs of an Attention node.
struct Fast<'a> {
    nh: i32,
    dh: i32,
    dv: i32,
    mask: &'a MaskKind,
    scale: f32,
    softcap: Option<f32>,
}

/// The shim's kernel on `[B, S, H, D]` operands as they are, where the
/// general path would transpose all four tensors to MLX's `[B, H, S, D]`
/// and back (four MLX ops a node): the CPU, float32, no mask, causal with
/// at least as many keys as queries, or an additive bias (`mask`) of `[B,
/// H, S_q, S_k]`; no cap, shapes that agree. None when it does not apply;
/// the general path then lowers (and reports) the node.
fn attend_bshd_cpu(
    q: &Array,
    k: &Array,
    v: &Array,
    mask: Option<&Array>,
    layout: Layout,
    f: &Fast,
) -> LResult<Option<A>> {
    if layout != Layout::Bshd || f.softcap.is_some_and(|c| c > 0.0) || !super::cpu_f32(&[q, k, v]) {
        return Ok(None);
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let agree = ks.len() == 4
        && vs.len() == 4
        && qs[2] == f.nh
        && qs[3] == f.dh
        && ks[3] == f.dh
        && vs[3] == f.dv
        && ks[0] == qs[0]
        && vs[0] == qs[0]
        && vs[1] == ks[1]
        && vs[2] == ks[2]
        && ks[1] > 0
        && ks[2] > 0
        && f.nh % ks[2] == 0;
    if !agree {
        return Ok(None);
    }
    let causal = match (f.mask, mask) {
        (MaskKind::None, _) => false,
        (MaskKind::Causal, _) if ks[1] >= qs[1] => true,
        (MaskKind::Bias, Some(m))
            if super::cpu_f32(&[m])
                && super::numel(&[qs[0], f.nh, qs[1], ks[1]]) == m.size() as i64 =>
        {
            return Ok(Some(rlx_mlx_shim::kernels::attention_bias_cpu(
                q, k, v, m, f.scale, true,
            )?));
        }
        _ => return Ok(None),
    };
    Ok(Some(rlx_mlx_shim::kernels::attention_cpu(
        q, k, v, f.scale, causal, true,
    )?))
}

/// How the scores are masked, in rlx's terms (see the module docs).
pub(crate) enum ScoreMask<'a> {
    None,
    /// Keep key `ki <= pos(qi)`.
    Causal,
    /// Keep `pos(qi) - w <= ki <= pos(qi)`.
    Window(usize),
    /// A key mask, `[B|1, S_k]` or a spelling of it of higher rank (see
    /// [`key_mask_bhqk`]): a value `< 0.5` masks the key (NaN keeps it).
    Keys(&'a Array),
    /// A rank-4 mask `[B|1, H|1, S_q|1, S_k]`, broadcast over the scores
    /// `(B, H, S_q, S_k)` and read like a key mask: a value `< 0.5` masks
    /// that score (NaN keeps it). The fused blocks' rank-4 masks.
    PerScore(&'a Array),
    /// A `[B, H, S_q, S_k]` tensor added to the scaled (and capped) scores.
    Bias(&'a Array),
}

/// A key mask as a rank-4 view that broadcasts over the scores `[B, H,
/// S_q, S_k]`. rlx's rule for where each axis of the mask lies is
/// `rlx_ir::mask_strides_for_shape`'s: `[B, S_k]`, `[B, S_q, S_k]`, `[B, H,
/// S_q, S_k]`, each axis of extent 1 broadcast (so `[1, S_k]` is one
/// padding row for the whole batch). Any other shape of `B * S_k` elements
/// is read as `[B, S_k]`, as before that rule. Refused otherwise, naming
/// the shape.
pub(crate) fn key_mask_bhqk(op: &str, m: &Array, [b, nh, lq, lk]: [i32; 4]) -> LResult {
    let d = m.shape();
    let view: Option<[i32; 4]> = match d[..] {
        [d0, k] => Some([d0, 1, 1, k]),
        [d0, q, k] => Some([d0, 1, q, k]),
        [d0, h, q, k] => Some([d0, h, q, k]),
        _ => None,
    };
    let fits = |v: &[i32; 4]| {
        let ok = |x: i32, n: i32| x == 1 || x == n;
        ok(v[0], b) && ok(v[1], nh) && ok(v[2], lq) && v[3] == lk
    };
    match view {
        Some(v) if fits(&v) => Ok(ops::reshape(m, &v)?),
        _ if m.size() == (b * lk) as usize => Ok(ops::reshape(m, &[b, 1, 1, lk])?),
        _ => Err(format!(
            "{op} key mask {d:?} does not broadcast over the scores [{b}, {nh}, {lq}, {lk}]: \
             [B|1, S_k], [B|1, S_q|1, S_k] or [B|1, H|1, S_q|1, S_k]"
        )
        .into()),
    }
}

/// The score rlx-cpu writes over a masked one (`attn_mask_neg_inf`).
const MASKED_SCORE: f64 = -1e9;

/// rlx attention on MLX-layout operands: q `(B, H, Lq, D)`, k `(B, Hkv, Lk,
/// D)`, v `(B, Hkv, Lk, Dv)` with `H % Hkv == 0` (query head `h` uses KV head
/// `h / (H / Hkv)`), all of one float dtype. Returns `(B, H, Lq, Dv)`.
///
/// Masking: an excluded score is replaced by -1e9 (rlx-cpu's
/// `attn_mask_neg_inf`), so a row whose keys are all excluded has equal
/// scores and a uniform softmax: its output is the mean of V over the keys.
///
/// `softcap`: rlx-ir documents `attn_logit_softcap = Some(c)` as the Gemma 2
/// cap, "`c * tanh(s / c)` on the scores before softmax". Gemma 2 caps the
/// scaled scores and then adds its mask, so a masked position gets exactly
/// zero weight; that is the order here, for every mask kind (the `Bias` is
/// added to the capped scores; Causal, SlidingWindow, Custom and per-score
/// exclusions replace the capped score by -1e9), in every layout. rlx-cpu
/// 0.2.19 caps after masking on its `[B, H, S, D]` path (masked scores
/// become `-c`, leaking `exp(-c - max)` of weight onto masked keys) and
/// ignores the cap on its other layouts; we do not follow it. `c <= 0` (or
/// NaN) means no cap, as on the CPU. The capped form is a composite in f32
/// (scores, cap, mask, softmax, @ V); without a cap this is
/// `mx::fast::scaled_dot_product_attention`.
pub(crate) fn attend(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: ScoreMask,
    softcap: Option<f32>,
) -> LResult {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (b, nh, lq) = (qs[0], qs[1], qs[2]);
    let (hk, lk) = (ks[1], ks[2]);
    let dv = vs[3];
    let dt = q.dtype();
    let (ulq, ulk) = (lq as usize, lk as usize);
    // Absolute position of query qi (rlx: queries sit at the end of the
    // keys; at 0 when there are more queries than keys).
    let q_off = ulk.saturating_sub(ulq);
    let cap = softcap.filter(|c| *c > 0.0);
    // A boolean keep-mask (broadcastable to the scores), an additive bias,
    // and, for a mask read from a tensor, the "some key is kept" flag of
    // each score row (broadcastable to the output).
    let mut keep: Option<A> = None;
    let mut bias: Option<A> = None;
    let mut row_any: Option<A> = None;
    let mut causal_mode = false;
    match mask {
        ScoreMask::None => {}
        ScoreMask::Causal if ulk >= ulq && cap.is_none() => causal_mode = true,
        ScoreMask::Causal => keep = Some(keep_mask(ulq, ulk, |qi, ki| ki <= q_off + qi)?),
        ScoreMask::Window(w) => {
            keep = Some(keep_mask(ulq, ulk, |qi, ki| {
                let p = q_off + qi;
                ki <= p && ki >= p.saturating_sub(w)
            })?)
        }
        ScoreMask::Bias(m) => {
            let n = super::numel(&[b, nh, lq, lk]);
            if m.size() as i64 != n {
                return Err(format!(
                    "Attention bias has {} elements, [B, H, S_q, S_k] needs {n}",
                    m.size()
                )
                .into());
            }
            let m = ops::reshape(m, &[b, nh, lq, lk])?;
            bias = Some(cast(&m, dt)?);
        }
        ScoreMask::Keys(m) => {
            let m = key_mask_bhqk("Attention", m, [b, nh, lq, lk])?;
            let (k, any) = tensor_keep(&m)?;
            (keep, row_any) = (Some(k), Some(any));
        }
        ScoreMask::PerScore(m) => {
            let d = m.shape();
            let fits = |i: usize, n: i32| d[i] == 1 || d[i] == n;
            if d.len() != 4 || !fits(0, b) || !fits(1, nh) || !fits(2, lq) || d[3] != lk {
                return Err(format!(
                    "attention mask {d:?} does not broadcast as [B|1, H|1, S_q|1, S_k] over \
                     scores [{b}, {nh}, {lq}, {lk}] (not lowered)"
                )
                .into());
            }
            let (k, any) = tensor_keep(m)?;
            (keep, row_any) = (Some(k), Some(any));
        }
    }
    if let Some(c) = cap {
        return attend_capped(q, k, v, scale, keep.as_deref(), bias.as_deref(), c);
    }
    // On the CPU, float32 without a tensor mask runs the shim's kernel: one
    // MLX op where MLX's sdpa falls back to about twenty on a CPU stream.
    if keep.is_none()
        && bias.is_none()
        && row_any.is_none()
        && (causal_mode || matches!(mask, ScoreMask::None))
        && super::cpu_f32(&[q, k, v])
    {
        return Ok(rlx_mlx_shim::kernels::attention_cpu(
            q,
            k,
            v,
            scale,
            causal_mode,
            false,
        )?);
    }
    // A bias on the CPU, float32: the shim's kernel as well.
    if let Some(bias) = bias.as_deref() {
        if keep.is_none() && row_any.is_none() && super::cpu_f32(&[q, k, v, bias]) {
            return Ok(rlx_mlx_shim::kernels::attention_bias_cpu(
                q, k, v, bias, scale, false,
            )?);
        }
    }
    // One query row with a bias on a CUDA GPU: the shim's kernel, where
    // MLX's CUDA vector kernel takes no mask and its fallback is a
    // composite of a handful of kernels.
    if let Some(bias) = bias.as_deref() {
        if keep.is_none()
            && row_any.is_none()
            && super::cuda_kernels(&[q, k, v, bias])
            && rlx_mlx_shim::cuda_kernels::attention_row_cuda_takes(q, k, v, bias)
        {
            return Ok(rlx_mlx_shim::cuda_kernels::attention_row_cuda(
                q, k, v, bias, scale,
            )?);
        }
    }
    let mode = if causal_mode { "causal" } else { "" };
    let m = keep.or(bias);
    let mut o = fast::scaled_dot_product_attention(q, k, v, scale, mode, m.as_deref())?;
    if let Some(any) = row_any {
        // A row with every key masked: rlx replaces every score with the
        // same -1e9, so its softmax is uniform (MLX's boolean mask would give
        // NaN): the output is the mean of V over the keys, per KV head.
        let mut mv = ops::mean(v, &[2], true)?;
        if hk != nh {
            mv = ops::repeat(&mv, nh / hk, 1)?;
        }
        let mv = ops::broadcast_to(&mv, &[b, nh, lq, dv])?;
        o = ops::where_(&any, &o, &mv)?;
    }
    Ok(o)
}

/// A rank-4 tensor mask (broadcastable to the scores) read as rlx reads a
/// key mask: the boolean keep-mask `!(m < 0.5)` (NaN keeps), and whether
/// each score row keeps some key (`any` over the key axis, kept as a size-1
/// axis).
fn tensor_keep(m: &Array) -> LResult<(A, A)> {
    let half = super::scalar(0.5, m.dtype())?;
    let lt = ops::less(m, &half)?;
    let keep = ops::logical_not(&lt)?;
    let any = ops::any(&keep, &[3], true)?;
    Ok((keep, any))
}

/// The soft-capped attention composite (see [`attend`]), in f32:
/// `softmax(mask(cap * tanh(q k^T * scale / cap))) @ v`, where the mask adds
/// the bias or writes -1e9 over an excluded score, after the cap: a masked
/// key gets zero weight. A row whose keys are all excluded gets equal
/// scores, hence the uniform softmax rlx gives, with no special case.
fn attend_capped(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    keep: Option<&Array>,
    bias: Option<&Array>,
    cap: f32,
) -> LResult {
    let f = MxDType::F32;
    let sc = |x: f64| super::scalar(x, f);
    let (q, mut k, mut v) = (cast(q, f)?, cast(k, f)?, cast(v, f)?);
    let (nh, hk) = (q.shape()[1], k.shape()[1]);
    if hk != nh {
        k = ops::repeat(&k, nh / hk, 1)?;
        v = ops::repeat(&v, nh / hk, 1)?;
    }
    let kt = ops::transpose(&k, &[0, 1, 3, 2])?;
    let mut s = ops::multiply(&*ops::matmul(&q, &kt)?, &*sc(scale as f64)?)?;
    let c = sc(cap as f64)?;
    s = ops::multiply(&c, &*ops::tanh(&*ops::divide(&s, &c)?)?)?;
    if let Some(bias) = bias {
        s = ops::add(&s, &*cast(bias, f)?)?;
    }
    if let Some(keep) = keep {
        s = ops::where_(keep, &s, &*sc(MASKED_SCORE)?)?;
    }
    let p = ops::softmax(&s, &[3], true)?;
    Ok(ops::matmul(&p, &v)?)
}

/// NeoX ("rotate-half") rope over the full head of `x` `(B, H, L, D)`,
/// D even, with `cos`/`sin` `(L, D/2)` tables (row = position):
/// `(x1 c - x2 s, x2 c + x1 s)` for `x1 = x[.., :D/2]`, `x2 = x[.., D/2:]`.
pub(crate) fn rope_neox_bhld(x: &Array, cos: &Array, sin: &Array) -> LResult {
    let d = x.shape();
    let (l, dh) = (d[2], d[3]);
    let half = dh / 2;
    let c = ops::reshape(cos, &[1, 1, l, half])?;
    let sn = ops::reshape(sin, &[1, 1, l, half])?;
    let x1 = last_slice(x, 0, half)?;
    let x2 = last_slice(x, half, dh)?;
    let o1 = ops::subtract(&*ops::multiply(&x1, &c)?, &*ops::multiply(&x2, &sn)?)?;
    let o2 = ops::add(&*ops::multiply(&x2, &c)?, &*ops::multiply(&x1, &sn)?)?;
    concat(&[&o1, &o2], 3)
}

/// rlx-ir's `rope_table_stride`: a table's row width.
fn table_stride(dims: &[i32], n_rot: usize) -> usize {
    if dims.len() >= 2 {
        (*dims.last().unwrap() as usize).max(1)
    } else {
        (n_rot / 2).max(1)
    }
}

fn rope(cx: &Ctx, a: &[&Array]) -> LResult {
    super::arity(a, 3, "Rope")?;
    crate::op_fields!(
        cx,
        Rope {
            head_dim,
            n_rot,
            style,
        }
    );
    let (dh, nr) = (*head_dim, *n_rot);
    let dims = a[0].shape();
    let r = dims.len();
    if r < 2 {
        return Err(format!("Rope on a rank-{r} input is not lowered").into());
    }
    if dh == 0 || dh % 2 != 0 || nr % 2 != 0 || nr > dh {
        return Err(format!(
            "Rope head_dim={dh} n_rot={nr} is not lowered (both even, n_rot <= head_dim)"
        )
        .into());
    }
    let hidden = dims[r - 1] as usize;
    let s = dims[r - 2] as usize;
    let b: usize = dims[..r - 2].iter().map(|d| *d as usize).product();
    if !hidden.is_multiple_of(dh) {
        return Err(format!(
            "Rope input last dim {hidden} is not a multiple of head_dim {dh} (not lowered)"
        )
        .into());
    }
    let nh = hidden / dh;
    let rh = nr / 2;
    let dt = cx.out_dtype();
    let x = cast(a[0], dt)?;
    let x4 = ops::reshape(&x, &[b.i32()?, s.i32()?, nh.i32()?, dh.i32()?])?;
    if rh == 0 {
        return Ok(ops::reshape(&x4, &dims)?);
    }
    // The tables, as [rows, rh] then broadcastable over heads.
    let tdims = a[1].shape();
    if a[2].shape() != tdims {
        return Err(format!(
            "Rope cos {:?} and sin {:?} tables differ in shape",
            tdims,
            a[2].shape()
        )
        .into());
    }
    let stride = table_stride(&tdims, nr);
    let rows = a[1].size() / stride;
    let per_token = rows == b * s && rows != s;
    let need = if per_token { b * s } else { s };
    if rh > stride || rows < need {
        return Err(format!(
            "Rope table {tdims:?} (rows of {stride}) cannot serve {need} positions of \
             {rh} angles (not lowered)"
        )
        .into());
    }
    // On the CPU, float32 runs the shim's rope kernel on the tables as they
    // are: one MLX op where the composite below makes about twenty.
    // x is read as [B, S, H, D] as it lies: no reshape ops around it.
    // On a CUDA GPU, the shim's CUDA kernel, one node as well.
    let spec = rlx_mlx_shim::kernels::RopeSpec {
        head_dim: dh,
        n_rot: nr,
        stride,
        per_token,
        gptj: matches!(style, RopeStyle::GptJ),
    };
    if super::cpu_f32(&[&x, a[1], a[2]]) && x.shape() == cx.out_dims() {
        return Ok(rlx_mlx_shim::kernels::rope_cpu(&x, a[1], a[2], &spec)?);
    }
    if super::cuda_kernels(&[&x, a[1], a[2]]) && super::one_row(&x) {
        let y = rlx_mlx_shim::cuda_kernels::rope_cuda(&x, a[1], a[2], &spec)?;
        return Ok(ops::reshape(&y, &cx.out_dims())?);
    }
    let table = |t: &Array| -> LResult {
        let flat = ops::reshape(t, &[t.size().i32()?])?;
        let flat = ops::slice(&flat, &[0], &[(rows * stride).i32()?], &[1])?;
        let m = ops::reshape(&flat, &[rows.i32()?, stride.i32()?])?;
        let m = ops::slice(&m, &[0, 0], &[need.i32()?, rh.i32()?], &[1, 1])?;
        let shape: [i32; 4] = if per_token {
            [b.i32()?, s.i32()?, 1, rh.i32()?]
        } else {
            [1, s.i32()?, 1, rh.i32()?]
        };
        let m = ops::reshape(&m, &shape)?;
        cast(&m, dt)
    };
    let (c, sn) = (table(a[1])?, table(a[2])?);
    let rot = |x1: &Array, x2: &Array, c: &Array, sn: &Array| -> LResult<(A, A)> {
        let (x1c, x2s) = (ops::multiply(x1, c)?, ops::multiply(x2, sn)?);
        let o1 = ops::subtract(&x1c, &x2s)?;
        let (x2c, x1s) = (ops::multiply(x2, c)?, ops::multiply(x1, sn)?);
        let o2 = ops::add(&x2c, &x1s)?;
        Ok((o1, o2))
    };
    let rotated = match style {
        RopeStyle::NeoX => {
            let x1 = last_slice(&x4, 0, rh.i32()?)?;
            let x2 = last_slice(&x4, rh.i32()?, nr.i32()?)?;
            let (o1, o2) = rot(&x1, &x2, &c, &sn)?;
            concat(&[&o1, &o2], 3)?
        }
        RopeStyle::GptJ => {
            let xr = last_slice(&x4, 0, nr.i32()?)?;
            let xr = ops::reshape(&xr, &[b.i32()?, s.i32()?, nh.i32()?, rh.i32()?, 2])?;
            let x1 = last_slice(&xr, 0, 1)?;
            let x2 = last_slice(&xr, 1, 2)?;
            let c5 = ops::expand_dims(&c, &[4])?;
            let s5 = ops::expand_dims(&sn, &[4])?;
            let (o1, o2) = rot(&x1, &x2, &c5, &s5)?;
            let pairs = concat(&[&o1, &o2], 4)?;
            ops::reshape(&pairs, &[b.i32()?, s.i32()?, nh.i32()?, nr.i32()?])?
        }
    };
    let out = if nr < dh {
        let rest = last_slice(&x4, nr.i32()?, dh.i32()?)?;
        concat(&[&rotated, &rest], 3)?
    } else {
        rotated
    };
    Ok(ops::reshape(&out, &cx.out_dims())?)
}
