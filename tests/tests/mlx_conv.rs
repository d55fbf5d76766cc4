//! Parity of convolution, pooling and resizing (Conv, Conv3d,
//! ConvTranspose2d, ConvTranspose3d, Im2Col, Pool, ResizeNearest2x,
//! Interpolate3d) on the MLX plugin against rlx-runtime's CPU backend, in
//! every mode, f32 / f16 / bf16.
//!
//! Where the CPU reference computes nothing (a true 1-D `Conv` on `[N,C,L]`
//! with a 1-entry kernel_size, and 1-D `Pool` — rlx-cpu compiles both to a
//! no-op and returns zeros) the reference is an independent direct loop in
//! this file (`conv_ref`, `pool_ref`), itself first checked against the CPU
//! backend on the 2-D cases it does compute.
//!
//! Tolerances: data-movement ops (ResizeNearest2x, Interpolate3d, Im2Col,
//! max pooling) are exact (0). Sums of products are not: the CPU runs
//! im2col + BLAS and MLX its own kernels, so the summation order differs;
//! for f32 that reorders at most ~100 products of values in [-1, 1), and
//! the observed difference stays under 1e-6, so f32 uses the single-op
//! tolerance 1e-5 / 1e-5. For f16/bf16 both the plugin and rlx-cpu compute
//! in f32 and round the result once, so they may differ by one ulp where
//! the f32 sums straddle a rounding boundary: f16 rel 1e-3 (1 ulp = 2^-10),
//! bf16 rel 8e-3 (1 ulp = 2^-7), abs 1e-4 for results near zero.

use rlx_ir::op::ReduceOp;
use rlx_ir::{DType as IrDType, Graph, Op, Shape};
use rlx_plugin_api::{Mode, StatusCode};
use rlx_plugin_tests::parity::{
    check_against, check_parity, mlx, random_feeds, run_cpu, Feed, Tol,
};

const DTYPES: [IrDType; 3] = [IrDType::F32, IrDType::F16, IrDType::BF16];

fn s(d: &[usize], t: IrDType) -> Shape {
    Shape::new(d, t)
}

/// Exact comparison (data movement).
const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

/// Sums of products and averages (see the module comment).
fn conv_tol(d: IrDType) -> Tol {
    match d {
        IrDType::F16 => Tol {
            abs: 1e-4,
            rel: 1e-3,
        },
        IrDType::BF16 => Tol {
            abs: 1e-4,
            rel: 8e-3,
        },
        _ => Tol {
            abs: 1e-5,
            rel: 1e-5,
        },
    }
}

fn mean_tol(d: IrDType) -> Tol {
    conv_tol(d)
}

fn out_len(len: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (len + 2 * p - d * (k - 1) - 1) / s + 1
}

fn tr_len(len: usize, k: usize, s: usize, p: usize, d: usize, op: usize) -> usize {
    (len - 1) * s + d * (k - 1) + op + 1 - 2 * p
}

// ── independent references ──────────────────────────────────────────────

/// Direct channels-first convolution (cross-correlation) in f64:
/// `x [N, C_in, *sp]`, `w [C_out, C_in/g, *k]`, low padding `pad` (zeros
/// outside the input), output extents `out_sp`.
#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f32],
    xd: &[usize],
    w: &[f32],
    wd: &[usize],
    stride: &[usize],
    pad: &[usize],
    dil: &[usize],
    groups: usize,
    out_sp: &[usize],
) -> Vec<f32> {
    let nsp = xd.len() - 2;
    let (n, c_in, c_out) = (xd[0], xd[1], wd[0]);
    let (cin_g, cout_g) = (c_in / groups, c_out / groups);
    let sp = &xd[2..];
    let k = &wd[2..];
    let o_total: usize = out_sp.iter().product();
    let k_total: usize = k.iter().product();
    let sp_total: usize = sp.iter().product();
    let unflat = |mut i: usize, dims: &[usize]| -> Vec<usize> {
        let mut v = vec![0; dims.len()];
        for a in (0..dims.len()).rev() {
            v[a] = i % dims[a];
            i /= dims[a];
        }
        v
    };
    let mut out = vec![0f32; n * c_out * o_total];
    for b in 0..n {
        for oc in 0..c_out {
            let g = oc / cout_g;
            for oi in 0..o_total {
                let o = unflat(oi, out_sp);
                let mut acc = 0f64;
                for ic in 0..cin_g {
                    let ci = g * cin_g + ic;
                    for ki in 0..k_total {
                        let kk = unflat(ki, k);
                        let mut flat = 0usize;
                        let mut inside = true;
                        for a in 0..nsp {
                            let pos =
                                (o[a] * stride[a] + kk[a] * dil[a]) as isize - pad[a] as isize;
                            if pos < 0 || pos >= sp[a] as isize {
                                inside = false;
                                break;
                            }
                            flat = flat * sp[a] + pos as usize;
                        }
                        if inside {
                            let xv = x[(b * c_in + ci) * sp_total + flat] as f64;
                            let wv = w[(oc * cin_g + ic) * k_total + ki] as f64;
                            acc += xv * wv;
                        }
                    }
                }
                out[(b * c_out + oc) * o_total + oi] = acc as f32;
            }
        }
    }
    out
}

/// Direct pooling over `[N, C, *sp]`: Max skips out-of-bounds taps, Mean
/// divides by the in-bounds count (rlx-cpu's 2-D rule, applied to 1-D).
fn pool_ref(
    x: &[f32],
    xd: &[usize],
    kind: ReduceOp,
    k: &[usize],
    stride: &[usize],
    pad: &[usize],
    out_sp: &[usize],
) -> Vec<f32> {
    assert_eq!(xd.len(), 3, "1-D reference");
    let (nc, l) = (xd[0] * xd[1], xd[2]);
    let mut out = Vec::new();
    for p in 0..nc {
        for o in 0..out_sp[0] {
            let vals: Vec<f32> = (0..k[0])
                .filter_map(|t| {
                    let pos = (o * stride[0] + t) as isize - pad[0] as isize;
                    (pos >= 0 && pos < l as isize).then(|| x[p * l + pos as usize])
                })
                .collect();
            out.push(match kind {
                ReduceOp::Max => vals.iter().cloned().fold(f32::NEG_INFINITY, f32::max),
                ReduceOp::Sum => vals.iter().sum(),
                _ => vals.iter().sum::<f32>() / (vals.len().max(1) as f32),
            });
        }
    }
    out
}

fn feed<'a>(f: &'a [Feed], name: &str) -> &'a [f32] {
    &f.iter().find(|f| f.name == name).unwrap().values
}

// ── Conv ────────────────────────────────────────────────────────────────

/// One Conv node with an explicit declared output.
#[allow(clippy::too_many_arguments)]
fn conv_graph(
    dt: IrDType,
    xd: &[usize],
    wd: &[usize],
    kernel: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
    od: &[usize],
) -> Graph {
    let mut g = Graph::new("conv");
    let x = g.input("x", s(xd, dt));
    let w = g.param("w", s(wd, dt));
    let y = g.add_node(
        Op::Conv {
            kernel_size: kernel,
            stride,
            padding,
            dilation,
            groups,
        },
        vec![x, w],
        s(od, dt),
    );
    g.set_outputs(vec![y]);
    g
}

/// 2-D NCHW convolutions: (x, w, kernel, stride, padding, dilation, groups).
#[allow(clippy::type_complexity)]
const CONV2D: &[(
    [usize; 4],
    [usize; 4],
    [usize; 2],
    [usize; 2],
    [usize; 2],
    [usize; 2],
    usize,
)] = &[
    // plain 3x3
    (
        [2, 3, 7, 5],
        [4, 3, 3, 3],
        [3, 3],
        [1, 1],
        [0, 0],
        [1, 1],
        1,
    ),
    // stride, padding, dilation per axis, groups 2, non-square kernel
    (
        [1, 4, 9, 11],
        [6, 2, 3, 2],
        [3, 2],
        [2, 1],
        [1, 2],
        [1, 2],
        2,
    ),
    // depthwise (groups == C_in), stride 2, padding 1
    (
        [2, 5, 8, 7],
        [5, 1, 3, 3],
        [3, 3],
        [2, 2],
        [1, 1],
        [1, 1],
        5,
    ),
    // depthwise with channel multiplier 2
    (
        [1, 3, 6, 6],
        [6, 1, 3, 3],
        [3, 3],
        [1, 1],
        [1, 1],
        [1, 1],
        3,
    ),
    // 1x1 (rlx-cpu's GEMM fast path)
    (
        [2, 5, 4, 3],
        [7, 5, 1, 1],
        [1, 1],
        [1, 1],
        [0, 0],
        [1, 1],
        1,
    ),
    // kernel = whole input, one output pixel; all sizes 1 otherwise
    (
        [1, 1, 5, 5],
        [1, 1, 5, 5],
        [5, 5],
        [1, 1],
        [0, 0],
        [1, 1],
        1,
    ),
    (
        [1, 1, 1, 1],
        [1, 1, 1, 1],
        [1, 1],
        [1, 1],
        [0, 0],
        [1, 1],
        1,
    ),
    // kernel bigger than the input, padding makes it fit
    (
        [1, 2, 3, 3],
        [3, 2, 5, 5],
        [5, 5],
        [1, 1],
        [2, 2],
        [1, 1],
        1,
    ),
    // stride larger than the kernel, prime sizes
    (
        [3, 2, 13, 11],
        [5, 2, 2, 3],
        [2, 3],
        [3, 4],
        [1, 0],
        [2, 1],
        1,
    ),
];

#[test]
fn conv2d_parity() {
    for dt in DTYPES {
        for (i, (xd, wd, k, st, p, d, gr)) in CONV2D.iter().enumerate() {
            let od = [
                xd[0],
                wd[0],
                out_len(xd[2], k[0], st[0], p[0], d[0]),
                out_len(xd[3], k[1], st[1], p[1], d[1]),
            ];
            let g = conv_graph(
                dt,
                xd,
                wd,
                k.to_vec(),
                st.to_vec(),
                p.to_vec(),
                d.to_vec(),
                *gr,
                &od,
            );
            check_parity(
                &format!("conv2d #{i} {dt:?}"),
                &g,
                100 + i as u64,
                conv_tol(dt),
            );
        }
    }
}

/// The builder path (`Graph::conv2d`) gives the same node.
#[test]
fn conv2d_builder_parity() {
    let mut g = Graph::new("conv2d");
    let x = g.input("x", s(&[2, 4, 6, 5], IrDType::F32));
    let w = g.param("w", s(&[8, 2, 3, 3], IrDType::F32));
    let y = g.conv2d(x, w, [3, 3], [2, 1], [1, 1], [1, 1], 2);
    g.set_outputs(vec![y]);
    check_parity("conv2d builder", &g, 7, conv_tol(IrDType::F32));
}

/// ONNX-style `[top, left, bottom, right]` padding: rlx-cpu pads the
/// begins and takes the ends from the declared output extent.
#[test]
fn conv2d_asymmetric_padding_parity() {
    for dt in DTYPES {
        // H: 6 + 1 + 2 - 3 + 1 = 7; W: 7 + 0 + 1 - 3 + 1 = 6
        let g = conv_graph(
            dt,
            &[2, 3, 6, 7],
            &[4, 3, 3, 3],
            vec![3, 3],
            vec![1, 1],
            vec![1, 0, 2, 1],
            vec![1, 1],
            1,
            &[2, 4, 7, 6],
        );
        check_parity(&format!("conv2d asym pad {dt:?}"), &g, 21, conv_tol(dt));
    }
}

/// `[N, C, L]` inputs under a 2-entry kernel: rlx-cpu reads them as
/// `[N, C, 1, L]`. With kernel `[1, k]` the length is the W axis; with
/// kernel `[k, 1]` on a unit H it relabels the length onto H and uses the
/// index-0 stride/padding/dilation (ONNX 1-D convs imported as NCHW).
#[test]
fn conv2d_on_lengths_parity() {
    for dt in DTYPES {
        // [N, C, L] with kernel [1, 3], stride [1, 2], padding [0, 1]
        let g = conv_graph(
            dt,
            &[2, 3, 13],
            &[4, 3, 1, 3],
            vec![1, 3],
            vec![1, 2],
            vec![0, 1],
            vec![1, 1],
            1,
            &[2, 4, 7],
        );
        check_parity(
            &format!("conv [N,C,L] kernel [1,k] {dt:?}"),
            &g,
            31,
            conv_tol(dt),
        );
        // [N, C, 1, L] with kernel [3, 1]: length 17, stride 2, pad 1, dil 2 -> 8
        let g = conv_graph(
            dt,
            &[2, 3, 1, 17],
            &[4, 3, 3, 1],
            vec![3, 1],
            vec![2, 1],
            vec![1, 0],
            vec![2, 1],
            1,
            &[2, 4, 1, 8],
        );
        check_parity(
            &format!("conv [N,C,1,L] kernel [k,1] {dt:?}"),
            &g,
            32,
            conv_tol(dt),
        );
        // the same relabel on a rank-3 input, depthwise
        let g = conv_graph(
            dt,
            &[1, 4, 10],
            &[4, 1, 5, 1],
            vec![5, 1],
            vec![1, 1],
            vec![2, 0],
            vec![1, 1],
            4,
            &[1, 4, 10],
        );
        check_parity(
            &format!("conv [N,C,L] kernel [k,1] dw {dt:?}"),
            &g,
            33,
            conv_tol(dt),
        );
    }
}

/// The independent reference agrees with rlx-cpu where rlx-cpu computes.
#[test]
fn conv_reference_matches_cpu_on_2d() {
    for (i, (xd, wd, k, st, p, d, gr)) in CONV2D.iter().enumerate() {
        let od = [
            xd[0],
            wd[0],
            out_len(xd[2], k[0], st[0], p[0], d[0]),
            out_len(xd[3], k[1], st[1], p[1], d[1]),
        ];
        let g = conv_graph(
            IrDType::F32,
            xd,
            wd,
            k.to_vec(),
            st.to_vec(),
            p.to_vec(),
            d.to_vec(),
            *gr,
            &od,
        );
        let f = random_feeds(&g, 100 + i as u64);
        let cpu = run_cpu(&g, &f);
        let mine = conv_ref(
            feed(&f, "x"),
            xd,
            feed(&f, "w"),
            wd,
            st,
            p,
            d,
            *gr,
            &od[2..],
        );
        rlx_plugin_tests::parity::assert_close(
            &format!("reference vs cpu #{i}"),
            &mine,
            &cpu[0],
            conv_tol(IrDType::F32),
        );
    }
}

/// True 1-D Conv (1-entry kernel_size on `[N, C, L]`). rlx-cpu compiles it
/// to a no-op (zeros), so the reference is `conv_ref`.
#[test]
fn conv1d_against_direct_reference() {
    // (x, w, k, stride, pad, dil, groups)
    #[allow(clippy::type_complexity)]
    let cases: &[([usize; 3], [usize; 3], usize, usize, usize, usize, usize)] = &[
        ([2, 3, 13], [4, 3, 3], 3, 1, 0, 1, 1),
        ([1, 4, 17], [6, 2, 5], 5, 2, 2, 1, 2),
        ([3, 5, 11], [5, 1, 3], 3, 1, 1, 2, 5),
        ([1, 1, 1], [1, 1, 1], 1, 1, 0, 1, 1),
        ([2, 2, 7], [3, 2, 7], 7, 3, 3, 1, 1),
    ];
    for dt in DTYPES {
        for (i, (xd, wd, k, st, p, d, gr)) in cases.iter().enumerate() {
            let od = [xd[0], wd[0], out_len(xd[2], *k, *st, *p, *d)];
            let g = conv_graph(
                dt,
                xd,
                wd,
                vec![*k],
                vec![*st],
                vec![*p],
                vec![*d],
                *gr,
                &od,
            );
            let f = random_feeds(&g, 40 + i as u64);
            let want = conv_ref(
                feed(&f, "x"),
                xd,
                feed(&f, "w"),
                wd,
                &[*st],
                &[*p],
                &[*d],
                *gr,
                &od[2..],
            );
            // The reference is exact (f64); the plugin rounds once to `dt`.
            check_against(
                &format!("conv1d #{i} {dt:?}"),
                &g,
                &f,
                &[want],
                conv_tol(dt),
            );
        }
    }
}

// ── Conv3d ──────────────────────────────────────────────────────────────

#[test]
fn conv3d_parity() {
    // (x, w, stride, padding, dilation, groups)
    #[allow(clippy::type_complexity)]
    let cases: &[(
        [usize; 5],
        [usize; 5],
        [usize; 3],
        [usize; 3],
        [usize; 3],
        usize,
    )] = &[
        (
            [1, 2, 5, 6, 4],
            [3, 2, 3, 2, 3],
            [1, 2, 1],
            [1, 0, 1],
            [1, 1, 2],
            1,
        ),
        (
            [2, 4, 3, 5, 5],
            [6, 2, 2, 3, 3],
            [2, 2, 2],
            [1, 1, 1],
            [1, 1, 1],
            2,
        ),
        (
            [1, 3, 4, 4, 4],
            [3, 1, 3, 3, 3],
            [1, 1, 1],
            [1, 1, 1],
            [1, 1, 1],
            3,
        ),
        (
            [1, 1, 1, 1, 1],
            [2, 1, 1, 1, 1],
            [1, 1, 1],
            [0, 0, 0],
            [1, 1, 1],
            1,
        ),
    ];
    for dt in DTYPES {
        for (i, (xd, wd, st, p, d, gr)) in cases.iter().enumerate() {
            let mut g = Graph::new("conv3d");
            let x = g.input("x", s(xd, dt));
            let w = g.param("w", s(wd, dt));
            let y = g.conv3d(x, w, *st, *p, *d, *gr);
            g.set_outputs(vec![y]);
            check_parity(
                &format!("conv3d #{i} {dt:?}"),
                &g,
                50 + i as u64,
                conv_tol(dt),
            );
        }
    }
}

// ── transposed convolutions ─────────────────────────────────────────────

/// `FusedConvBiasAct` (what rlx's fusion makes of conv + bias +
/// activation; rlx-opt claims it for the Mlx target): 2-D with and without
/// a residual and an activation, groups, stride and padding, and 3-D,
/// against its definition computed here in f64, every mode and dtype, the
/// conv tolerances.
#[test]
fn fused_conv_bias_act_parity() {
    use rlx_ir::op::Activation;
    let mut seed = 700;
    // (x dims, w dims, kernel, stride, padding, groups, activation, residual, out dims)
    type Case<'a> = (
        &'a [usize],
        &'a [usize],
        &'a [usize],
        usize,
        usize,
        usize,
        Option<Activation>,
        bool,
        &'a [usize],
    );
    let cases: [Case; 4] = [
        (
            &[2, 4, 6, 6],
            &[6, 4, 3, 3],
            &[3, 3],
            1,
            1,
            1,
            Some(Activation::Relu),
            false,
            &[2, 6, 6, 6],
        ),
        (
            &[1, 4, 7, 5],
            &[4, 2, 3, 3],
            &[3, 3],
            2,
            1,
            2,
            Some(Activation::Silu),
            true,
            &[1, 4, 4, 3],
        ),
        (
            &[1, 3, 5, 5],
            &[2, 3, 1, 1],
            &[1, 1],
            1,
            0,
            1,
            None,
            false,
            &[1, 2, 5, 5],
        ),
        (
            &[1, 2, 4, 4, 4],
            &[3, 2, 3, 3, 3],
            &[3, 3, 3],
            1,
            1,
            1,
            Some(Activation::Gelu),
            true,
            &[1, 3, 4, 4, 4],
        ),
    ];
    for dt in DTYPES {
        for (xd, wd, k, st, pad, groups, act, residual, od) in cases {
            let mut g = Graph::new("fused_conv_bias_act");
            let x = g.input("x", s(xd, dt));
            let w = g.param("w", s(wd, dt));
            let b = g.param("b", s(&[od[1]], dt));
            let mut ins = vec![x, w, b];
            if residual {
                ins.push(g.input("r", s(od, dt)));
            }
            let n = k.len();
            let y = g.add_node(
                Op::FusedConvBiasAct {
                    kernel_size: k.to_vec(),
                    stride: vec![st; n],
                    padding: vec![pad; n],
                    dilation: vec![1; n],
                    groups,
                    activation: act,
                    has_residual: residual,
                },
                ins,
                s(od, dt),
            );
            g.set_outputs(vec![y]);
            seed += 1;
            let feeds = random_feeds(&g, seed);
            // The definition in f64: conv, + bias per channel (+ residual),
            // then the activation.
            let conv = conv_ref(
                feed(&feeds, "x"),
                xd,
                feed(&feeds, "w"),
                wd,
                &vec![st; n],
                &vec![pad; n],
                &vec![1; n],
                groups,
                &od[2..],
            );
            let per_c: usize = od[2..].iter().product();
            let bias = feed(&feeds, "b");
            let want: Vec<f32> = conv
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let mut v = c as f64 + bias[(i / per_c) % od[1]] as f64;
                    if residual {
                        v += feed(&feeds, "r")[i] as f64;
                    }
                    (match act {
                        Some(Activation::Relu) => v.max(0.0),
                        Some(Activation::Silu) => v / (1.0 + (-v).exp()),
                        Some(Activation::Gelu) => 0.5 * v * (1.0 + libm::erf(v / 2f64.sqrt())),
                        None => v,
                        Some(a) => unreachable!("{a:?}"),
                    }) as f32
                })
                .collect();
            let want = rlx_plugin_tests::parity::round_to(&want, dt);
            check_against(
                &format!("{xd:?} {k:?} {act:?} {dt:?}"),
                &g,
                &feeds,
                &[want],
                conv_tol(dt),
            );
        }
    }
}

#[test]
fn conv_transpose2d_parity() {
    // (x, w [C_in, C_out/g, kh, kw], stride, padding, dilation, output padding, groups)
    #[allow(clippy::type_complexity)]
    let cases: &[(
        [usize; 4],
        [usize; 4],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
    )] = &[
        (
            [1, 3, 5, 4],
            [3, 2, 3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
        ),
        (
            [2, 4, 3, 5],
            [4, 3, 2, 3],
            [1, 1],
            [0, 0],
            [1, 1],
            [0, 0],
            2,
        ),
        (
            [1, 3, 4, 4],
            [3, 1, 3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            [0, 0],
            3,
        ),
        (
            [2, 2, 3, 4],
            [2, 3, 3, 2],
            [2, 3],
            [0, 1],
            [2, 1],
            [1, 2],
            1,
        ),
        // padding larger than dilation*(k-1): the kernel is cropped
        (
            [1, 2, 5, 5],
            [2, 2, 2, 3],
            [3, 2],
            [2, 3],
            [1, 1],
            [1, 0],
            1,
        ),
        (
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            [1, 1],
            [0, 0],
            [1, 1],
            [0, 0],
            1,
        ),
    ];
    for dt in DTYPES {
        for (i, (xd, wd, st, p, d, op, gr)) in cases.iter().enumerate() {
            let mut g = Graph::new("convt2d");
            let x = g.input("x", s(xd, dt));
            let w = g.param("w", s(wd, dt));
            let y = g.conv_transpose2d(x, w, [wd[2], wd[3]], *st, *p, *d, *op, *gr);
            g.set_outputs(vec![y]);
            let od: Vec<usize> = g
                .shape(y)
                .dims()
                .iter()
                .map(|d| d.unwrap_static())
                .collect();
            assert_eq!(
                od[2..],
                [
                    tr_len(xd[2], wd[2], st[0], p[0], d[0], op[0]),
                    tr_len(xd[3], wd[3], st[1], p[1], d[1], op[1])
                ]
            );
            check_parity(
                &format!("convt2d #{i} {dt:?}"),
                &g,
                60 + i as u64,
                conv_tol(dt),
            );
        }
    }
}

/// `Graph::conv_transpose1d` lifts to a `[N, C, 1, L]` ConvTranspose2d
/// between Reshapes. f32 only: in f16 rlx-cpu answers this graph with
/// values of order 1e-6 where the f32 graph gives order 1 (its
/// half-precision layout ops around the node; mlx_shape.rs documents
/// them), so the CPU cannot judge it in half precision. The
/// ConvTranspose2d node itself is checked in every dtype above.
#[test]
fn conv_transpose1d_builder_parity() {
    let dt = IrDType::F32;
    let mut g = Graph::new("convt1d");
    let x = g.input("x", s(&[2, 3, 7], dt));
    let w = g.param("w", s(&[3, 5, 4], dt));
    let y = g.conv_transpose1d(x, w, 4, 2, 1, 1, 1, 1);
    g.set_outputs(vec![y]);
    check_parity("convt1d f32", &g, 69, conv_tol(dt));
}

#[test]
fn conv_transpose3d_parity() {
    #[allow(clippy::type_complexity)]
    let cases: &[(
        [usize; 5],
        [usize; 5],
        [usize; 3],
        [usize; 3],
        [usize; 3],
        [usize; 3],
        usize,
    )] = &[
        (
            [1, 4, 3, 2, 3],
            [4, 3, 2, 3, 2],
            [2, 1, 2],
            [0, 1, 1],
            [1, 1, 1],
            [1, 0, 1],
            2,
        ),
        (
            [2, 2, 2, 3, 2],
            [2, 3, 3, 2, 2],
            [1, 2, 2],
            [1, 0, 0],
            [1, 2, 1],
            [0, 1, 0],
            1,
        ),
    ];
    for dt in DTYPES {
        for (i, (xd, wd, st, p, d, op, gr)) in cases.iter().enumerate() {
            let mut g = Graph::new("convt3d");
            let x = g.input("x", s(xd, dt));
            let w = g.param("w", s(wd, dt));
            let y = g.conv_transpose3d(x, w, *st, *p, *d, *op, *gr);
            g.set_outputs(vec![y]);
            check_parity(
                &format!("convt3d #{i} {dt:?}"),
                &g,
                70 + i as u64,
                conv_tol(dt),
            );
        }
    }
}

// ── Im2Col ──────────────────────────────────────────────────────────────

#[test]
fn im2col_parity() {
    // (x, kernel, stride, padding, dilation)
    #[allow(clippy::type_complexity)]
    let cases: &[([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 2])] = &[
        ([2, 3, 7, 6], [3, 2], [2, 1], [1, 1], [1, 2]),
        ([1, 1, 5, 5], [5, 5], [1, 1], [0, 0], [1, 1]),
        ([1, 2, 4, 5], [1, 1], [1, 1], [0, 0], [1, 1]),
        ([3, 2, 5, 4], [3, 1], [1, 2], [2, 0], [1, 1]),
        // a wide kernel (rlx-cpu's row-copy path)
        ([1, 2, 3, 23], [2, 17], [1, 3], [0, 1], [1, 1]),
    ];
    for dt in DTYPES {
        for (i, (xd, k, st, p, d)) in cases.iter().enumerate() {
            let mut g = Graph::new("im2col");
            let x = g.input("x", s(xd, dt));
            let y = g.im2col(x, *k, *st, *p, *d);
            g.set_outputs(vec![y]);
            check_parity(&format!("im2col #{i} {dt:?}"), &g, 80 + i as u64, EXACT);
        }
    }
}

// ── Pool ────────────────────────────────────────────────────────────────

fn pool_graph(
    dt: IrDType,
    xd: &[usize],
    kind: ReduceOp,
    k: &[usize],
    st: &[usize],
    p: &[usize],
    od: &[usize],
) -> Graph {
    let mut g = Graph::new("pool");
    let x = g.input("x", s(xd, dt));
    let y = g.add_node(
        Op::Pool {
            kind,
            kernel_size: k.to_vec(),
            stride: st.to_vec(),
            padding: p.to_vec(),
        },
        vec![x],
        s(od, dt),
    );
    g.set_outputs(vec![y]);
    g
}

fn pool_tol(kind: ReduceOp, dt: IrDType) -> Tol {
    match kind {
        ReduceOp::Max => EXACT,
        _ => mean_tol(dt),
    }
}

#[test]
fn pool2d_parity() {
    // (x, kernel, stride, padding, extra output rows/cols beyond the floor rule)
    #[allow(clippy::type_complexity)]
    let cases: &[([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 2])] = &[
        ([2, 3, 7, 9], [3, 3], [2, 2], [1, 1], [0, 0]),
        ([1, 2, 6, 5], [2, 3], [2, 1], [0, 1], [0, 0]),
        ([1, 4, 5, 5], [3, 3], [1, 1], [0, 0], [0, 0]),
        ([2, 1, 1, 1], [1, 1], [1, 1], [0, 0], [0, 0]),
        ([1, 3, 13, 11], [5, 4], [3, 3], [2, 1], [0, 0]),
        // ONNX ceil_mode: the last window overhangs the input
        ([1, 2, 7, 7], [2, 2], [2, 2], [0, 0], [1, 1]),
        ([1, 2, 10, 8], [3, 3], [3, 2], [1, 0], [1, 1]),
        // 1x1 windows with padding 1: the border windows hold only padding
        // (Max gives -inf, Mean and Sum 0)
        ([1, 2, 3, 3], [1, 1], [1, 1], [1, 1], [0, 0]),
    ];
    for dt in DTYPES {
        for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
            for (i, (xd, k, st, p, extra)) in cases.iter().enumerate() {
                let od = [
                    xd[0],
                    xd[1],
                    out_len(xd[2], k[0], st[0], p[0], 1) + extra[0],
                    out_len(xd[3], k[1], st[1], p[1], 1) + extra[1],
                ];
                let g = pool_graph(dt, xd, kind, k, st, p, &od);
                check_parity(
                    &format!("pool2d {kind:?} #{i} {dt:?}"),
                    &g,
                    90 + i as u64,
                    pool_tol(kind, dt),
                );
            }
        }
    }
}

/// ONNX-style `[top, left, bottom, right]` pool padding: rlx-cpu pads the
/// begins and takes the ends from the declared output extent.
#[test]
fn pool2d_asymmetric_padding_parity() {
    for dt in DTYPES {
        for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
            // H: (6 + 1 + 2 - 3) / 2 + 1 = 4; W: (7 + 0 + 1 - 3) / 2 + 1 = 3
            let g = pool_graph(
                dt,
                &[1, 2, 6, 7],
                kind,
                &[3, 3],
                &[2, 2],
                &[1, 0, 2, 1],
                &[1, 2, 4, 3],
            );
            check_parity(
                &format!("pool2d asym pad {kind:?} {dt:?}"),
                &g,
                99,
                pool_tol(kind, dt),
            );
        }
    }
}

/// The builders `max_pool2d` / `avg_pool2d`.
#[test]
fn pool2d_builder_parity() {
    let mut g = Graph::new("pools");
    let x = g.input("x", s(&[2, 3, 9, 8], IrDType::F32));
    let m = g.max_pool2d(x, [2, 2], [2, 2], [0, 0]);
    let a = g.avg_pool2d(x, [3, 3], [2, 2], [1, 1]);
    g.set_outputs(vec![m, a]);
    check_parity("pool builders", &g, 3, mean_tol(IrDType::F32));
}

/// 3-D pooling on NCDHW: Mean divides by the full kernel volume (rlx-cpu's
/// 3-D rule, count_include_pad), Max skips padding.
#[test]
fn pool3d_parity() {
    #[allow(clippy::type_complexity)]
    let cases: &[([usize; 5], [usize; 3], [usize; 3], [usize; 3])] = &[
        ([1, 2, 5, 4, 6], [2, 3, 2], [2, 1, 2], [1, 1, 0]),
        ([2, 3, 4, 4, 4], [2, 2, 2], [2, 2, 2], [0, 0, 0]),
        ([1, 1, 3, 5, 7], [3, 3, 3], [1, 2, 3], [1, 1, 1]),
    ];
    for dt in DTYPES {
        for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
            for (i, (xd, k, st, p)) in cases.iter().enumerate() {
                let od = [
                    xd[0],
                    xd[1],
                    out_len(xd[2], k[0], st[0], p[0], 1),
                    out_len(xd[3], k[1], st[1], p[1], 1),
                    out_len(xd[4], k[2], st[2], p[2], 1),
                ];
                let g = pool_graph(dt, xd, kind, k, st, p, &od);
                check_parity(
                    &format!("pool3d {kind:?} #{i} {dt:?}"),
                    &g,
                    110 + i as u64,
                    pool_tol(kind, dt),
                );
            }
        }
    }
}

/// 1-D Pool on `[N, C, L]`: rlx-cpu computes nothing (zeros). The plugin
/// pools it as the `[N, C, 1, L]` 2-D pool it is; the reference is
/// `pool_ref` (checked against rlx-cpu's 2-D pool on `[N, C, 1, L]` here).
#[test]
fn pool1d_against_direct_reference() {
    let cases: &[([usize; 3], usize, usize, usize)] = &[
        ([2, 3, 11], 3, 2, 1),
        ([1, 2, 7], 2, 2, 0),
        ([1, 1, 1], 1, 1, 0),
        ([3, 2, 16], 4, 3, 2),
    ];
    for dt in DTYPES {
        for kind in [ReduceOp::Max, ReduceOp::Mean, ReduceOp::Sum] {
            for (i, (xd, k, st, p)) in cases.iter().enumerate() {
                let ol = out_len(xd[2], *k, *st, *p, 1);
                let g = pool_graph(dt, xd, kind, &[*k], &[*st], &[*p], &[xd[0], xd[1], ol]);
                let f = random_feeds(&g, 130 + i as u64);
                let want = pool_ref(feed(&f, "x"), xd, kind, &[*k], &[*st], &[*p], &[ol]);
                if dt == IrDType::F32 {
                    // the reference agrees with rlx-cpu's 2-D pool on [N, C, 1, L]
                    let g2 = pool_graph(
                        dt,
                        &[xd[0], xd[1], 1, xd[2]],
                        kind,
                        &[1, *k],
                        &[1, *st],
                        &[0, *p],
                        &[xd[0], xd[1], 1, ol],
                    );
                    let cpu = run_cpu(&g2, &f);
                    rlx_plugin_tests::parity::assert_close(
                        &format!("pool1d reference vs cpu 2-d {kind:?} #{i}"),
                        &want,
                        &cpu[0],
                        mean_tol(dt),
                    );
                }
                check_against(
                    &format!("pool1d {kind:?} #{i} {dt:?}"),
                    &g,
                    &f,
                    &[want],
                    pool_tol(kind, dt),
                );
            }
        }
    }
}

// ── resizing ────────────────────────────────────────────────────────────

#[test]
fn resize_nearest2x_parity() {
    for dt in DTYPES {
        for (i, xd) in [[2, 3, 4, 5], [1, 1, 1, 1], [1, 2, 3, 7], [3, 1, 2, 1]]
            .iter()
            .enumerate()
        {
            let mut g = Graph::new("resize");
            let x = g.input("x", s(xd, dt));
            let y = g.add_node(
                Op::ResizeNearest2x,
                vec![x],
                s(&[xd[0], xd[1], 2 * xd[2], 2 * xd[3]], dt),
            );
            g.set_outputs(vec![y]);
            check_parity(&format!("resize2x #{i} {dt:?}"), &g, 140 + i as u64, EXACT);
        }
    }
}

#[test]
fn interpolate3d_parity() {
    // (x, size): up, down, mixed, identity axes
    let cases: &[([usize; 5], [usize; 3])] = &[
        ([1, 2, 3, 4, 5], [5, 2, 7]),
        ([2, 1, 4, 4, 4], [8, 8, 8]),
        ([1, 3, 5, 3, 2], [5, 1, 3]),
        ([1, 1, 1, 1, 1], [2, 3, 1]),
    ];
    for dt in DTYPES {
        for (i, (xd, size)) in cases.iter().enumerate() {
            let mut g = Graph::new("interp3d");
            let x = g.input("x", s(xd, dt));
            let y = g.interpolate3d_nearest(x, *size);
            g.set_outputs(vec![y]);
            check_parity(
                &format!("interpolate3d #{i} {dt:?}"),
                &g,
                150 + i as u64,
                EXACT,
            );
        }
    }
}

// ── a small network ─────────────────────────────────────────────────────

/// conv -> pool -> resize -> conv-transpose chained, every mode.
#[test]
fn conv_pool_resize_chain_parity() {
    let dt = IrDType::F32;
    let mut g = Graph::new("chain");
    let x = g.input("x", s(&[2, 3, 10, 9], dt));
    let w1 = g.param("w1", s(&[4, 3, 3, 3], dt));
    let c = g.conv2d(x, w1, [3, 3], [1, 1], [1, 1], [1, 1], 1);
    let p = g.max_pool2d(c, [2, 2], [2, 2], [0, 0]);
    let r = g.add_node(Op::ResizeNearest2x, vec![p], s(&[2, 4, 10, 8], dt));
    let w2 = g.param("w2", s(&[4, 2, 2, 2], dt));
    let t = g.conv_transpose2d(r, w2, [2, 2], [2, 2], [0, 0], [1, 1], [0, 0], 2);
    g.set_outputs(vec![t]);
    // two chained sums of products (27 terms, then 4 on values up to ~5):
    // the first one's reordering noise (< 1e-6) is carried through the second
    check_parity(
        "conv/pool/resize/convt chain",
        &g,
        5,
        Tol {
            abs: 2e-5,
            rel: 1e-5,
        },
    );
}

// ── variants that are not lowered fail at compile, naming the node ──────

#[test]
fn unlowered_variants_fail_at_compile() {
    let p = mlx();
    // Pool Min: rlx-cpu would sum; not a min pool. Not lowered.
    let g = pool_graph(
        IrDType::F32,
        &[1, 2, 4, 4],
        ReduceOp::Min,
        &[2, 2],
        &[2, 2],
        &[0, 0],
        &[1, 2, 2, 2],
    );
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    for mode in rlx_plugin_tests::parity::modes_for(&g) {
        let e = p
            .compile(&text, mode)
            .err()
            .expect("Pool Min is not lowered");
        assert_eq!(e.code, StatusCode::Unsupported, "{e}");
        assert!(
            e.message.contains("node %1")
                && e.message.contains("Pool")
                && e.message.contains("not lowered"),
            "{e}"
        );
    }
    // Conv with a 3-entry kernel (3-D convs are Conv3d).
    let g = conv_graph(
        IrDType::F32,
        &[1, 2, 4, 4, 4],
        &[3, 2, 3, 3, 3],
        vec![3, 3, 3],
        vec![1, 1, 1],
        vec![0, 0, 0],
        vec![1, 1, 1],
        1,
        &[1, 3, 2, 2, 2],
    );
    let e = p
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("a 3-entry Conv kernel is not lowered");
    assert_eq!(e.code, StatusCode::Unsupported, "{e}");
    assert!(
        e.message.contains("node %2")
            && e.message.contains("Conv")
            && e.message.contains("not lowered"),
        "{e}"
    );
}
