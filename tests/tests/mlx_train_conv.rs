//! Conv2dBackwardInput, Conv2dBackwardWeight and MaxPool2dBackward on the
//! MLX plugin, every mode for f32, lazy + eager for f16 / bf16.
//!
//! References: the ops' definitions (rlx-ir 0.2.19 `src/op.rs`, geometry
//! as rlx-cpu 0.2.19 reads it) written here as plain loops in f64, each
//! checked by hand on a tiny case first. rlx-runtime's CPU backend (its
//! direct rlx-cpu kernels) runs the f32 cases as a second opinion and
//! agrees. MaxPool2dBackward's tie rule is rlx-cpu's
//! `maxpool2d_backward_nchw` (the first maximal tap in row-major window
//! order wins; out-of-bounds taps are skipped), exercised with integer
//! inputs so ties are frequent.
//!
//! Tolerances: f32 2e-5 abs + 2e-5 rel (sums of at most ~100 products of
//! values in [-1, 1), accumulated in f32 by MLX against f64 here); f16
//! 4e-3 abs + 2e-3 rel and bf16 3e-2 abs + 1e-2 rel (the result is rounded
//! once to the half dtype: half an ulp is 4.9e-4 / 3.9e-3 relative, on
//! values up to ~8). MaxPool2dBackward routes values without arithmetic
//! except sums of at most k·k routed dy values: same tolerances.

use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{
    assert_close, check_against_every_mode, check_against_modes, random_values, run_cpu, Feed, Tol,
};

const F32_TOL: Tol = Tol {
    abs: 2e-5,
    rel: 2e-5,
};
const F16_TOL: Tol = Tol {
    abs: 4e-3,
    rel: 2e-3,
};
const BF16_TOL: Tol = Tol {
    abs: 3e-2,
    rel: 1e-2,
};

fn half_tol(dt: DType) -> Tol {
    match dt {
        DType::F16 => F16_TOL,
        DType::BF16 => BF16_TOL,
        _ => F32_TOL,
    }
}

fn feed(name: &str, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

/// Forward conv geometry (H entry first, then W).
#[derive(Clone, Copy, Debug)]
struct Conv {
    n: usize,
    c_in: usize,
    c_out: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    groups: usize,
}

impl Conv {
    /// The forward conv's output extent (PyTorch/rlx rule).
    fn out(&self) -> [usize; 2] {
        let o = |len: usize, i: usize| {
            (len + 2 * self.p[i] - self.d[i] * (self.k[i] - 1) - 1) / self.s[i] + 1
        };
        [o(self.h, 0), o(self.w, 1)]
    }
    fn x_dims(&self) -> [usize; 4] {
        [self.n, self.c_in, self.h, self.w]
    }
    fn w_dims(&self) -> [usize; 4] {
        [self.c_out, self.c_in / self.groups, self.k[0], self.k[1]]
    }
    fn dy_dims(&self) -> [usize; 4] {
        let [ho, wo] = self.out();
        [self.n, self.c_out, ho, wo]
    }
    /// Visit every (x index, w index, dy index) triple of the forward conv
    /// `y[n,co,oh,ow] += x[n,ci,ih,iw] * w[co,cig,ki,kj]`, with
    /// `ih = oh*sh + ki*dh - ph` (taps outside x skipped).
    fn for_each(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [ho, wo] = self.out();
        let cin_g = self.c_in / self.groups;
        let cout_g = self.c_out / self.groups;
        for n in 0..self.n {
            for co in 0..self.c_out {
                let g = co / cout_g;
                for cig in 0..cin_g {
                    let ci = g * cin_g + cig;
                    for ki in 0..self.k[0] {
                        for kj in 0..self.k[1] {
                            for oh in 0..ho {
                                for ow in 0..wo {
                                    let ih = (oh * self.s[0] + ki * self.d[0]) as isize
                                        - self.p[0] as isize;
                                    let iw = (ow * self.s[1] + kj * self.d[1]) as isize
                                        - self.p[1] as isize;
                                    if ih < 0
                                        || iw < 0
                                        || ih >= self.h as isize
                                        || iw >= self.w as isize
                                    {
                                        continue;
                                    }
                                    let xi = ((n * self.c_in + ci) * self.h + ih as usize) * self.w
                                        + iw as usize;
                                    let wi = ((co * cin_g + cig) * self.k[0] + ki) * self.k[1] + kj;
                                    let yi = ((n * self.c_out + co) * ho + oh) * wo + ow;
                                    f(xi, wi, yi);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    /// dx[xi] = Σ dy[yi] w[wi].
    fn dx_ref(&self, dy: &[f32], w: &[f32]) -> Vec<f32> {
        let mut dx = vec![0f64; self.x_dims().iter().product()];
        self.for_each(|xi, wi, yi| dx[xi] += dy[yi] as f64 * w[wi] as f64);
        dx.iter().map(|v| *v as f32).collect()
    }
    /// dw[wi] = Σ x[xi] dy[yi].
    fn dw_ref(&self, x: &[f32], dy: &[f32]) -> Vec<f32> {
        let mut dw = vec![0f64; self.w_dims().iter().product()];
        self.for_each(|xi, wi, yi| dw[wi] += x[xi] as f64 * dy[yi] as f64);
        dw.iter().map(|v| *v as f32).collect()
    }
}

fn sh(d: &[usize], dt: DType) -> Shape {
    Shape::new(d, dt)
}

/// One backward node; `wrt_input` picks Conv2dBackwardInput `[dy, w]`,
/// else Conv2dBackwardWeight `[x, dy]`. `padding` as the op carries it.
fn conv_bwd_graph(c: &Conv, wrt_input: bool, padding: Vec<usize>, dt: DType) -> Graph {
    let mut g = Graph::new("conv_bwd");
    let fields = (c.k.to_vec(), c.s.to_vec(), padding, c.d.to_vec(), c.groups);
    let out = if wrt_input {
        let dy = g.input("dy", sh(&c.dy_dims(), dt));
        let w = g.input("w", sh(&c.w_dims(), dt));
        g.add_node(
            Op::Conv2dBackwardInput {
                kernel_size: fields.0,
                stride: fields.1,
                padding: fields.2,
                dilation: fields.3,
                groups: fields.4,
            },
            vec![dy, w],
            sh(&c.x_dims(), dt),
        )
    } else {
        let x = g.input("x", sh(&c.x_dims(), dt));
        let dy = g.input("dy", sh(&c.dy_dims(), dt));
        g.add_node(
            Op::Conv2dBackwardWeight {
                kernel_size: fields.0,
                stride: fields.1,
                padding: fields.2,
                dilation: fields.3,
                groups: fields.4,
            },
            vec![x, dy],
            sh(&c.w_dims(), dt),
        )
    };
    g.set_outputs(vec![out]);
    g
}

fn check_conv(what: &str, c: &Conv, padding: Vec<usize>, dt: DType, seed: u64) {
    let n = |d: [usize; 4]| d.iter().product::<usize>();
    let x = random_values(n(c.x_dims()), dt, -1.0, 1.0, seed);
    let w = random_values(n(c.w_dims()), dt, -1.0, 1.0, seed + 1);
    let dy = random_values(n(c.dy_dims()), dt, -1.0, 1.0, seed + 2);
    let tol = half_tol(dt);
    let modes: &[Mode] = if dt == DType::F32 {
        &[Mode::Lazy, Mode::Eager, Mode::Compiled]
    } else {
        &[Mode::Lazy, Mode::Eager]
    };
    let gi = conv_bwd_graph(c, true, padding.clone(), dt);
    let want = c.dx_ref(&dy, &w);
    let feeds = [feed("dy", dy.clone()), feed("w", w)];
    if dt == DType::F32 {
        // Second opinion: rlx-cpu's kernel (agrees on every case here).
        assert_close(
            &format!("{what} dx cpu"),
            &run_cpu(&gi, &feeds)[0],
            &want,
            tol,
        );
    }
    check_against_modes(
        &format!("Conv2dBackwardInput {what} {dt:?}"),
        &gi,
        &feeds,
        &[want],
        tol,
        modes,
    );
    let gw = conv_bwd_graph(c, false, padding, dt);
    let want = c.dw_ref(&x, &dy);
    let feeds = [feed("x", x), feed("dy", dy)];
    if dt == DType::F32 {
        assert_close(
            &format!("{what} dw cpu"),
            &run_cpu(&gw, &feeds)[0],
            &want,
            tol,
        );
    }
    check_against_modes(
        &format!("Conv2dBackwardWeight {what} {dt:?}"),
        &gw,
        &feeds,
        &[want],
        tol,
        modes,
    );
}

#[test]
fn conv_references_by_hand() {
    // 1x1x3x3 input, 2x2 kernel, stride 1, no padding: out 2x2.
    let c = Conv {
        n: 1,
        c_in: 1,
        c_out: 1,
        h: 3,
        w: 3,
        k: [2, 2],
        s: [1, 1],
        p: [0, 0],
        d: [1, 1],
        groups: 1,
    };
    assert_eq!(c.out(), [2, 2]);
    let w = [1.0, 2.0, 3.0, 4.0];
    // dy = e_(0,0): dx = w placed at the top-left corner.
    let dx = c.dx_ref(&[1.0, 0.0, 0.0, 0.0], &w);
    assert_eq!(dx, vec![1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0]);
    // dy = all ones: dx[center] = 1+2+3+4, corners one tap each.
    let dx = c.dx_ref(&[1.0; 4], &w);
    assert_eq!(dx, vec![1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 3.0, 7.0, 4.0]);
    // dw[ki,kj] = Σ x[oh+ki, ow+kj] dy[oh,ow]; with dy = e_(1,1): x[1+ki, 1+kj].
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let dw = c.dw_ref(&x, &[0.0, 0.0, 0.0, 1.0]);
    assert_eq!(dw, vec![5.0, 6.0, 8.0, 9.0]);
    // Stride 2, padding 1, 3x3 kernel on 3x3: out 2x2; dy = e_(1,1) reads
    // x at rows/cols 1..=3 (3 is outside): dw = x[1..3, 1..3] in the top-left.
    let c2 = Conv {
        k: [3, 3],
        s: [2, 2],
        p: [1, 1],
        ..c
    };
    assert_eq!(c2.out(), [2, 2]);
    let dw = c2.dw_ref(&x, &[0.0, 0.0, 0.0, 1.0]);
    assert_eq!(dw, vec![5.0, 6.0, 0.0, 8.0, 9.0, 0.0, 0.0, 0.0, 0.0]);
}

fn base_conv() -> Conv {
    Conv {
        n: 2,
        c_in: 4,
        c_out: 6,
        h: 7,
        w: 6,
        k: [3, 2],
        s: [2, 1],
        p: [1, 0],
        d: [1, 2],
        groups: 2,
    }
}

#[test]
fn conv_backward_strided_dilated_grouped() {
    let c = base_conv();
    assert_eq!(c.out(), [4, 4]);
    check_conv("stride/dilation/groups", &c, c.p.to_vec(), DType::F32, 10);
}

#[test]
fn conv_backward_plain() {
    let c = Conv {
        n: 2,
        c_in: 3,
        c_out: 5,
        h: 6,
        w: 5,
        k: [3, 3],
        s: [1, 1],
        p: [0, 0],
        d: [1, 1],
        groups: 1,
    };
    check_conv("plain", &c, vec![0, 0], DType::F32, 20);
}

#[test]
fn conv_backward_depthwise_padded() {
    // Depthwise (groups = C_in = C_out), stride 2, padding 2, dilation 2;
    // H = 8 with stride 2 leaves the last input row unread (zero dx).
    let c = Conv {
        n: 2,
        c_in: 3,
        c_out: 3,
        h: 8,
        w: 7,
        k: [3, 3],
        s: [2, 2],
        p: [2, 2],
        d: [2, 2],
        groups: 3,
    };
    check_conv("depthwise", &c, c.p.to_vec(), DType::F32, 30);
}

#[test]
fn conv_backward_padding_past_the_kernel() {
    // padding 2 > dilation·(k−1) = 1: the transposed conv's low padding is
    // negative (cropped). Channel multiplier 2 (groups 2, C_out = 4).
    let c = Conv {
        n: 1,
        c_in: 2,
        c_out: 4,
        h: 4,
        w: 5,
        k: [2, 2],
        s: [1, 1],
        p: [2, 2],
        d: [1, 1],
        groups: 2,
    };
    check_conv("big padding", &c, c.p.to_vec(), DType::F32, 40);
}

#[test]
fn conv_backward_defaults_and_onnx_padding() {
    // Empty stride/dilation lists read as 1, a 4-entry ONNX padding
    // [h_begin, w_begin, h_end, w_end] by its begins.
    let c = Conv {
        n: 1,
        c_in: 2,
        c_out: 3,
        h: 5,
        w: 5,
        k: [3, 3],
        s: [1, 1],
        p: [1, 1],
        d: [1, 1],
        groups: 1,
    };
    let n = |d: [usize; 4]| d.iter().product::<usize>();
    let dy = random_values(n(c.dy_dims()), DType::F32, -1.0, 1.0, 50);
    let w = random_values(n(c.w_dims()), DType::F32, -1.0, 1.0, 51);
    let x = random_values(n(c.x_dims()), DType::F32, -1.0, 1.0, 52);
    let mut g = Graph::new("defaults");
    let dyn_ = g.input("dy", sh(&c.dy_dims(), DType::F32));
    let wn = g.input("w", sh(&c.w_dims(), DType::F32));
    let xn = g.input("x", sh(&c.x_dims(), DType::F32));
    let dx = g.add_node(
        Op::Conv2dBackwardInput {
            kernel_size: vec![3, 3],
            stride: vec![],
            padding: vec![1, 1, 1, 1],
            dilation: vec![],
            groups: 1,
        },
        vec![dyn_, wn],
        sh(&c.x_dims(), DType::F32),
    );
    let dw = g.add_node(
        Op::Conv2dBackwardWeight {
            kernel_size: vec![3, 3],
            stride: vec![],
            padding: vec![1, 1, 1, 1],
            dilation: vec![],
            groups: 1,
        },
        vec![xn, dyn_],
        sh(&c.w_dims(), DType::F32),
    );
    g.set_outputs(vec![dx, dw]);
    let want = vec![c.dx_ref(&dy, &w), c.dw_ref(&x, &dy)];
    check_against_every_mode(
        "conv backward defaults",
        &g,
        &[feed("dy", dy), feed("w", w), feed("x", x)],
        &want,
        F32_TOL,
    );
}

#[test]
fn conv_backward_halves() {
    let c = base_conv();
    check_conv("f16", &c, c.p.to_vec(), DType::F16, 60);
    check_conv("bf16", &c, c.p.to_vec(), DType::BF16, 70);
}

#[test]
fn conv_backward_refuses_3d_kernels() {
    let mut g = Graph::new("bad");
    let dy = g.input("dy", sh(&[1, 1, 2, 2], DType::F32));
    let w = g.input("w", sh(&[1, 1, 2, 2], DType::F32));
    let dx = g.add_node(
        Op::Conv2dBackwardInput {
            kernel_size: vec![2, 2, 1],
            stride: vec![1, 1],
            padding: vec![0, 0],
            dilation: vec![1, 1],
            groups: 1,
        },
        vec![dy, w],
        sh(&[1, 1, 3, 3], DType::F32),
    );
    g.set_outputs(vec![dx]);
    let feeds = [feed("dy", vec![1.0; 4]), feed("w", vec![1.0; 4])];
    let Err(e) = rlx_plugin_tests::parity::run_mlx(&g, &feeds, Mode::Lazy) else {
        panic!("a 3-entry kernel is refused")
    };
    assert!(e.to_string().contains("kernel_size"), "{e}");
}

// ── MaxPool2dBackward ───────────────────────────────────────────────────

/// rlx-cpu's rule, in plain Rust: per window the first tap (row-major) with
/// a value greater than every earlier candidate wins; out-of-bounds taps
/// are skipped. Without padding the first tap is the starting candidate
/// (kept when NaN); with padding the candidate starts at -inf, and a window
/// of only -inf/NaN taps routes nothing.
#[allow(clippy::too_many_arguments)]
fn maxpool_bwd_ref(
    x: &[f32],
    dy: &[f32],
    (n, c, h, w): (usize, usize, usize, usize),
    (ho, wo): (usize, usize),
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
) -> Vec<f32> {
    let mut dx = vec![0f64; x.len()];
    for nc in 0..n * c {
        for oh in 0..ho {
            for ow in 0..wo {
                let mut best: Option<(f32, usize)> = None;
                for ki in 0..k[0] {
                    for kj in 0..k[1] {
                        let ih = (oh * s[0] + ki) as isize - p[0] as isize;
                        let iw = (ow * s[1] + kj) as isize - p[1] as isize;
                        if ih < 0 || iw < 0 || ih >= h as isize || iw >= w as isize {
                            continue;
                        }
                        let idx = (nc * h + ih as usize) * w + iw as usize;
                        let v = x[idx];
                        match best {
                            None if p == [0, 0] => best = Some((v, idx)),
                            None => {
                                if v > f32::NEG_INFINITY {
                                    best = Some((v, idx))
                                }
                            }
                            Some((bv, _)) => {
                                if v > bv {
                                    best = Some((v, idx))
                                }
                            }
                        }
                    }
                }
                if let Some((_, idx)) = best {
                    dx[idx] += dy[(nc * ho + oh) * wo + ow] as f64;
                }
            }
        }
    }
    dx.iter().map(|v| *v as f32).collect()
}

fn pool_graph(
    xd: [usize; 4],
    dyd: [usize; 4],
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    dt: DType,
) -> Graph {
    let mut g = Graph::new("maxpool_bwd");
    let x = g.input("x", sh(&xd, dt));
    let dy = g.input("dy", sh(&dyd, dt));
    let dx = g.add_node(
        Op::MaxPool2dBackward {
            kernel_size: k.to_vec(),
            stride: s.to_vec(),
            padding: p.to_vec(),
        },
        vec![x, dy],
        sh(&xd, dt),
    );
    g.set_outputs(vec![dx]);
    g
}

fn pool_out(len: usize, k: usize, s: usize, p: usize) -> usize {
    (len + 2 * p - k) / s + 1
}

/// x drawn from a few integers (many ties), dy random.
fn check_pool(what: &str, xd: [usize; 4], k: [usize; 2], s: [usize; 2], p: [usize; 2], dt: DType) {
    let (n, c, h, w) = (xd[0], xd[1], xd[2], xd[3]);
    let (ho, wo) = (pool_out(h, k[0], s[0], p[0]), pool_out(w, k[1], s[1], p[1]));
    let dyd = [n, c, ho, wo];
    let x: Vec<f32> = random_values(n * c * h * w, DType::F32, 0.0, 4.0, 7)
        .iter()
        .map(|v| v.floor() - 2.0)
        .collect();
    let dy = random_values(n * c * ho * wo, dt, -1.0, 1.0, 8);
    let want = maxpool_bwd_ref(&x, &dy, (n, c, h, w), (ho, wo), k, s, p);
    let g = pool_graph(xd, dyd, k, s, p, dt);
    let feeds = [feed("x", x), feed("dy", dy)];
    if dt == DType::F32 {
        // Second opinion: rlx-cpu's kernel (agrees exactly, ties included).
        assert_close(
            &format!("{what} cpu"),
            &run_cpu(&g, &feeds)[0],
            &want,
            Tol { abs: 0.0, rel: 0.0 },
        );
    }
    let modes: &[Mode] = if dt == DType::F32 {
        &[Mode::Lazy, Mode::Eager, Mode::Compiled]
    } else {
        &[Mode::Lazy, Mode::Eager]
    };
    check_against_modes(
        &format!("MaxPool2dBackward {what} {dt:?}"),
        &g,
        &feeds,
        &[want],
        half_tol(dt),
        modes,
    );
}

#[test]
fn maxpool_reference_by_hand() {
    // 1x1x2x3 input, 2x2 window, stride 1, no padding: 2 windows.
    // Window 0 = {1, 3, 3, 0} (tie between (0,1) and (1,0)): the first in
    // row-major order, (0,1), wins. Window 1 = {3, 2, 0, 3}: (0,1) again.
    let x = [1.0, 3.0, 2.0, 3.0, 0.0, 3.0];
    let dx = maxpool_bwd_ref(
        &x,
        &[10.0, 20.0],
        (1, 1, 2, 3),
        (1, 2),
        [2, 2],
        [1, 1],
        [0, 0],
    );
    assert_eq!(dx, vec![0.0, 30.0, 0.0, 0.0, 0.0, 0.0]);
    // Padding 1, 2x2 window, stride 2 on 1x1x2x2: windows see one or two
    // taps; all-(-inf) windows route nothing; a NaN never wins.
    let ninf = f32::NEG_INFINITY;
    let x = [ninf, f32::NAN, 5.0, ninf];
    let dx = maxpool_bwd_ref(
        &x,
        &[1.0, 2.0, 3.0, 4.0],
        (1, 1, 2, 2),
        (2, 2),
        [2, 2],
        [2, 2],
        [1, 1],
    );
    assert_eq!(dx, vec![0.0, 0.0, 3.0, 0.0]);
    // No padding: a NaN first tap keeps the gradient.
    let x = [f32::NAN, 9.0, 1.0, 2.0];
    let dx = maxpool_bwd_ref(&x, &[1.0], (1, 1, 2, 2), (1, 1), [2, 2], [1, 1], [0, 0]);
    assert_eq!(dx, vec![1.0, 0.0, 0.0, 0.0]);
}

#[test]
fn maxpool_backward_ties_and_overlap() {
    check_pool("2x2/2", [2, 3, 6, 8], [2, 2], [2, 2], [0, 0], DType::F32);
    check_pool(
        "3x3/1 overlap",
        [2, 2, 6, 5],
        [3, 3],
        [1, 1],
        [0, 0],
        DType::F32,
    );
    check_pool(
        "3x2/(2,1) pad 1",
        [1, 3, 7, 6],
        [3, 2],
        [2, 1],
        [1, 1],
        DType::F32,
    );
    check_pool(
        "3x3/2 pad (1,0)",
        [2, 2, 7, 7],
        [3, 3],
        [2, 2],
        [1, 0],
        DType::F32,
    );
}

#[test]
fn maxpool_backward_halves() {
    check_pool(
        "3x3/2 pad 1",
        [2, 2, 7, 6],
        [3, 3],
        [2, 2],
        [1, 1],
        DType::F16,
    );
    check_pool("2x2/1", [2, 2, 5, 6], [2, 2], [1, 1], [0, 0], DType::BF16);
}

#[test]
fn maxpool_backward_nan_and_neg_inf() {
    // The hand cases above, through the plugin.
    let ninf = f32::NEG_INFINITY;
    let g = pool_graph(
        [1, 1, 2, 2],
        [1, 1, 2, 2],
        [2, 2],
        [2, 2],
        [1, 1],
        DType::F32,
    );
    let x = vec![ninf, f32::NAN, 5.0, ninf];
    let dy = vec![1.0, 2.0, 3.0, 4.0];
    let want = maxpool_bwd_ref(&x, &dy, (1, 1, 2, 2), (2, 2), [2, 2], [2, 2], [1, 1]);
    assert_eq!(want, vec![0.0, 0.0, 3.0, 0.0]);
    check_against_every_mode(
        "MaxPool2dBackward -inf/NaN padded",
        &g,
        &[feed("x", x), feed("dy", dy)],
        &[want],
        F32_TOL,
    );
    let g = pool_graph(
        [1, 1, 2, 3],
        [1, 1, 1, 2],
        [2, 2],
        [1, 1],
        [0, 0],
        DType::F32,
    );
    let x = vec![f32::NAN, 9.0, 1.0, 2.0, ninf, 3.0];
    let dy = vec![1.0, 2.0];
    let want = maxpool_bwd_ref(&x, &dy, (1, 1, 2, 3), (1, 2), [2, 2], [1, 1], [0, 0]);
    // window 0 {NaN, 9, 2, -inf}: the NaN first tap keeps it; window 1
    // {9, 1, -inf, 3}: 9.
    assert_eq!(want, vec![1.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
    check_against_every_mode(
        "MaxPool2dBackward NaN first tap",
        &g,
        &[feed("x", x), feed("dy", dy)],
        &[want],
        F32_TOL,
    );
}

// ── AttentionBackward ───────────────────────────────────────────────────
//
// Reference: central finite differences in f64 (step 1e-6) of
// `L = Σ dy ⊙ Attention(q, k, v)`, the forward written here from its
// definition (rlx-ir 0.2.19 `Op::Attention`, in this order: scores
// `scale·q·kᵀ`, cap `c·tanh(s/c)`, then the mask — Bias added, a
// Causal/SlidingWindow/Custom-masked score replaced by -1e9 — softmax over
// keys, times V; GQA query head h reads KV head h / (H / H_kv)). The FD
// reference is checked by hand against the closed-form gradient of a
// one-query, two-key case (with and without a cap). rlx-cpu's
// AttentionBackward runs as a second opinion where it is defined (default
// scale, no cap, no GQA): it ignores the forward's score_scale and
// attn_logit_softcap (the op carries neither: the plugin reads them from
// the forward Attention node on the same inputs), and it has no GQA.
// Tolerance (f32): 3e-5 abs + 3e-5 rel against gradients of order 0.1-1;
// f16 5e-3 abs + 5e-3 rel, bf16 4e-2 abs + 4e-2 rel (inputs rounded to the
// half dtype on both sides; the plugin computes in f32 and rounds once).

const ATT_TOL: Tol = Tol {
    abs: 3e-5,
    rel: 3e-5,
};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Lay {
    Bhsd,
    Bshd,
    Packed3,
    Packed2,
}

#[derive(Clone, Copy, Debug)]
struct Att {
    lay: Lay,
    b: usize,
    h: usize,
    hk: usize,
    lq: usize,
    lk: usize,
    d: usize,
    mask: rlx_ir::op::MaskKind,
    /// The forward's score_scale / attn_logit_softcap (None: no forward
    /// node in the graph, or the field unset).
    scale: Option<f32>,
    cap: Option<f32>,
    /// Put the forward Attention node in the graph.
    fwd: bool,
}

impl Att {
    fn dims(&self, heads: usize, l: usize) -> Vec<usize> {
        match self.lay {
            Lay::Bhsd => vec![self.b, heads, l, self.d],
            Lay::Bshd => vec![self.b, l, heads, self.d],
            Lay::Packed3 => vec![self.b, l, heads * self.d],
            Lay::Packed2 => vec![l, heads * self.d],
        }
    }
    fn idx(&self, b: usize, h: usize, l: usize, e: usize, heads: usize, len: usize) -> usize {
        match self.lay {
            Lay::Bhsd => ((b * heads + h) * len + l) * self.d + e,
            _ => ((b * len + l) * heads + h) * self.d + e,
        }
    }
    fn mask_len(&self) -> usize {
        use rlx_ir::op::MaskKind;
        match self.mask {
            MaskKind::Custom => self.b * self.lk,
            MaskKind::Bias => self.b * self.h * self.lq * self.lk,
            _ => 0,
        }
    }
    /// The forward output (in Q's layout), f64.
    fn forward(&self, q: &[f64], k: &[f64], v: &[f64], m: &[f64]) -> Vec<f64> {
        use rlx_ir::op::MaskKind;
        let scale = self
            .scale
            .map_or(1.0 / (self.d as f64).sqrt(), |s| s as f64);
        let cap = self.cap.filter(|c| *c > 0.0).map(|c| c as f64);
        let q_off = self.lk.saturating_sub(self.lq);
        let mut o = vec![0f64; q.len()];
        for b in 0..self.b {
            for h in 0..self.h {
                let kh = h / (self.h / self.hk);
                for i in 0..self.lq {
                    let mut s = vec![0f64; self.lk];
                    for (j, sj) in s.iter_mut().enumerate() {
                        let mut acc = 0.0;
                        for e in 0..self.d {
                            acc += q[self.idx(b, h, i, e, self.h, self.lq)]
                                * k[self.idx(b, kh, j, e, self.hk, self.lk)];
                        }
                        let mut x = acc * scale;
                        if let Some(c) = cap {
                            x = c * (x / c).tanh();
                        }
                        let pos = q_off + i;
                        let masked = match self.mask {
                            MaskKind::None | MaskKind::Bias => false,
                            MaskKind::Causal => j > pos,
                            MaskKind::SlidingWindow(w) => j > pos || j < pos.saturating_sub(w),
                            MaskKind::Custom => m[b * self.lk + j] < 0.5,
                        };
                        if let MaskKind::Bias = self.mask {
                            x += m[((b * self.h + h) * self.lq + i) * self.lk + j];
                        }
                        *sj = if masked { -1e9 } else { x };
                    }
                    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let ex: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
                    let z: f64 = ex.iter().sum();
                    for e in 0..self.d {
                        let mut acc = 0.0;
                        for j in 0..self.lk {
                            acc += ex[j] / z * v[self.idx(b, kh, j, e, self.hk, self.lk)];
                        }
                        o[self.idx(b, h, i, e, self.h, self.lq)] = acc;
                    }
                }
            }
        }
        o
    }
    /// Central differences of Σ dy ⊙ forward, w.r.t. operand `which`
    /// (0 q, 1 k, 2 v).
    fn fd_grad(&self, ops: [&[f32]; 4], m: &[f32], which: usize) -> Vec<f32> {
        let f64s = |x: &[f32]| x.iter().map(|v| *v as f64).collect::<Vec<_>>();
        let mut args = [f64s(ops[0]), f64s(ops[1]), f64s(ops[2])];
        let dy = f64s(ops[3]);
        let m = f64s(m);
        let eps = 1e-6;
        let loss = |a: &[Vec<f64>; 3]| -> f64 {
            self.forward(&a[0], &a[1], &a[2], &m)
                .iter()
                .zip(&dy)
                .map(|(o, g)| o * g)
                .sum()
        };
        (0..args[which].len())
            .map(|i| {
                let x0 = args[which][i];
                args[which][i] = x0 + eps;
                let lp = loss(&args);
                args[which][i] = x0 - eps;
                let lm = loss(&args);
                args[which][i] = x0;
                ((lp - lm) / (2.0 * eps)) as f32
            })
            .collect()
    }
}

fn att_graph(c: &Att, dt: DType) -> Graph {
    use rlx_ir::op::{AttentionBwdWrt, MaskKind};
    // rlx reads a rank-4 Q with dims[1] == num_heads as [B, H, S, D].
    assert!(
        c.lay != Lay::Bshd || c.lq != c.h,
        "ambiguous [B, S, H, D] case"
    );
    let mut g = Graph::new("attn_bwd");
    let q = g.input("q", sh(&c.dims(c.h, c.lq), dt));
    let k = g.input("k", sh(&c.dims(c.hk, c.lk), dt));
    let v = g.input("v", sh(&c.dims(c.hk, c.lk), dt));
    let dy = g.input("dy", sh(&c.dims(c.h, c.lq), dt));
    let mask = match c.mask {
        MaskKind::Custom => Some(g.input("mask", sh(&[c.b, c.lk], dt))),
        MaskKind::Bias => Some(g.input("mask", sh(&[c.b, c.h, c.lq, c.lk], dt))),
        _ => None,
    };
    let mut outs = Vec::new();
    for (wrt, shape) in [
        (AttentionBwdWrt::Query, c.dims(c.h, c.lq)),
        (AttentionBwdWrt::Key, c.dims(c.hk, c.lk)),
        (AttentionBwdWrt::Value, c.dims(c.hk, c.lk)),
    ] {
        let mut ins = vec![q, k, v, dy];
        ins.extend(mask);
        outs.push(g.add_node(
            Op::AttentionBackward {
                num_heads: c.h,
                head_dim: c.d,
                mask_kind: c.mask,
                wrt,
            },
            ins,
            sh(&shape, dt),
        ));
    }
    if c.fwd {
        let mut ins = vec![q, k, v];
        ins.extend(mask);
        outs.push(g.add_node(
            Op::Attention {
                num_heads: c.h,
                head_dim: c.d,
                v_head_dim: None,
                mask_kind: c.mask,
                score_scale: c.scale,
                attn_logit_softcap: c.cap,
            },
            ins,
            sh(&c.dims(c.h, c.lq), dt),
        ));
    }
    g.set_outputs(outs);
    g
}

/// Feeds and FD references [dq, dk, dv (, forward)] for `c`.
fn att_case(c: &Att, dt: DType, seed: u64) -> (Vec<Feed>, Vec<Vec<f32>>) {
    use rlx_ir::op::MaskKind;
    let nq: usize = c.dims(c.h, c.lq).iter().product();
    let nk: usize = c.dims(c.hk, c.lk).iter().product();
    let q = random_values(nq, dt, -1.5, 1.5, seed);
    let k = random_values(nk, dt, -1.5, 1.5, seed + 1);
    let v = random_values(nk, dt, -1.0, 1.0, seed + 2);
    let dy = random_values(nq, dt, -1.0, 1.0, seed + 3);
    let m: Vec<f32> = match c.mask {
        // Keys masked at random (~1/3), every batch keeps its key 0.
        MaskKind::Custom => random_values(c.mask_len(), dt, 0.0, 1.0, seed + 4)
            .iter()
            .enumerate()
            .map(|(i, r)| if i % c.lk == 0 || *r > 0.33 { 1.0 } else { 0.0 })
            .collect(),
        MaskKind::Bias => random_values(c.mask_len(), dt, -1.0, 1.0, seed + 4),
        _ => vec![],
    };
    let ops = [&q[..], &k[..], &v[..], &dy[..]];
    let mut want: Vec<Vec<f32>> = (0..3).map(|w| c.fd_grad(ops, &m, w)).collect();
    if c.fwd {
        let f64s = |x: &[f32]| x.iter().map(|v| *v as f64).collect::<Vec<_>>();
        let o = c.forward(&f64s(&q), &f64s(&k), &f64s(&v), &f64s(&m));
        want.push(o.iter().map(|x| *x as f32).collect());
    }
    let mut feeds = vec![feed("q", q), feed("k", k), feed("v", v), feed("dy", dy)];
    if !m.is_empty() {
        feeds.push(feed("mask", m));
    }
    (feeds, want)
}

fn check_att(what: &str, c: &Att, seed: u64, cpu_too: bool) {
    let g = att_graph(c, DType::F32);
    let (feeds, want) = att_case(c, DType::F32, seed);
    for (i, w) in want.iter().enumerate() {
        assert!(
            w.iter().any(|v| v.abs() > 1e-3),
            "{what}: reference {i} is trivial"
        );
    }
    if cpu_too {
        let cpu = run_cpu(&g, &feeds);
        for (i, name) in ["dq", "dk", "dv"].iter().enumerate() {
            assert_close(&format!("{what} cpu {name}"), &cpu[i], &want[i], ATT_TOL);
        }
    }
    check_against_every_mode(
        &format!("AttentionBackward {what}"),
        &g,
        &feeds,
        &want,
        ATT_TOL,
    );
}

fn att(lay: Lay, mask: rlx_ir::op::MaskKind) -> Att {
    Att {
        lay,
        b: 2,
        h: 2,
        hk: 2,
        lq: 3,
        lk: 4,
        d: 4,
        mask,
        scale: None,
        cap: None,
        fwd: false,
    }
}

#[test]
fn attention_fd_reference_by_hand() {
    use rlx_ir::op::MaskKind;
    // One query, two keys, width 1, scale 1: O = p v1 + (1-p) v2 with
    // p = σ(s1 - s2), s_j = a k_j, so dO/da = p (1-p) (v1 - v2) (k1 - k2);
    // with a cap c, s_j = c tanh(a k_j / c) and ds_j/da = k_j sech²(a k_j / c).
    let (a, k1, k2, v1, v2) = (0.7f64, 1.3, -0.4, 0.9, -0.2);
    for cap in [None, Some(1.1f32)] {
        let c = Att {
            lay: Lay::Bhsd,
            b: 1,
            h: 1,
            hk: 1,
            lq: 1,
            lk: 2,
            d: 1,
            mask: MaskKind::None,
            scale: Some(1.0),
            cap,
            fwd: false,
        };
        let s = |kj: f64| cap.map_or(a * kj, |c| c as f64 * (a * kj / c as f64).tanh());
        let ds = |kj: f64| {
            cap.map_or(kj, |c| {
                let t = (a * kj / c as f64).tanh();
                kj * (1.0 - t * t)
            })
        };
        let p = 1.0 / (1.0 + (s(k2) - s(k1)).exp());
        let want = p * (1.0 - p) * (v1 - v2) * (ds(k1) - ds(k2));
        let f = |x: f64| x as f32;
        let g = c.fd_grad([&[f(a)], &[f(k1), f(k2)], &[f(v1), f(v2)], &[1.0]], &[], 0);
        assert!(
            (g[0] as f64 - want).abs() < 1e-6,
            "{cap:?}: fd {} vs {want}",
            g[0]
        );
        // dO/dv1 = p.
        let g = c.fd_grad([&[f(a)], &[f(k1), f(k2)], &[f(v1), f(v2)], &[1.0]], &[], 2);
        assert!((g[0] as f64 - p).abs() < 1e-6);
    }
}

#[test]
fn attention_backward_layouts_and_masks_vs_cpu() {
    use rlx_ir::op::MaskKind;
    let mut seed = 100;
    for lay in [Lay::Bhsd, Lay::Bshd, Lay::Packed3] {
        for mask in [
            MaskKind::None,
            MaskKind::Causal,
            MaskKind::SlidingWindow(1),
            MaskKind::Custom,
            MaskKind::Bias,
        ] {
            seed += 10;
            check_att(&format!("{lay:?} {mask:?}"), &att(lay, mask), seed, true);
        }
    }
    // [S, H*D]: batch 1.
    let c = Att {
        b: 1,
        ..att(Lay::Packed2, MaskKind::Causal)
    };
    check_att("Packed2 Causal", &c, 300, true);
}

#[test]
fn attention_backward_uneven_lengths() {
    use rlx_ir::op::MaskKind;
    // S_q < S_k: queries sit at the end of the keys; S_q > S_k: at 0.
    for (lq, lk, seed) in [(3, 6, 400), (5, 3, 410)] {
        for mask in [
            MaskKind::Causal,
            MaskKind::SlidingWindow(2),
            MaskKind::Custom,
        ] {
            let c = Att {
                lq,
                lk,
                ..att(Lay::Bshd, mask)
            };
            check_att(&format!("Lq {lq} Lk {lk} {mask:?}"), &c, seed, true);
        }
    }
}

#[test]
fn attention_backward_gqa() {
    use rlx_ir::op::MaskKind;
    // 4 query heads over 2 (GQA) and 1 (MQA) KV heads: rlx-cpu has no GQA,
    // so the FD reference alone.
    for (hk, lay, mask, seed) in [
        (2, Lay::Bshd, MaskKind::Causal, 500),
        (1, Lay::Bhsd, MaskKind::Bias, 510),
        (2, Lay::Packed3, MaskKind::Custom, 520),
    ] {
        let c = Att {
            h: 4,
            hk,
            lk: 5,
            ..att(lay, mask)
        };
        check_att(&format!("GQA {hk} {lay:?} {mask:?}"), &c, seed, false);
    }
}

#[test]
fn attention_backward_reads_the_forward_scale_and_cap() {
    use rlx_ir::op::MaskKind;
    // The forward Attention node (an output too, so its own lowering is
    // checked against the same f64 definition) carries score_scale and a
    // logit cap; rlx-cpu would ignore both, so the FD reference alone.
    let mut seed = 600;
    for (lay, mask) in [
        (Lay::Bhsd, MaskKind::None),
        (Lay::Bshd, MaskKind::Causal),
        (Lay::Bhsd, MaskKind::Bias),
        (Lay::Packed3, MaskKind::Custom),
        (Lay::Bshd, MaskKind::SlidingWindow(1)),
    ] {
        for (scale, cap) in [(Some(0.8), None), (None, Some(0.9)), (Some(1.2), Some(1.5))] {
            seed += 10;
            let c = Att {
                h: 4,
                hk: 2,
                scale,
                cap,
                fwd: true,
                ..att(lay, mask)
            };
            check_att(
                &format!("{lay:?} {mask:?} scale {scale:?} cap {cap:?}"),
                &c,
                seed,
                false,
            );
        }
    }
    // A forward without score_scale or cap: the backward uses the defaults,
    // exactly as with no forward node (rlx-cpu agrees).
    let c = Att {
        fwd: true,
        ..att(Lay::Bshd, MaskKind::Causal)
    };
    check_att("forward with defaults", &c, 700, true);
}

#[test]
fn attention_backward_fully_masked_batch() {
    use rlx_ir::op::MaskKind;
    // Batch 1's keys are all masked: its scores are all -1e9 (constants), so
    // its rows attend uniformly (dV = mean-spread of dy) and dQ = dK = 0
    // there; batch 0 keeps keys 0 and 2.
    let c = Att {
        fwd: true,
        cap: Some(2.0),
        ..att(Lay::Bshd, MaskKind::Custom)
    };
    let g = att_graph(&c, DType::F32);
    let (mut feeds, _) = att_case(&c, DType::F32, 800);
    let m = vec![1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    feeds[4].values = m.clone();
    let vals = |n: &str| feeds.iter().find(|f| f.name == n).unwrap().values.clone();
    let (q, k, v, dy) = (vals("q"), vals("k"), vals("v"), vals("dy"));
    let mut want: Vec<Vec<f32>> = (0..3)
        .map(|w| c.fd_grad([&q, &k, &v, &dy], &m, w))
        .collect();
    let f64s = |x: &[f32]| x.iter().map(|v| *v as f64).collect::<Vec<_>>();
    want.push(
        c.forward(&f64s(&q), &f64s(&k), &f64s(&v), &f64s(&m))
            .iter()
            .map(|x| *x as f32)
            .collect(),
    );
    let half = want[0].len() / 2;
    assert!(
        want[0][half..].iter().all(|x| x.abs() < 1e-6),
        "dq of batch 1 is 0"
    );
    assert!(
        want[2][half..].iter().any(|x| x.abs() > 1e-3),
        "dv of batch 1 flows"
    );
    check_against_every_mode("AttentionBackward fully masked", &g, &feeds, &want, ATT_TOL);
}

#[test]
fn attention_backward_halves() {
    use rlx_ir::op::MaskKind;
    for (dt, tol) in [
        (
            DType::F16,
            Tol {
                abs: 5e-3,
                rel: 5e-3,
            },
        ),
        (
            DType::BF16,
            Tol {
                abs: 4e-2,
                rel: 4e-2,
            },
        ),
    ] {
        let c = Att {
            h: 4,
            hk: 2,
            cap: Some(1.5),
            fwd: true,
            ..att(Lay::Bshd, MaskKind::Causal)
        };
        let g = att_graph(&c, dt);
        let (feeds, want) = att_case(&c, dt, 900);
        check_against_modes(
            &format!("AttentionBackward {dt:?}"),
            &g,
            &feeds,
            &want,
            tol,
            &[Mode::Lazy, Mode::Eager],
        );
    }
}

#[test]
fn attention_backward_refuses_disagreeing_forwards() {
    use rlx_ir::op::MaskKind;
    // Two forward Attention nodes on the same q, k, v with different
    // score_scale: which one the backward differentiates is undefined.
    let c = Att {
        fwd: true,
        scale: Some(0.5),
        ..att(Lay::Bhsd, MaskKind::None)
    };
    let mut g = att_graph(&c, DType::F32);
    let ins: Vec<_> = g.node(g.outputs[0]).inputs[..3].to_vec();
    let other = g.add_node(
        Op::Attention {
            num_heads: c.h,
            head_dim: c.d,
            v_head_dim: None,
            mask_kind: MaskKind::None,
            score_scale: Some(0.25),
            attn_logit_softcap: None,
        },
        ins,
        sh(&c.dims(c.h, c.lq), DType::F32),
    );
    let mut outs = g.outputs.clone();
    outs.push(other);
    g.set_outputs(outs);
    let (feeds, _) = att_case(&c, DType::F32, 1000);
    let Err(e) = rlx_plugin_tests::parity::run_mlx(&g, &feeds, Mode::Lazy) else {
        panic!("disagreeing forwards are refused")
    };
    assert!(e.to_string().contains("disagree"), "{e}");
}
