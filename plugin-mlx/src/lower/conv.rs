//! Convolution, pooling and resizing.
//!
//! rlx is channels-first (NCHW / NCDHW, weights OIHW); MLX convolutions are
//! channels-last (input `(N, *spatial, C_in)`, weight
//! `(C_out, *kernel, C_in / groups)`), so the convolutions transpose in and
//! out around one `mx::conv_general`.
//!
//! Geometry follows rlx-cpu exactly: the low padding is the op's `padding`
//! (per spatial dim, the first entries; ONNX-style `[begins.., ends..]`
//! lists have their ends implied), and the output extent is the node's
//! declared shape — taps that fall outside the input read zeros (convs) or
//! are skipped (pools), as in the CPU kernels.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::ReduceOp;
use rlx_mlx_shim::{ops, Array, ArrayList, DType as MxDType};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Conv,
            FLOATS,
            Native,
            "mx::conv_general (NCHW<->NHWC transposes): 2-D on [N,C,H,W] or [N,C,L] \
             (rlx-cpu's [k,1]-kernel-on-unit-H rule kept), 1-D on [N,C,L]; stride, padding, \
             dilation, groups",
            conv
        ),
        row!(
            FusedConvBiasAct,
            FLOATS,
            Composite,
            "Conv (2-D) or Conv3d by the kernel's rank, + bias per channel (+ residual), then \
             the activation: rlx-fusion's unfusing, as one lowering",
            fused_conv_bias_act
        ),
        row!(
            Conv3d,
            FLOATS,
            Native,
            "mx::conv_general on NDHWC (transposes in/out); stride, padding, dilation, groups \
             (one conv per group: MLX groups only 1-D/2-D)",
            conv3d
        ),
        row!(
            ConvTranspose2d,
            FLOATS,
            Native,
            "mx::conv_general with input dilation = stride and the flipped, regrouped kernel; \
             padding, dilation, output padding (declared shape), groups",
            conv_transpose2d
        ),
        row!(
            ConvTranspose3d,
            FLOATS,
            Native,
            "mx::conv_general with input dilation = stride and the flipped, regrouped kernel; \
             groups one conv per group",
            conv_transpose3d
        ),
        row!(
            Im2Col,
            FLOATS,
            Composite,
            "pad + as_strided patches [N,Ho,Wo,C,kH,kW] + reshape to [N*Ho*Wo, C*kH*kW]",
            im2col
        ),
        row!(
            Pool,
            FLOATS,
            Composite,
            "pad + as_strided windows + max/sum; Max, Mean (2-D/1-D: / in-bounds count, \
             3-D: / kernel volume, as rlx-cpu), Sum; 1-D [N,C,L], 2-D NCHW, 3-D NCDHW",
            pool
        ),
        row!(
            ResizeNearest2x,
            FLOATS,
            Composite,
            "NCHW: expand + broadcast + reshape",
            resize_nearest2x
        ),
        row!(
            Interpolate3d,
            FLOATS,
            Composite,
            "nearest NCDHW resample: mx::take along D, H, W with src = min(dst*in/out, in-1)",
            interpolate3d
        ),
    ]
}

// ── helpers ─────────────────────────────────────────────────────────────

/// Entry `i` of an optional per-dim list, `default` when absent.
fn at(v: &[usize], i: usize, default: usize) -> LResult<i32> {
    v.get(i).copied().unwrap_or(default).i32()
}

/// Check a per-spatial-dim attribute list: `nsp` entries (fewer: the rest
/// take the default, as in rlx-cpu). `allow_pairs` also accepts ONNX-style
/// `[begins.., ends..]` (2·nsp entries) for padding, whose ends rlx-cpu
/// reads from the declared output extent.
/// `v` has at most one value per spatial axis (or, with `allow_pairs`, a
/// (begin, end) pair per axis), each at least `min` (1 for strides,
/// dilations and kernel sizes: a 0 would divide by zero).
fn check_len(what: &str, v: &[usize], nsp: usize, allow_pairs: bool, min: usize) -> LResult<()> {
    // At most i32::MAX: MLX takes them as `int` (`at` casts; a larger one
    // wrapped to 0 and divided by it).
    if let Some(bad) = v.iter().find(|x| **x < min || **x > i32::MAX as usize) {
        return Err(format!(
            "{what} {v:?} holds {bad}: each must be at least {min} and at most {}",
            i32::MAX
        )
        .into());
    }
    if v.len() <= nsp || (allow_pairs && v.len() == 2 * nsp) {
        Ok(())
    } else {
        Err(format!(
            "{what} of length {} for a {nsp}-d window is not lowered",
            v.len()
        )
        .into())
    }
}

/// Row-major strides of `dims`.
fn row_major(dims: &[i32]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as i64;
    }
    s
}

/// Float inputs of reduced precision are computed in f32 (the executable
/// rounds the result to the declared dtype once).
fn to_f32(x: &Array) -> LResult {
    Ok(ops::astype(x, MxDType::F32)?)
}

/// A channels-first convolution through `mx::conv_general`.
///
/// `x` is `[N, C_in, *sp]`, `w` is `[C_out, C_in / groups, *k]`. Per spatial
/// dim: `stride`, `kdil` (kernel dilation), `idil` (input dilation), `lo`
/// (low padding, may be negative only with stride 1), `flip` for a true
/// convolution. The output is `[N, C_out, *out_sp]`: the high padding is
/// whatever makes the output reach `out_sp` (positions past the input read
/// zeros), and any excess is cut off.
#[allow(clippy::too_many_arguments)]
fn conv_cf(
    x: &Array,
    w: &Array,
    stride: &[i32],
    kdil: &[i32],
    idil: &[i32],
    lo: &[i32],
    groups: i32,
    flip: bool,
    out_sp: &[i32],
) -> LResult {
    let nsp = stride.len();
    let xd = x.shape();
    let wd = w.shape();
    if xd.len() != nsp + 2 || wd.len() != nsp + 2 || out_sp.len() != nsp {
        return Err(format!(
            "convolution operands {xd:?} / {wd:?} do not fit a {nsp}-d convolution"
        )
        .into());
    }
    // channels-first -> channels-last
    let mut to_last: Vec<i32> = vec![0];
    to_last.extend((0..nsp.i32()?).map(|i| i + 2));
    to_last.push(1);
    let xt = ops::transpose(x, &to_last)?;
    let wt = ops::transpose(w, &to_last)?;

    let mut pad_lo = Vec::with_capacity(nsp);
    let mut pad_hi = Vec::with_capacity(nsp);
    let mut crop = Vec::with_capacity(nsp);
    for i in 0..nsp {
        // In i64: extents of in-range sizes, strides and dilations may not
        // be in range; what MLX is given is converted through `I32`.
        let in_ext = (xd[i + 2] as i64 - 1) * idil[i] as i64 + 1;
        let k_ext = (wd[i + 2] as i64 - 1) * kdil[i] as i64 + 1;
        let (l, c) = if lo[i] >= 0 {
            (lo[i] as i64, 0)
        } else {
            if stride[i] != 1 {
                return Err("negative padding with a stride is not lowered".into());
            }
            (0, -(lo[i] as i64))
        };
        // Padded extent needed for output position (crop + out - 1).
        let need = (c + out_sp[i] as i64 - 1) * stride[i] as i64 + k_ext;
        pad_lo.push(l.i32()?);
        pad_hi.push((need - in_ext - l).max(0).i32()?);
        crop.push(c.i32()?);
    }
    let y = if nsp <= 2 || groups == 1 {
        ops::conv_general(&xt, &wt, stride, &pad_lo, &pad_hi, kdil, idil, groups, flip)?
    } else {
        // MLX groups only 1-D/2-D convolutions: one conv per group, joined
        // along the (last) channel axis.
        let (cin_g, cout_g) = (xd[1] / groups, wd[0] / groups);
        let mut parts = Vec::with_capacity(groups as usize);
        for gi in 0..groups {
            let mut start = vec![0i32; nsp + 2];
            let mut stop = xt.shape();
            start[nsp + 1] = gi * cin_g;
            stop[nsp + 1] = (gi + 1) * cin_g;
            let xg = ops::slice(&xt, &start, &stop, &vec![1; nsp + 2])?;
            let mut start = vec![0i32; nsp + 2];
            let mut stop = wt.shape();
            start[0] = gi * cout_g;
            stop[0] = (gi + 1) * cout_g;
            let wg = ops::slice(&wt, &start, &stop, &vec![1; nsp + 2])?;
            parts.push(ops::conv_general(
                &xg, &wg, stride, &pad_lo, &pad_hi, kdil, idil, 1, flip,
            )?);
        }
        let list = ArrayList::from_arrays(parts.iter().map(|p| &**p));
        ops::concatenate(&list, nsp.i32()? + 1)?
    };
    let yd = y.shape();
    let mut y = y;
    if (0..nsp).any(|i| crop[i] != 0 || yd[i + 1] != out_sp[i]) {
        let mut start = vec![0i32; nsp + 2];
        let mut stop = yd.clone();
        for i in 0..nsp {
            let end = crop[i] as i64 + out_sp[i] as i64;
            if end > yd[i + 1] as i64 {
                return Err(format!(
                    "the convolution gives {} positions along spatial dim {i}, the node needs {}",
                    yd[i + 1] as i64 - crop[i] as i64,
                    out_sp[i]
                )
                .into());
            }
            start[i + 1] = crop[i];
            stop[i + 1] = end.i32()?;
        }
        y = ops::slice(&y, &start, &stop, &vec![1; nsp + 2])?;
    }
    // channels-last -> channels-first
    let mut to_first: Vec<i32> = vec![0, nsp.i32()? + 1];
    to_first.extend(1..=nsp.i32()?);
    Ok(ops::transpose(&y, &to_first)?)
}

fn check_groups(groups: usize, c_in: i32, c_out: i32) -> LResult<i32> {
    let g = groups.i32()?;
    if g <= 0 || c_in % g != 0 || c_out % g != 0 {
        return Err(format!(
            "groups={groups} does not divide C_in={c_in} and C_out={c_out}: not supported"
        )
        .into());
    }
    Ok(g)
}

/// Reshape a weight to `dims`, which must hold as many elements (rlx-cpu
/// reads weights as flat row-major buffers of that geometry).
fn weight_as(w: &Array, dims: &[i32]) -> LResult {
    let want: i64 = dims.iter().map(|d| *d as i64).product();
    if w.size() as i64 != want {
        return Err(format!("the weight {:?} does not hold a {dims:?} kernel", w.shape()).into());
    }
    Ok(ops::reshape(w, dims)?)
}

// ── convolutions ────────────────────────────────────────────────────────

fn conv(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "Conv")?;
    crate::op_fields!(
        cx,
        Conv {
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
        }
    );
    let geom = Geom {
        kernel_size,
        stride,
        padding,
        dilation,
        groups: *groups,
    };
    conv_nchw(cx, &geom, a[0], a[1])
}

/// A convolution's fields, as Conv, Conv3d and FusedConvBiasAct carry them.
struct Geom<'a> {
    kernel_size: &'a [usize],
    stride: &'a [usize],
    padding: &'a [usize],
    dilation: &'a [usize],
    groups: usize,
}

/// rlx's Conv of `x` by `w` (the node's declared input and output shapes).
fn conv_nchw(cx: &Ctx, geom: &Geom, x: &Array, w: &Array) -> LResult {
    let Geom {
        kernel_size,
        stride,
        padding,
        dilation,
        groups,
    } = *geom;
    let groups = &groups;
    let xd = cx.in_dims(0);
    let od = cx.out_dims();
    let nk = kernel_size.len();
    check_len("stride", stride, nk, false, 1)?;
    check_len("dilation", dilation, nk, false, 1)?;
    check_len("padding", padding, nk, true, 0)?;
    let (x, w) = (to_f32(x)?, to_f32(w)?);
    match (nk, xd.len(), od.len()) {
        // 1-D on [N, C, L]; weight [C_out, C_in/g, K].
        (1, 3, 3) => {
            let g = check_groups(*groups, xd[1], od[1])?;
            let w = weight_as(&w, &[od[1], xd[1] / g, kernel_size[0].i32()?])?;
            let y = conv_cf(
                &x,
                &w,
                &[at(stride, 0, 1)?],
                &[at(dilation, 0, 1)?],
                &[1],
                &[at(padding, 0, 0)?],
                g,
                false,
                &[od[2]],
            )?;
            Ok(y)
        }
        // 2-D on NCHW, or on [N, C, L] read as [N, C, 1, L] (rlx-cpu).
        (2, 3 | 4, 3 | 4) => {
            let (n, c_in, h, wi) = if xd.len() == 3 {
                (xd[0], xd[1], 1, xd[2])
            } else {
                (xd[0], xd[1], xd[2], xd[3])
            };
            let (c_out, h_out, w_out) = if od.len() == 3 {
                (od[1], 1, od[2])
            } else {
                (od[1], od[2], od[3])
            };
            let g = check_groups(*groups, c_in, c_out)?;
            let (kh, kw) = (kernel_size[0].i32()?, kernel_size[1].i32()?);
            let w = weight_as(&w, &[c_out, c_in / g, kh, kw])?;
            // rlx-cpu: a `[k, 1]` kernel (k > 1) over a unit-H input convolves
            // the length (W) with the index-0 stride/padding/dilation — ONNX
            // 1-D convs imported as NCHW. [N,C,1,L] and [N,C,L,1] share a
            // layout, so relabel the length onto H.
            let one_d_w = h == 1 && wi > 1 && kh > 1 && kw == 1;
            let (geom, out_sp, s, p, d) = if one_d_w {
                (
                    [n, c_in, wi, 1],
                    [w_out, 1],
                    [at(stride, 0, 1)?, 1],
                    [at(padding, 0, 0)?, 0],
                    [at(dilation, 0, 1)?, 1],
                )
            } else {
                (
                    [n, c_in, h, wi],
                    [h_out, w_out],
                    [at(stride, 0, 1)?, at(stride, 1, 1)?],
                    [at(padding, 0, 0)?, at(padding, 1, 0)?],
                    [at(dilation, 0, 1)?, at(dilation, 1, 1)?],
                )
            };
            let x = ops::reshape(&x, &geom)?;
            let y = conv_cf(&x, &w, &s, &d, &[1, 1], &p, g, false, &out_sp)?;
            Ok(ops::reshape(&y, &od)?)
        }
        _ => Err(format!(
            "Conv with a {nk}-entry kernel_size on a rank-{} input is not lowered \
             (rlx's Conv is 2-D NCHW or 1-D [N,C,L]; 3-D is Conv3d)",
            xd.len()
        )
        .into()),
    }
}

fn conv3d(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "Conv3d")?;
    crate::op_fields!(
        cx,
        Conv3d {
            stride,
            padding,
            dilation,
            groups,
        }
    );
    let geom = Geom {
        kernel_size: &[],
        stride,
        padding,
        dilation,
        groups: *groups,
    };
    conv_ncdhw(cx, &geom, a[0], a[1])
}

/// rlx's Conv3d of `x` by `w` (the kernel extent is the weight's).
fn conv_ncdhw(cx: &Ctx, geom: &Geom, x: &Array, w: &Array) -> LResult {
    let (xd, wd, od) = (cx.in_dims(0), cx.in_dims(1), cx.out_dims());
    if xd.len() != 5 || wd.len() != 5 || od.len() != 5 {
        return Err("Conv3d on operands other than NCDHW / 5-d weights is not lowered".into());
    }
    let three = |what: &str, v: &[usize], unit: usize| -> LResult<[i32; 3]> {
        match v.len() {
            0 => Ok([unit.i32()?; 3]),
            1 => Ok([v[0].i32()?; 3]),
            n if n >= 3 => Ok([v[0].i32()?, v[1].i32()?, v[2].i32()?]),
            n => Err(format!("Conv3d with a {n}-entry {what} is not lowered").into()),
        }
    };
    let g = check_groups(geom.groups, xd[1], od[1])?;
    let (x, w) = (to_f32(x)?, to_f32(w)?);
    conv_cf(
        &x,
        &w,
        &three("stride", geom.stride, 1)?,
        &three("dilation", geom.dilation, 1)?,
        &[1, 1, 1],
        &three("padding", geom.padding, 0)?,
        g,
        false,
        &od[2..],
    )
}

/// rlx's FusedConvBiasAct, as rlx-fusion's unfusing spells it:
/// `act(conv(x, w) + bias[c] (+ residual))`, the residual added before the
/// activation; 2-D (Conv's rules) or 3-D (Conv3d's) by the kernel's rank.
fn fused_conv_bias_act(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        FusedConvBiasAct {
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            activation,
            has_residual,
        }
    );
    arity(a, if *has_residual { 4 } else { 3 }, "FusedConvBiasAct")?;
    let geom = Geom {
        kernel_size,
        stride,
        padding,
        dilation,
        groups: *groups,
    };
    let y = if kernel_size.len() == 3 {
        conv_ncdhw(cx, &geom, a[0], a[1])?
    } else {
        conv_nchw(cx, &geom, a[0], a[1])?
    };
    let od = cx.out_dims();
    let mut bias_dims = vec![1; od.len()];
    bias_dims[1] = od[1];
    let bias = ops::reshape(&*to_f32(a[2])?, &bias_dims)?;
    let mut y = ops::add(&y, &bias)?;
    if *has_residual {
        y = ops::add(&y, &*to_f32(a[3])?)?;
    }
    match activation {
        Some(act) => super::elementwise::apply_activation(*act, &y),
        None => Ok(y),
    }
}

/// A transposed convolution (PyTorch semantics, weight
/// `[C_in, C_out/g, *k]`): `out[o] += x[i]·w[k]` where
/// `o = i·stride + k·dilation − padding`, for every `o` in the declared
/// output (output padding is folded into the declared extent, as rlx-cpu
/// reads it). Computed as a true convolution of the stride-dilated input
/// with the kernel regrouped to `[C_out, C_in/g, *k]`, low padding
/// `dilation·(k−1) − padding`.
// The arguments are ConvTranspose's own fields, one for one.
#[allow(clippy::too_many_arguments)]
fn transposed(
    x: &Array,
    w: &Array,
    k: &[i32],
    stride: &[i32],
    padding: &[i32],
    dilation: &[i32],
    groups: usize,
    c_out: i32,
    out_sp: &[i32],
) -> LResult {
    let nsp = k.len();
    let c_in = x.shape()[1];
    let g = check_groups(groups, c_in, c_out)?;
    let (cin_g, cout_g) = (c_in / g, c_out / g);
    // [C_in, C_out/g, *k] -> [g, C_in/g, C_out/g, *k] -> [g, C_out/g, C_in/g, *k]
    let mut dims = vec![g, cin_g, cout_g];
    dims.extend_from_slice(k);
    let w = weight_as(w, &dims)?;
    let mut perm = vec![0, 2, 1];
    perm.extend((0..nsp.i32()?).map(|i| i + 3));
    let w = ops::transpose(&w, &perm)?;
    let mut dims = vec![c_out, cin_g];
    dims.extend_from_slice(k);
    let w = ops::reshape(&w, &dims)?;
    let lo: Vec<i32> = (0..nsp)
        .map(|i| (dilation[i] as i64 * (k[i] as i64 - 1) - padding[i] as i64).i32())
        .collect::<LResult<_>>()?;
    conv_cf(x, &w, &vec![1; nsp], dilation, stride, &lo, g, true, out_sp)
}

fn conv_transpose2d(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "ConvTranspose2d")?;
    crate::op_fields!(
        cx,
        ConvTranspose2d {
            kernel_size,
            stride,
            padding,
            dilation,
            output_padding: _,
            groups,
        }
    );
    let (xd, od) = (cx.in_dims(0), cx.out_dims());
    if kernel_size.len() != 2 || !matches!(xd.len(), 3 | 4) || !matches!(od.len(), 3 | 4) {
        return Err(format!(
            "ConvTranspose2d with a {}-entry kernel_size on a rank-{} input is not lowered",
            kernel_size.len(),
            xd.len()
        )
        .into());
    }
    check_len("stride", stride, 2, false, 1)?;
    check_len("dilation", dilation, 2, false, 1)?;
    check_len("padding", padding, 2, true, 0)?;
    // rlx-cpu reads [N, C, L] as [N, C, 1, L].
    let geom = if xd.len() == 3 {
        [xd[0], xd[1], 1, xd[2]]
    } else {
        [xd[0], xd[1], xd[2], xd[3]]
    };
    let (c_out, out_sp) = if od.len() == 3 {
        (od[1], [1, od[2]])
    } else {
        (od[1], [od[2], od[3]])
    };
    let x = ops::reshape(&*to_f32(a[0])?, &geom)?;
    let wf = to_f32(a[1])?;
    let y = transposed(
        &x,
        &wf,
        &[kernel_size[0].i32()?, kernel_size[1].i32()?],
        &[at(stride, 0, 1)?, at(stride, 1, 1)?],
        &[at(padding, 0, 0)?, at(padding, 1, 0)?],
        &[at(dilation, 0, 1)?, at(dilation, 1, 1)?],
        *groups,
        c_out,
        &out_sp,
    )?;
    Ok(ops::reshape(&y, &od)?)
}

fn conv_transpose3d(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "ConvTranspose3d")?;
    crate::op_fields!(
        cx,
        ConvTranspose3d {
            stride,
            padding,
            dilation,
            output_padding: _,
            groups,
        }
    );
    let (xd, wd, od) = (cx.in_dims(0), cx.in_dims(1), cx.out_dims());
    if xd.len() != 5 || wd.len() != 5 || od.len() != 5 {
        return Err(
            "ConvTranspose3d on operands other than NCDHW / 5-d weights is not lowered".into(),
        );
    }
    let i32s =
        |v: &[usize; 3]| -> LResult<[i32; 3]> { Ok([v[0].i32()?, v[1].i32()?, v[2].i32()?]) };
    let (x, w) = (to_f32(a[0])?, to_f32(a[1])?);
    transposed(
        &x,
        &w,
        &wd[2..],
        &i32s(stride)?,
        &i32s(padding)?,
        &i32s(dilation)?,
        *groups,
        od[1],
        &od[2..],
    )
}

// ── im2col ──────────────────────────────────────────────────────────────

fn im2col(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Im2Col")?;
    crate::op_fields!(
        cx,
        Im2Col {
            kernel_size,
            stride,
            padding,
            dilation,
        }
    );
    let xd = cx.in_dims(0);
    if kernel_size.len() != 2 || xd.len() != 4 || cx.out_dims().len() != 2 {
        return Err(format!(
            "Im2Col with a {}-entry kernel_size on a rank-{} input is not lowered",
            kernel_size.len(),
            xd.len()
        )
        .into());
    }
    check_len("kernel_size", kernel_size, 2, false, 1)?;
    check_len("stride", stride, 2, false, 1)?;
    check_len("dilation", dilation, 2, false, 1)?;
    check_len("padding", padding, 2, false, 0)?;
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let k = [kernel_size[0].i32()?, kernel_size[1].i32()?];
    let s = [at(stride, 0, 1)?, at(stride, 1, 1)?];
    let p = [at(padding, 0, 0)?, at(padding, 1, 0)?];
    let d = [at(dilation, 0, 1)?, at(dilation, 1, 1)?];
    // rlx-cpu derives the patch grid from the geometry (conv output rule),
    // here in i64: spans and paddings of in-range values may not be.
    let span = |i: usize| d[i] as i64 * (k[i] as i64 - 1);
    let out = |len: i32, i: usize| -> LResult<i32> {
        ((len as i64 + 2 * p[i] as i64 - span(i) - 1).max(0) / s[i] as i64 + 1).i32()
    };
    let (ho, wo) = (out(h, 0)?, out(w, 1)?);
    // Zero-pad so every patch lies inside.
    let hi = |o: i32, len: i32, i: usize| -> LResult<i32> {
        ((o as i64 - 1) * s[i] as i64 + span(i) + 1 - len as i64 - p[i] as i64)
            .max(0)
            .i32()
    };
    let (hi_h, hi_w) = (hi(ho, h, 0)?, hi(wo, w, 1)?);
    let xp = ops::pad(a[0], &[2, 3], &[p[0], p[1]], &[hi_h, hi_w], 0.0)?;
    let xp = ops::contiguous(&xp)?;
    let pd = xp.shape();
    let st = row_major(&pd);
    // patches [N, Ho, Wo, C, kH, kW]
    let patches = ops::as_strided(
        &xp,
        &[n, ho, wo, c, k[0], k[1]],
        &[
            st[0],
            st[2] * s[0] as i64,
            st[3] * s[1] as i64,
            st[1],
            st[2] * d[0] as i64,
            st[3] * d[1] as i64,
        ],
        0,
    )?;
    let rows = (n as i64 * ho as i64 * wo as i64).i32()?;
    let cols = (c as i64 * k[0] as i64 * k[1] as i64).i32()?;
    Ok(ops::reshape(&patches, &[rows, cols])?)
}

// ── pooling ─────────────────────────────────────────────────────────────

fn pool(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Pool")?;
    crate::op_fields!(
        cx,
        Pool {
            kind,
            kernel_size,
            stride,
            padding,
        }
    );
    let xd = cx.in_dims(0);
    let od = cx.out_dims();
    let nsp = kernel_size.len();
    if !(1..=3).contains(&nsp) || xd.len() != nsp + 2 || od.len() != nsp + 2 {
        return Err(format!(
            "Pool with a {nsp}-entry kernel_size on a rank-{} input is not lowered",
            xd.len()
        )
        .into());
    }
    if !matches!(kind, ReduceOp::Max | ReduceOp::Mean | ReduceOp::Sum) {
        return Err(format!("Pool {kind:?} is not lowered").into());
    }
    check_len("stride", stride, nsp, false, 1)?;
    check_len("padding", padding, nsp, true, 0)?;
    let k: Vec<i32> = kernel_size
        .iter()
        .map(|v| v.i32())
        .collect::<LResult<_>>()?;
    let s: Vec<i32> = (0..nsp).map(|i| at(stride, i, 1)).collect::<LResult<_>>()?;
    let p: Vec<i32> = (0..nsp)
        .map(|i| at(padding, i, 0))
        .collect::<LResult<_>>()?;
    if s.contains(&0) || k.contains(&0) {
        return Err("Pool with a zero stride or kernel is not supported".into());
    }
    let sp = &xd[2..];
    let osp = &od[2..];
    if od[0] != xd[0] || od[1] != xd[1] {
        return Err("Pool must keep N and C".into());
    }
    let is_max = matches!(kind, ReduceOp::Max);
    // Max pads with -inf (rlx-cpu skips out-of-bounds taps), sums with 0.
    let x = if is_max {
        a[0].clone_handle()
    } else {
        to_f32(a[0])?
    };
    let hi: Vec<i32> = (0..nsp)
        .map(|i| {
            ((osp[i] as i64 - 1) * s[i] as i64 + k[i] as i64 - sp[i] as i64 - p[i] as i64)
                .max(0)
                .i32()
        })
        .collect::<LResult<_>>()?;
    let axes: Vec<i32> = (0..nsp.i32()?).map(|i| i + 2).collect();
    let fill = if is_max { f64::NEG_INFINITY } else { 0.0 };
    let xp = ops::pad(&x, &axes, &p, &hi, fill)?;
    let xp = ops::contiguous(&xp)?;
    let st = row_major(&xp.shape());
    let mut shape = vec![xd[0], xd[1]];
    shape.extend_from_slice(osp);
    shape.extend_from_slice(&k);
    let mut strides = vec![st[0], st[1]];
    strides.extend((0..nsp).map(|i| st[i + 2] * s[i] as i64));
    strides.extend((0..nsp).map(|i| st[i + 2]));
    let win = ops::as_strided(&xp, &shape, &strides, 0)?;
    let n = nsp.i32()?;
    let red: Vec<i32> = (0..n).map(|i| i + 2 + n).collect();
    if is_max {
        return Ok(ops::max(&win, &red, false)?);
    }
    let sum = ops::sum(&win, &red, false)?;
    if matches!(kind, ReduceOp::Sum) {
        return Ok(sum);
    }
    if nsp == 3 {
        // rlx-cpu's 3-D mean divides by the whole kernel volume.
        let vol: f64 = k.iter().map(|k| *k as f64).product();
        let vol = super::scalar(vol, MxDType::F32)?;
        return Ok(ops::divide(&sum, &vol)?);
    }
    // An empty output has nothing to divide; its window grid may still be
    // past what a table of counts could hold.
    if od.contains(&0) {
        return Ok(sum);
    }
    // 1-D / 2-D mean: divide by the number of in-bounds taps (rlx-cpu,
    // ONNX count_include_pad = 0), at least 1.
    let per_dim: Vec<Vec<f32>> = (0..nsp)
        .map(|i| {
            (0..osp[i])
                .map(|o| {
                    (0..k[i])
                        .filter(|t| {
                            let pos = o as i64 * s[i] as i64 + *t as i64 - p[i] as i64;
                            pos >= 0 && pos < sp[i] as i64
                        })
                        .count() as f32
                })
                .collect()
        })
        .collect();
    let total: usize = osp.iter().map(|v| *v as usize).product();
    let mut counts = Vec::with_capacity(total);
    let mut idx = vec![0usize; nsp];
    for _ in 0..total {
        let c: f32 = (0..nsp).map(|i| per_dim[i][idx[i]]).product();
        counts.push(c.max(1.0));
        for i in (0..nsp).rev() {
            idx[i] += 1;
            if idx[i] < osp[i] as usize {
                break;
            }
            idx[i] = 0;
        }
    }
    let counts = Array::from_slice(&counts, osp)?;
    Ok(ops::divide(&sum, &counts)?)
}

// ── resizing ────────────────────────────────────────────────────────────

fn resize_nearest2x(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "ResizeNearest2x")?;
    let xd = cx.in_dims(0);
    if xd.len() != 4 {
        return Err(format!(
            "ResizeNearest2x on a rank-{} input is not lowered",
            xd.len()
        )
        .into());
    }
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let e = ops::reshape(a[0], &[n, c, h, 1, w, 1])?;
    let b = ops::broadcast_to(&e, &[n, c, h, 2, w, 2])?;
    Ok(ops::reshape(
        &b,
        &[n, c, (2 * h as i64).i32()?, (2 * w as i64).i32()?],
    )?)
}

fn interpolate3d(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Interpolate3d")?;
    let xd = cx.in_dims(0);
    let od = cx.out_dims();
    if xd.len() != 5 || od.len() != 5 {
        return Err(format!("Interpolate3d on a rank-{} input is not lowered", xd.len()).into());
    }
    let mut y: A = a[0].clone_handle();
    for ax in 2..5usize {
        let (i, o) = (xd[ax] as i64, od[ax] as i64);
        if i == o {
            continue;
        }
        let idx: Vec<i32> = (0..o)
            .map(|j| ((j * i) / o).min(i - 1).i32())
            .collect::<LResult<_>>()?;
        let idx = Array::from_slice(&idx, &[o.i32()?])?;
        y = ops::take(&y, &idx, ax.i32()?)?;
    }
    Ok(y)
}
