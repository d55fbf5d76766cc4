//! Convolution, pooling and attention backward ops (issue #15, training).
//!
//! Semantics follow rlx-ir 0.2.19 (`src/op.rs`) and the rlx-cpu 0.2.19
//! kernels (`thunk/ops/conv.rs`, `training_bwd.rs`), NCHW throughout:
//!
//! - `Conv2dBackwardInput` `[dy, w]` → `dx` of the declared `[N, C_in, H, W]`:
//!   `dx[n, ci, ih, iw] = Σ dy[n, co, oh, ow] · w[co, ci % (C_in/g), ki, kj]`
//!   over `ih = oh·sh + ki·dh − ph`, `iw = ow·sw + kj·dw − pw` (co in ci's
//!   group). A transposed convolution of `dy` by the forward weight:
//!   one `mx::conv_general` with input dilation = stride, the kernel flipped
//!   and regrouped, low padding `dh·(kh−1) − ph`.
//! - `Conv2dBackwardWeight` `[x, dy]` → `dw` of the declared
//!   `[C_out, C_in/g, kH, kW]`:
//!   `dw[co, ci, ki, kj] = Σ_{n,oh,ow} x[n, g·C_in/g + ci, ih, iw] · dy[n, co, oh, ow]`
//!   (taps outside the input read zero). One grouped `mx::conv_general`
//!   with the batch as the contracted channel axis: input `x` as
//!   `[C_in/g, H, W, g·N]`, kernel `dy` as `[C_out, H_out, W_out, N]`, stride
//!   = the forward dilation, kernel dilation = the forward stride.
//! - `MaxPool2dBackward` `[x, dy]` → `dx` shaped like `x`: each `dy` element
//!   goes to the position of its window's max (rlx-cpu's rule: the first
//!   maximal tap in row-major window order, `>` comparisons; taps outside
//!   the input are skipped; NaN never wins, except that with zero padding
//!   the first tap is the starting candidate and keeps the gradient if it
//!   is NaN; with padding a window whose taps are all -inf or NaN routes
//!   nothing). Gather of the windows, first-max index, `scatter_add` along
//!   the flattened plane.
//!
//! Conv/pool geometry fields as rlx-cpu reads them: `stride`/`padding`/`dilation`
//! entry 0 is H, entry 1 is W (missing: 1 / 0 / 1); a 4-entry ONNX-style
//! padding `[h_begin, w_begin, h_end, w_end]` uses its begins (the ends are
//! implied by the declared shapes). Output and `dy` extents are the
//! declared shapes. Only rank-4 operands and 2-entry kernels are defined
//! (rlx-cpu skips anything else); others are refused.
//!
//! - `AttentionBackward` `[q, k, v, dy (, mask)]` → one of dQ, dK, dV (in
//!   its operand's layout): the gradient of `Σ dy ⊙ Attention(q, k, v)` with
//!   the forward's definition (see attention.rs): layouts decided from Q's
//!   shape (`[B, H, S, D]` when `dims[1] == num_heads`, else `[B, S, H, D]`;
//!   `[B, S, H*D]`; `[S, H*D]`), GQA/MQA from K's head count (dK/dV summed
//!   over the query heads sharing a KV head), V's head width from V's shape,
//!   masks None / Causal / SlidingWindow / Custom (`< 0.5` masks a key) /
//!   Bias, in the forward's order: scale, logit cap, then mask. A masked
//!   score is the constant -1e9, so it passes no gradient (a fully masked
//!   row attends uniformly: dV flows, dQ/dK are 0 there). The op carries no
//!   `score_scale` / `attn_logit_softcap` (rlx-autodiff drops them), so they
//!   are read from the forward `Attention` node on the same q, k, v (and
//!   mask) with the same heads and mask kind; without one, the defaults
//!   (`head_dim^-0.5`, no cap); two such forwards that disagree are
//!   refused. (rlx-cpu 0.2.19 always uses the defaults, has no GQA, and
//!   differentiates the masked scores of a fully masked row.)
//!
//! Reduced-precision inputs are computed in f32 and rounded once.

use super::attention::Layout;
use super::{arity, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::{AttentionBwdWrt, MaskKind};
use rlx_ir::Op;
use rlx_mlx_shim::{ops, Array, DType as MxDType};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Conv2dBackwardInput,
            FLOATS,
            Composite,
            "transposed conv of dy by the forward weight: one mx::conv_general (input \
             dilation = stride, flipped regrouped kernel, NCHW<->NHWC transposes); stride, \
             padding, dilation, groups; dx extent = declared shape",
            conv2d_backward_input
        ),
        row!(
            Conv2dBackwardWeight,
            FLOATS,
            Composite,
            "one grouped mx::conv_general contracting the batch: x as [C_in/g, H, W, g*N], \
             dy as the kernel [C_out, H_out, W_out, N], stride = dilation, kernel dilation = \
             stride; padding, groups",
            conv2d_backward_weight
        ),
        row!(
            AttentionBackward,
            FLOATS,
            Composite,
            "f32 composite: recomputed scores (scale, logit cap, mask), softmax, softmax-vjp, \
             matmuls; layouts [B,H,S,D]/[B,S,H,D]/[B,S,H*D]/[S,H*D], masks None/Causal/\
             SlidingWindow/Custom/Bias, GQA (dK/dV summed over each KV head's query heads); \
             score_scale and attn_logit_softcap read from the forward Attention node on the \
             same inputs (default head_dim^-0.5, no cap when there is none)",
            attention_backward
        ),
        row!(
            MaxPool2dBackward,
            FLOATS,
            Composite,
            "window gather + first-max tap (rlx-cpu's tie/NaN rule) + scatter_add over the \
             flattened plane; kernel, stride, padding",
            maxpool2d_backward
        ),
    ]
}

// ── helpers ─────────────────────────────────────────────────────────────

/// The forward geometry `(stride, padding, dilation)` per spatial dim,
/// H then W, as rlx-cpu reads it.
struct Geom {
    k: [i32; 2],
    s: [i32; 2],
    p: [i32; 2],
    d: [i32; 2],
}

fn geom(
    op: &str,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
) -> LResult<Geom> {
    if kernel_size.len() != 2 {
        return Err(format!(
            "{op} with a {}-entry kernel_size is not lowered (2-D only)",
            kernel_size.len()
        )
        .into());
    }
    let list = |what: &str, v: &[usize], pairs: bool| -> LResult<()> {
        if v.len() <= 2 || (pairs && v.len() == 4) {
            Ok(())
        } else {
            Err(format!("{op} with a {}-entry {what} is not lowered", v.len()).into())
        }
    };
    list("stride", stride, false)?;
    list("dilation", dilation, false)?;
    list("padding", padding, true)?;
    let at = |v: &[usize], i: usize, dflt: usize| v.get(i).copied().unwrap_or(dflt).i32();
    let g = Geom {
        k: [kernel_size[0].i32()?, kernel_size[1].i32()?],
        s: [at(stride, 0, 1)?, at(stride, 1, 1)?],
        p: [at(padding, 0, 0)?, at(padding, 1, 0)?],
        d: [at(dilation, 0, 1)?, at(dilation, 1, 1)?],
    };
    if g.k.contains(&0) || g.s.contains(&0) || g.d.contains(&0) {
        return Err(format!("{op} with a zero kernel, stride or dilation is not supported").into());
    }
    Ok(g)
}

fn rank4(op: &str, what: &str, d: &[i32]) -> LResult<()> {
    if d.len() != 4 {
        return Err(format!(
            "{op} with a rank-{} {what} is not lowered (NCHW only)",
            d.len()
        )
        .into());
    }
    Ok(())
}

fn to_f32(x: &Array) -> LResult {
    Ok(ops::astype(x, MxDType::F32)?)
}

fn groups_of(op: &str, groups: usize, c_in: i32, c_out: i32) -> LResult<i32> {
    let g = groups.i32()?;
    if g <= 0 || c_in % g != 0 || c_out % g != 0 {
        return Err(format!(
            "{op}: groups={groups} does not divide C_in={c_in} and C_out={c_out}: not supported"
        )
        .into());
    }
    Ok(g)
}

/// A 2-D channels-last convolution: `x` `[N, H, W, C]`, `w` `[O, kh, kw,
/// C/groups]`, per dim `stride`, kernel dilation `kdil`, input dilation
/// `idil` and low padding `lo` (negative only with stride 1: cropped
/// after). The high padding is whatever makes the output reach `out_sp`
/// (zeros past the input); any excess is cut off. Returns
/// `[N, out_sp.., O]`.
#[allow(clippy::too_many_arguments)]
fn conv2d_cl(
    x: &Array,
    w: &Array,
    stride: [i32; 2],
    kdil: [i32; 2],
    idil: [i32; 2],
    lo: [i32; 2],
    groups: i32,
    flip: bool,
    out_sp: [i32; 2],
) -> LResult {
    let (xd, wd) = (x.shape(), w.shape());
    let mut pad_lo = [0; 2];
    let mut pad_hi = [0; 2];
    let mut crop = [0; 2];
    for i in 0..2 {
        let in_ext = (xd[i + 1] - 1) * idil[i] + 1;
        let k_ext = (wd[i + 1] - 1) * kdil[i] + 1;
        let (l, c) = if lo[i] >= 0 {
            (lo[i], 0)
        } else {
            if stride[i] != 1 {
                return Err("negative padding with a stride is not lowered".into());
            }
            (0, -lo[i])
        };
        let need = (c + out_sp[i] - 1) * stride[i] + k_ext;
        pad_lo[i] = l;
        pad_hi[i] = (need - in_ext - l).max(0);
        crop[i] = c;
    }
    let y = ops::conv_general(x, w, &stride, &pad_lo, &pad_hi, &kdil, &idil, groups, flip)?;
    let yd = y.shape();
    if crop == [0, 0] && yd[1] == out_sp[0] && yd[2] == out_sp[1] {
        return Ok(y);
    }
    for i in 0..2 {
        if crop[i] + out_sp[i] > yd[i + 1] {
            return Err(format!(
                "the convolution gives {} positions along spatial dim {i}, the node needs {}",
                yd[i + 1] - crop[i],
                out_sp[i]
            )
            .into());
        }
    }
    Ok(ops::slice(
        &y,
        &[0, crop[0], crop[1], 0],
        &[yd[0], crop[0] + out_sp[0], crop[1] + out_sp[1], yd[3]],
        &[1, 1, 1, 1],
    )?)
}

// ── Conv2dBackwardInput ─────────────────────────────────────────────────

fn conv2d_backward_input(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "Conv2dBackwardInput";
    arity(a, 2, OP)?;
    crate::op_fields!(
        cx,
        Conv2dBackwardInput {
            kernel_size,
            stride,
            padding,
            dilation,
            groups
        }
    );
    let gm = geom(OP, kernel_size, stride, padding, dilation)?;
    let (dyd, wd, od) = (cx.in_dims(0), cx.in_dims(1), cx.out_dims());
    rank4(OP, "dy", &dyd)?;
    rank4(OP, "weight", &wd)?;
    rank4(OP, "output", &od)?;
    let (n, c_in, h, w_in) = (od[0], od[1], od[2], od[3]);
    let c_out = dyd[1];
    if dyd[0] != n {
        return Err(format!("{OP}: dy {dyd:?} and dx {od:?} disagree on the batch").into());
    }
    let g = groups_of(OP, *groups, c_in, c_out)?;
    let (cin_g, cout_g) = (c_in / g, c_out / g);
    let [kh, kw] = gm.k;
    let want = (c_out * cin_g * kh * kw) as usize;
    let wt = to_f32(a[1])?;
    if wt.size() != want {
        return Err(format!(
            "{OP}: the weight {wd:?} does not hold a [{c_out}, {cin_g}, {kh}, {kw}] kernel"
        )
        .into());
    }
    // [C_out, C_in/g, kh, kw] = [g, C_out/g, C_in/g, kh, kw]
    //   -> MLX weight [C_in, kh, kw, C_out/g]: [g, C_in/g, kh, kw, C_out/g].
    let wt = ops::reshape(&wt, &[g, cout_g, cin_g, kh, kw])?;
    let wt = ops::transpose(&wt, &[0, 2, 3, 4, 1])?;
    let wt = ops::reshape(&wt, &[c_in, kh, kw, cout_g])?;
    // dy NCHW -> NHWC
    let dy = ops::transpose(&*to_f32(a[0])?, &[0, 2, 3, 1])?;
    let lo = [gm.d[0] * (kh - 1) - gm.p[0], gm.d[1] * (kw - 1) - gm.p[1]];
    let y = conv2d_cl(&dy, &wt, [1, 1], gm.d, gm.s, lo, g, true, [h, w_in])?;
    Ok(ops::transpose(&y, &[0, 3, 1, 2])?)
}

// ── Conv2dBackwardWeight ────────────────────────────────────────────────

fn conv2d_backward_weight(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "Conv2dBackwardWeight";
    arity(a, 2, OP)?;
    crate::op_fields!(
        cx,
        Conv2dBackwardWeight {
            kernel_size,
            stride,
            padding,
            dilation,
            groups
        }
    );
    let gm = geom(OP, kernel_size, stride, padding, dilation)?;
    let (xd, dyd, od) = (cx.in_dims(0), cx.in_dims(1), cx.out_dims());
    rank4(OP, "x", &xd)?;
    rank4(OP, "dy", &dyd)?;
    rank4(OP, "output", &od)?;
    let (n, c_in, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let c_out = dyd[1];
    if dyd[0] != n {
        return Err(format!("{OP}: x {xd:?} and dy {dyd:?} disagree on the batch").into());
    }
    let g = groups_of(OP, *groups, c_in, c_out)?;
    let cin_g = c_in / g;
    let [kh, kw] = gm.k;
    if super::numel(&od) != super::numel(&[c_out, cin_g, kh, kw]) {
        return Err(format!(
            "{OP}: the declared dw {od:?} does not hold a [{c_out}, {cin_g}, {kh}, {kw}] kernel"
        )
        .into());
    }
    // x [N, g, C_in/g, H, W] -> [C_in/g, H, W, g, N] -> [C_in/g, H, W, g*N]
    let x = ops::reshape(&*to_f32(a[0])?, &[n, g, cin_g, h, w])?;
    let x = ops::transpose(&x, &[2, 3, 4, 1, 0])?;
    let x = ops::reshape(&x, &[cin_g, h, w, g * n])?;
    // dy [N, C_out, Ho, Wo] -> kernel [C_out, Ho, Wo, N]
    let k = ops::transpose(&*to_f32(a[1])?, &[1, 2, 3, 0])?;
    // out[ci, ki, kj, co] = Σ x[ci, ki·d + oh·s - p, kj·d + ow·s - p, (g, n)] dy[co, oh, ow, n]
    let y = conv2d_cl(&x, &k, gm.d, gm.s, [1, 1], gm.p, g, false, [kh, kw])?;
    // [C_in/g, kh, kw, C_out] -> [C_out, C_in/g, kh, kw]
    let y = ops::transpose(&y, &[3, 0, 1, 2])?;
    Ok(ops::reshape(&y, &od)?)
}

// ── MaxPool2dBackward ───────────────────────────────────────────────────

fn maxpool2d_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "MaxPool2dBackward";
    arity(a, 2, OP)?;
    crate::op_fields!(
        cx,
        MaxPool2dBackward {
            kernel_size,
            stride,
            padding
        }
    );
    let gm = geom(OP, kernel_size, stride, padding, &[])?;
    let (xd, dyd) = (cx.in_dims(0), cx.in_dims(1));
    rank4(OP, "x", &xd)?;
    rank4(OP, "dy", &dyd)?;
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let (ho, wo) = (dyd[2], dyd[3]);
    if dyd[0] != n || dyd[1] != c {
        return Err(format!("{OP}: x {xd:?} and dy {dyd:?} disagree on N or C").into());
    }
    let [kh, kw] = gm.k;
    let kk = (kh * kw) as usize;
    let nwin = (ho * wo) as usize;
    // Per window and tap (row-major window order): the flat in-plane index
    // of the tap, and whether it lies inside the input.
    let mut idx = vec![0i32; nwin * kk];
    let mut valid = vec![false; nwin * kk];
    for oh in 0..ho {
        for ow in 0..wo {
            let wi = (oh * wo + ow) as usize;
            for ki in 0..kh {
                for kj in 0..kw {
                    let t = (ki * kw + kj) as usize;
                    let ih = oh * gm.s[0] + ki - gm.p[0];
                    let iw = ow * gm.s[1] + kj - gm.p[1];
                    if ih >= 0 && ih < h && iw >= 0 && iw < w {
                        idx[wi * kk + t] = ih * w + iw;
                        valid[wi * kk + t] = true;
                    }
                }
            }
        }
    }
    let (nc, hw) = (n * c, h * w);
    let x = ops::reshape(&*to_f32(a[0])?, &[nc, hw])?;
    let idx_a = Array::from_slice(&idx, &[(nwin * kk).i32()?])?;
    let win = ops::take(&x, &idx_a, 1)?;
    let win = ops::reshape(&win, &[nc, nwin.i32()?, kk.i32()?])?;
    let valid_a = Array::from_slice(&valid, &[1, nwin.i32()?, kk.i32()?])?;
    // Candidates: in-bounds, not NaN. m = their max; the chosen tap is the
    // first candidate equal to m (strict `>` keeps the first maximum).
    let cand = ops::logical_and(&valid_a, &*ops::logical_not(&*ops::isnan(&win)?)?)?;
    let ninf = super::scalar(f64::NEG_INFINITY, MxDType::F32)?;
    let vals = ops::where_(&cand, &win, &ninf)?;
    let m = ops::max(&vals, &[2], true)?;
    let mut hit = ops::logical_and(&cand, &*ops::equal(&vals, &m)?)?;
    let padded = gm.p != [0, 0];
    if padded {
        // The candidate starts at -inf: a window of only -inf (or NaN)
        // taps routes nothing.
        hit = ops::logical_and(&hit, &*ops::greater(&m, &ninf)?)?;
    }
    let tap = Array::from_slice(&(0..kk.i32()?).collect::<Vec<_>>(), &[1, 1, kk.i32()?])?;
    let none = super::scalar(kk as f64, MxDType::I32)?;
    let mut chosen = ops::min(&*ops::where_(&hit, &tap, &none)?, &[2], false)?; // [nc, nwin]
    if !padded {
        // The first tap is the starting candidate: it keeps the gradient
        // when it is NaN (nothing compares greater than NaN).
        let first = ops::slice(&win, &[0, 0, 0], &[nc, nwin.i32()?, 1], &[1, 1, 1])?;
        let first = ops::squeeze(&first, &[2])?;
        let zero = super::scalar(0.0, MxDType::I32)?;
        chosen = ops::where_(&*ops::isnan(&first)?, &zero, &chosen)?;
    }
    let routed = ops::less(&chosen, &none)?;
    let safe = ops::minimum(&chosen, &*super::scalar(kk as f64 - 1.0, MxDType::I32)?)?;
    // flat index of the chosen tap: idx[window, tap]
    let table = Array::from_slice(&idx, &[1, nwin.i32()?, kk.i32()?])?;
    let table = ops::broadcast_to(&table, &[nc, nwin.i32()?, kk.i32()?])?;
    let pos = ops::take_along_axis(&table, &*ops::expand_dims(&safe, &[2])?, 2)?;
    let pos = ops::squeeze(&pos, &[2])?;
    let dy = ops::reshape(&*to_f32(a[1])?, &[nc, nwin.i32()?])?;
    let zero = super::scalar(0.0, MxDType::F32)?;
    let dy = ops::where_(&routed, &dy, &zero)?;
    let dx = rlx_mlx_shim::array::full(&[nc, hw], 0.0, MxDType::F32)?;
    let dx = ops::scatter_add_axis(&dx, &pos, &dy, 1)?;
    Ok(ops::reshape(&dx, &xd)?)
}

// ── AttentionBackward ───────────────────────────────────────────────────

/// Heads in an operand of `layout` whose heads are `d` wide.
fn heads_of(name: &str, s: &[i32], layout: Layout, d: i32) -> LResult<i32> {
    let rank = match layout {
        Layout::Bhsd | Layout::Bshd => 4,
        Layout::Packed3 => 3,
        Layout::Packed2 => 2,
    };
    let bad = || -> LResult<i32> {
        Err(format!(
            "AttentionBackward {name} of shape {s:?} does not hold heads of width {d} in the \
             {layout:?} layout (not lowered)"
        )
        .into())
    };
    if s.len() != rank || d <= 0 {
        return bad();
    }
    match layout {
        Layout::Bhsd if s[3] == d => Ok(s[1]),
        Layout::Bshd if s[3] == d => Ok(s[2]),
        Layout::Packed3 | Layout::Packed2 if s[rank - 1] % d == 0 => Ok(s[rank - 1] / d),
        _ => bad(),
    }
}

/// The width of V's heads, given K's head count.
fn v_width(s: &[i32], layout: Layout, hk: i32) -> i32 {
    match layout {
        Layout::Bhsd | Layout::Bshd => s[3],
        Layout::Packed3 | Layout::Packed2 => {
            if hk > 0 {
                s[s.len() - 1] / hk
            } else {
                0
            }
        }
    }
}

/// One operand to `(B, H, L, D)` in f32.
fn to_bhld(a: &Array, layout: Layout, h: i32, d: i32) -> LResult {
    let a = to_f32(a)?;
    let s = a.shape();
    Ok(match layout {
        Layout::Bhsd => a,
        Layout::Bshd => ops::transpose(&a, &[0, 2, 1, 3])?,
        Layout::Packed3 | Layout::Packed2 => {
            let (b, l) = if layout == Layout::Packed3 {
                (s[0], s[1])
            } else {
                (1, s[0])
            };
            let r = ops::reshape(&a, &[b, l, h, d])?;
            ops::transpose(&r, &[0, 2, 1, 3])?
        }
    })
}

/// `(B, H, L, D)` back to `layout`.
fn from_bhld(a: &Array, layout: Layout) -> LResult {
    let s = a.shape();
    let (b, h, l, d) = (s[0], s[1], s[2], s[3]);
    Ok(match layout {
        Layout::Bhsd => a.clone_handle(),
        Layout::Bshd => ops::transpose(a, &[0, 2, 1, 3])?,
        Layout::Packed3 => ops::reshape(&*ops::transpose(a, &[0, 2, 1, 3])?, &[b, l, h * d])?,
        Layout::Packed2 => ops::reshape(&*ops::transpose(a, &[0, 2, 1, 3])?, &[l, h * d])?,
    })
}

/// The forward `Attention` this node differentiates: the one on the same
/// q, k, v (and mask) with the same heads and mask kind. Its
/// `(score_scale, attn_logit_softcap)`, or `(None, None)` when the graph
/// holds none (the op's own defaults); two that disagree are refused.
fn forward_scale_cap(cx: &Ctx) -> LResult<(Option<f32>, Option<f32>)> {
    crate::op_fields!(
        cx,
        AttentionBackward {
            num_heads,
            head_dim,
            mask_kind,
            ..
        }
    );
    let ins = &cx.node.inputs;
    let masked = matches!(mask_kind, MaskKind::Custom | MaskKind::Bias);
    let mut found: Option<(Option<f32>, Option<f32>)> = None;
    for n in cx.graph.nodes() {
        let Op::Attention {
            num_heads: fh,
            head_dim: fd,
            mask_kind: fm,
            score_scale,
            attn_logit_softcap,
            ..
        } = &n.op
        else {
            continue;
        };
        let same_inputs = n.inputs.len() >= 3
            && n.inputs[..3] == ins[..3]
            && (!masked || (n.inputs.len() == 4 && ins.len() == 5 && n.inputs[3] == ins[4]));
        if !same_inputs || fh != num_heads || fd != head_dim || fm != mask_kind {
            continue;
        }
        // Normalise "no cap" (None, c <= 0, NaN) so equivalent forwards agree.
        let cap = attn_logit_softcap.filter(|c| *c > 0.0);
        let this = (*score_scale, cap);
        match found {
            Some(f) if f != this => {
                return Err(format!(
                    "AttentionBackward: two forward Attention nodes on its inputs disagree on \
                     score_scale/attn_logit_softcap ({f:?} vs {this:?}): not lowered"
                )
                .into())
            }
            _ => found = Some(this),
        }
    }
    Ok(found.unwrap_or((None, None)))
}

/// Sum the query heads of each KV head: `(B, H, L, D)` -> `(B, Hk, L, D)`.
fn group_sum(a: &Array, hk: i32) -> LResult {
    let s = a.shape();
    if s[1] == hk {
        return Ok(a.clone_handle());
    }
    let r = ops::reshape(a, &[s[0], hk, s[1] / hk, s[2], s[3]])?;
    Ok(ops::sum(&r, &[2], false)?)
}

/// rlx attention, differentiated (see the module docs of attention.rs for
/// the forward): with `s0 = scale·QKᵀ`, `s1 = c·tanh(s0/c)` (or `s0`),
/// `s2 = s1 + bias` or `-1e9` where a key is masked, `P = softmax(s2)`,
/// `O = P·V`: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dS2 = P ⊙ (dP − rowsum(P ⊙ dP))`,
/// `dS1 = dS2` where kept, 0 where masked (a masked score is a constant),
/// `dS0 = dS1 ⊙ (1 − tanh²)`, `dQ = scale·dS0·K`, `dK = scale·dS0ᵀ·Q`;
/// GQA: dK, dV summed over the query heads sharing a KV head.
fn attention_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "AttentionBackward";
    crate::op_fields!(
        cx,
        AttentionBackward {
            num_heads,
            head_dim,
            mask_kind,
            wrt
        }
    );
    let want = if matches!(mask_kind, MaskKind::Custom | MaskKind::Bias) {
        5
    } else {
        4
    };
    arity(a, want, OP)?;
    let (nh, dh) = ((*num_heads).i32()?, (*head_dim).i32()?);
    let qs = a[0].shape();
    let layout = match qs.len() {
        4 if qs[1] == nh => Layout::Bhsd,
        4 => Layout::Bshd,
        3 => Layout::Packed3,
        2 => Layout::Packed2,
        r => return Err(format!("{OP} on a rank-{r} Q is not lowered").into()),
    };
    let hq = heads_of("Q", &qs, layout, dh)?;
    let hk = heads_of("K", &a[1].shape(), layout, dh)?;
    let dv = v_width(&a[2].shape(), layout, hk);
    let hv = heads_of("V", &a[2].shape(), layout, dv)?;
    let hd = heads_of("dy", &a[3].shape(), layout, dv)?;
    if hq != nh || hd != nh {
        return Err(format!("{OP}: Q/dy hold {hq}/{hd} heads but num_heads is {nh}").into());
    }
    if hk != hv || hk == 0 || nh % hk != 0 {
        return Err(format!(
            "{OP} with {nh} query heads, {hk} key heads and {hv} value heads is not lowered"
        )
        .into());
    }
    let q = to_bhld(a[0], layout, nh, dh)?;
    let k = to_bhld(a[1], layout, hk, dh)?;
    let v = to_bhld(a[2], layout, hk, dv)?;
    let dy = to_bhld(a[3], layout, nh, dv)?;
    let (b, lq) = (q.shape()[0], q.shape()[2]);
    let lk = k.shape()[2];
    if k.shape()[0] != b || v.shape()[0] != b || v.shape()[2] != lk || dy.shape()[2] != lq {
        return Err(format!(
            "{OP}: Q {qs:?}, K {:?}, V {:?}, dy {:?} disagree on batch or lengths",
            a[1].shape(),
            a[2].shape(),
            a[3].shape()
        )
        .into());
    }
    let (scale, cap) = forward_scale_cap(cx)?;
    let scale = scale.unwrap_or((*head_dim as f32).powf(-0.5)) as f64;
    let f = MxDType::F32;
    let sc = |x: f64| super::scalar(x, f);
    let (ulq, ulk) = (lq as usize, lk as usize);
    let q_off = ulk.saturating_sub(ulq);
    // keep: a boolean mask broadcastable to the scores (B, H, Lq, Lk).
    let mut keep: Option<A> = None;
    let mut bias: Option<A> = None;
    let pattern = |f: &dyn Fn(usize, usize) -> bool| -> LResult {
        let m: Vec<bool> = (0..ulq * ulk).map(|i| f(i / ulk, i % ulk)).collect();
        Ok(Array::from_slice(&m, &[1, 1, lq, lk])?)
    };
    match mask_kind {
        MaskKind::None => {}
        MaskKind::Causal => keep = Some(pattern(&|qi, ki| ki <= q_off + qi)?),
        MaskKind::SlidingWindow(w) => {
            let w = *w;
            keep = Some(pattern(&|qi, ki| {
                let p = q_off + qi;
                ki <= p && ki >= p.saturating_sub(w)
            })?)
        }
        MaskKind::Custom => {
            let m = super::attention::key_mask_bhqk(OP, &*to_f32(a[4])?, [b, nh, lq, lk])?;
            // `< 0.5` masks the key (NaN keeps it), as the forward.
            keep = Some(ops::logical_not(&*ops::less(&m, &*sc(0.5)?)?)?);
        }
        MaskKind::Bias => {
            let m = a[4];
            let n = (b * nh * lq * lk) as usize;
            if m.size() != n {
                return Err(format!(
                    "{OP} bias has {} elements, [B, H, S_q, S_k] needs {n}",
                    m.size()
                )
                .into());
            }
            bias = Some(ops::reshape(&*to_f32(m)?, &[b, nh, lq, lk])?);
        }
    }
    let rep = nh / hk;
    let (ke, ve) = if rep > 1 {
        (ops::repeat(&k, rep, 1)?, ops::repeat(&v, rep, 1)?)
    } else {
        (k.clone_handle(), v.clone_handle())
    };
    let s0 = ops::multiply(
        &*ops::matmul(&q, &*ops::transpose(&ke, &[0, 1, 3, 2])?)?,
        &*sc(scale)?,
    )?;
    let mut tanh: Option<A> = None;
    let mut s = match cap {
        Some(c) => {
            let c = sc(c as f64)?;
            let t = ops::tanh(&*ops::divide(&s0, &c)?)?;
            let s1 = ops::multiply(&c, &t)?;
            tanh = Some(t);
            s1
        }
        None => s0,
    };
    if let Some(bias) = &bias {
        s = ops::add(&s, bias)?;
    }
    if let Some(keep) = &keep {
        s = ops::where_(keep, &s, &*sc(-1e9)?)?;
    }
    let p = ops::softmax(&s, &[3], true)?;
    if *wrt == AttentionBwdWrt::Value {
        let dvf = ops::matmul(&*ops::transpose(&p, &[0, 1, 3, 2])?, &dy)?;
        let dvk = group_sum(&dvf, hk)?;
        return finish(cx, &dvk, layout);
    }
    let dp = ops::matmul(&dy, &*ops::transpose(&ve, &[0, 1, 3, 2])?)?;
    let row = ops::sum(&*ops::multiply(&p, &dp)?, &[3], true)?;
    let mut ds = ops::multiply(&p, &*ops::subtract(&dp, &row)?)?;
    if let Some(keep) = &keep {
        ds = ops::where_(keep, &ds, &*sc(0.0)?)?;
    }
    if let Some(t) = &tanh {
        let one = sc(1.0)?;
        ds = ops::multiply(&ds, &*ops::subtract(&one, &*ops::square(t)?)?)?;
    }
    let ds = ops::multiply(&ds, &*sc(scale)?)?;
    match wrt {
        AttentionBwdWrt::Query => {
            let dq = ops::matmul(&ds, &ke)?;
            finish(cx, &dq, layout)
        }
        _ => {
            let dkf = ops::matmul(&*ops::transpose(&ds, &[0, 1, 3, 2])?, &q)?;
            let dk = group_sum(&dkf, hk)?;
            finish(cx, &dk, layout)
        }
    }
}

/// Back to rlx's layout and the node's declared dims.
fn finish(cx: &Ctx, g: &Array, layout: Layout) -> LResult {
    let o = from_bhld(g, layout)?;
    let out = cx.out_dims();
    Ok(
        if o.shape() != out && o.size() as i64 == super::numel(&out) {
            ops::reshape(&o, &out)?
        } else {
            o
        },
    )
}
