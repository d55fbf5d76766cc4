//! Normalisation backward ops on the MLX plugin: LayerNormBackwardInput,
//! LayerNormBackwardGamma, GroupNormBackwardInput / Gamma / Beta and
//! AdaLayerNormBackward (both `AdaNormKind`s), every mode for f32, lazy +
//! eager for f16 / bf16.
//!
//! Reference: central finite differences, in f64, of the forward ops'
//! definitions written here (as `plugin-mlx/src/lower/norm.rs` and rlx-cpu
//! 0.2.19 compute them: biased variance, `eps` inside the square root, one
//! gamma/beta value per feature / channel, AdaLayerNorm `n(x)·(1 + scale) +
//! shift` with no affine). The gradient of `L = Σ dy · forward(..)` with
//! respect to each operand is what each backward op returns; step 1e-5 in
//! f64 (truncation and rounding error both below 1e-8 here). The harness
//! and forwards are checked against derivatives worked by hand on two-value
//! cases first (`references_match_hand_derivatives`).
//!
//! rlx-runtime's CPU backend runs the f32 cases it can as a second opinion
//! (asserted only where it is right): it agrees for LayerNorm and for
//! AdaLayerNorm; its GroupNorm backward kernels read rank 4 only (rank 3,
//! NCL, is judged by the finite-difference reference alone).
//!
//! Tolerances: f32 3e-5 abs + 3e-5 rel (MLX sums at most ~40 f32 terms of
//! order 1 against the f64 reference); f16 4e-3 abs + 2e-3 rel and bf16
//! 3e-2 abs + 1e-2 rel (the lowerings compute in f32 from the rounded
//! inputs, which the reference uses too, and round the result once: half an
//! ulp is 4.9e-4 / 3.9e-3 relative, on values up to ~10).

use rlx_ir::op::AdaNormKind;
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::{Mode, StatusCode};
use rlx_plugin_tests::parity::{
    assert_close, check_against, mlx, random_values, run_cpu, Feed, Tol,
};

const F32_TOL: Tol = Tol {
    abs: 3e-5,
    rel: 3e-5,
};
const F16_TOL: Tol = Tol {
    abs: 4e-3,
    rel: 2e-3,
};
const BF16_TOL: Tol = Tol {
    abs: 3e-2,
    rel: 1e-2,
};
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn tol(dt: DType) -> Tol {
    match dt {
        DType::F16 => F16_TOL,
        DType::BF16 => BF16_TOL,
        _ => F32_TOL,
    }
}

fn sh(d: &[usize], dt: DType) -> Shape {
    Shape::new(d, dt)
}

fn feed(name: &str, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| *x as f64).collect()
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|x| *x as f32).collect()
}

type Forward<'a> = &'a dyn Fn(&[Vec<f64>]) -> Vec<f64>;

/// Central finite differences (f64, step 1e-5) of `L = Σ dy · fwd(ops)`
/// with respect to operand `k`.
fn fd_grad(fwd: Forward, ops: &[Vec<f64>], k: usize, dy: &[f64]) -> Vec<f64> {
    const H: f64 = 1e-5;
    let loss = |o: &[Vec<f64>]| -> f64 { fwd(o).iter().zip(dy).map(|(y, d)| y * d).sum() };
    let mut o = ops.to_vec();
    (0..ops[k].len())
        .map(|i| {
            let v = ops[k][i];
            o[k][i] = v + H;
            let up = loss(&o);
            o[k][i] = v - H;
            let down = loss(&o);
            o[k][i] = v;
            (up - down) / (2.0 * H)
        })
        .collect()
}

/// LayerNorm over the last axis (length `h`): operands `[x, gamma, beta]`.
fn layer_norm_fwd(o: &[Vec<f64>], h: usize, eps: f64) -> Vec<f64> {
    let (x, g, b) = (&o[0], &o[1], &o[2]);
    let mut y = vec![0.0; x.len()];
    for (xr, yr) in x.chunks(h).zip(y.chunks_mut(h)) {
        let mean = xr.iter().sum::<f64>() / h as f64;
        let var = xr.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for d in 0..h {
            yr[d] = (xr[d] - mean) * inv * g[d] + b[d];
        }
    }
    y
}

/// GroupNorm on `[n, c, spatial]` (NCL or flattened NCHW): operands
/// `[x, gamma, beta]`, `groups` of `c / groups` consecutive channels.
fn group_norm_fwd(o: &[Vec<f64>], c: usize, sp: usize, groups: usize, eps: f64) -> Vec<f64> {
    let (x, g, b) = (&o[0], &o[1], &o[2]);
    let len = c / groups * sp;
    let mut y = vec![0.0; x.len()];
    // Each group is `len` consecutive values of x (channel-major within a sample).
    for (gi, (xr, yr)) in x.chunks(len).zip(y.chunks_mut(len)).enumerate() {
        let mean = xr.iter().sum::<f64>() / len as f64;
        let var = xr.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / len as f64;
        let inv = 1.0 / (var + eps).sqrt();
        let c0 = (gi % groups) * (c / groups);
        for (i, (xv, yv)) in xr.iter().zip(yr.iter_mut()).enumerate() {
            let ch = c0 + i / sp;
            *yv = (xv - mean) * inv * g[ch] + b[ch];
        }
    }
    y
}

/// The flat index into a modulation of dims `md` (right-aligned, size-1
/// dims broadcast) of the x element at flat index `i` of dims `xd`.
fn mod_index(i: usize, xd: &[usize], md: &[usize]) -> usize {
    let lead = xd.len() - md.len();
    let mut rem = i;
    let mut idx = vec![0; xd.len()];
    for a in (0..xd.len()).rev() {
        idx[a] = rem % xd[a];
        rem /= xd[a];
    }
    let mut j = 0;
    for (a, m) in md.iter().enumerate() {
        j = j * m + if *m == 1 { 0 } else { idx[lead + a] };
    }
    j
}

/// AdaLayerNorm: operands `[x, scale, shift]`, `n(x)·(1 + scale) + shift`.
fn ada_fwd(o: &[Vec<f64>], xd: &[usize], md: &[usize], norm: AdaNormKind, eps: f64) -> Vec<f64> {
    let (x, s, t) = (&o[0], &o[1], &o[2]);
    let h = *xd.last().unwrap();
    let mut y = vec![0.0; x.len()];
    for (r, (xr, yr)) in x.chunks(h).zip(y.chunks_mut(h)).enumerate() {
        let mean = match norm {
            AdaNormKind::LayerNorm => xr.iter().sum::<f64>() / h as f64,
            AdaNormKind::RmsNorm => 0.0,
        };
        let ms = xr.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        for d in 0..h {
            let m = mod_index(r * h + d, xd, md);
            yr[d] = (xr[d] - mean) * inv * (1.0 + s[m]) + t[m];
        }
    }
    y
}

fn assert_near(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() < 1e-8, "{what}[{i}]: {g} vs {w}");
    }
}

/// The finite-difference harness and the forwards, against derivatives
/// worked by hand on two-value cases (x = [-1, 1], eps = 1: mean 0,
/// var 1, inv = 1/√2, x̂ = ∓1/√2; dy = [1, 0]).
#[test]
fn references_match_hand_derivatives() {
    let r2 = std::f64::consts::SQRT_2;
    let dy = [1.0, 0.0];
    // LayerNorm, γ = 1, β = 0: y0 = u·(v + 1)^-½ with u = (x0 − x1)/2,
    // v = u²: ∂y0/∂x0 = ½·2^-½ + (−1)(−½)2^-3/2·(−1) = 0.25/√2 = −∂y0/∂x1;
    // dγ = dy·x̂ = [−1/√2, 0].
    let ln = |o: &[Vec<f64>]| layer_norm_fwd(o, 2, 1.0);
    let ops = [vec![-1.0, 1.0], vec![1.0, 1.0], vec![0.0, 0.0]];
    assert_near(
        "ln dx",
        &fd_grad(&ln, &ops, 0, &dy),
        &[0.25 / r2, -0.25 / r2],
    );
    assert_near("ln dgamma", &fd_grad(&ln, &ops, 1, &dy), &[-1.0 / r2, 0.0]);
    // GroupNorm, one group over C = 2, L = 1: the same numbers; dβ = dy.
    let gn = |o: &[Vec<f64>]| group_norm_fwd(o, 2, 1, 1, 1.0);
    assert_near(
        "gn dx",
        &fd_grad(&gn, &ops, 0, &dy),
        &[0.25 / r2, -0.25 / r2],
    );
    assert_near("gn dgamma", &fd_grad(&gn, &ops, 1, &dy), &[-1.0 / r2, 0.0]);
    assert_near("gn dbeta", &fd_grad(&gn, &ops, 2, &dy), &[1.0, 0.0]);
    // Two groups of one channel each over L = 2: each group normalises
    // its own channel's two values.
    let gn2 = |o: &[Vec<f64>]| group_norm_fwd(o, 2, 2, 2, 1.0);
    let ops2 = [vec![-1.0, 1.0, 5.0, 7.0], vec![1.0, 1.0], vec![0.0, 0.0]];
    let dy2 = [0.0, 0.0, 1.0, 0.0];
    assert_near(
        "gn2 dx",
        &fd_grad(&gn2, &ops2, 0, &dy2),
        &[0.0, 0.0, 0.25 / r2, -0.25 / r2],
    );
    // AdaLayerNorm (LayerNorm): scale = [1, 0] makes (1 + scale) = [2, 1]:
    // dx = 2·[0.25, −0.25]/√2, dscale = dy·x̂, dshift = dy.
    let ada = |o: &[Vec<f64>]| ada_fwd(o, &[2], &[2], AdaNormKind::LayerNorm, 1.0);
    let aops = [vec![-1.0, 1.0], vec![1.0, 0.0], vec![0.0, 0.0]];
    assert_near(
        "ada dx",
        &fd_grad(&ada, &aops, 0, &dy),
        &[0.5 / r2, -0.5 / r2],
    );
    assert_near(
        "ada dscale",
        &fd_grad(&ada, &aops, 1, &dy),
        &[-1.0 / r2, 0.0],
    );
    assert_near("ada dshift", &fd_grad(&ada, &aops, 2, &dy), &[1.0, 0.0]);
    // AdaLayerNorm (RmsNorm), x = [1, 1], scale 0, eps 1: y0 = x0·(m + 1)^-½,
    // m = (x0² + x1²)/2: ∂y0/∂x0 = 2^-½ − x0²/2·2^-3/2 = 0.75/√2,
    // ∂y0/∂x1 = −x0·x1/2·2^-3/2 = −0.25/√2.
    let rms = |o: &[Vec<f64>]| ada_fwd(o, &[2], &[2], AdaNormKind::RmsNorm, 1.0);
    let rops = [vec![1.0, 1.0], vec![0.0, 0.0], vec![0.0, 0.0]];
    assert_near(
        "rms dx",
        &fd_grad(&rms, &rops, 0, &dy),
        &[0.75 / r2, -0.25 / r2],
    );
    assert_near(
        "rms dscale",
        &fd_grad(&rms, &rops, 1, &dy),
        &[1.0 / r2, 0.0],
    );
    // Broadcast modulation: [1, 2] over x [2, 2] reads row 0 and row 1
    // alike.
    assert_eq!(mod_index(3, &[2, 2], &[1, 2]), 1);
    assert_eq!(mod_index(5, &[2, 3, 2], &[2, 1, 2]), 1);
    assert_eq!(mod_index(7, &[2, 3, 2], &[2, 1, 2]), 3);
}

fn rv(n: usize, dt: DType, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    random_values(n, dt, lo, hi, seed)
}

/// Compile on the plugin; the error it fails with.
fn compile_err(g: &Graph) -> rlx_plugin_api::PluginError {
    let text = rlx_ir::rlxmodel::to_text(g).unwrap();
    mlx()
        .compile(&text, Mode::Lazy)
        .err()
        .expect("compile should fail")
}

fn assert_refused(g: &Graph, words: &[&str]) {
    let e = compile_err(g);
    assert_eq!(e.code, StatusCode::Unsupported, "{e}");
    assert!(e.message.contains("not lowered"), "{e}");
    for w in words {
        assert!(e.message.contains(w), "{w:?} not in: {e}");
    }
}

// ── LayerNorm ───────────────────────────────────────────────────────────

fn layer_norm_graph(xd: &[usize], gd: &[usize], axis: i32, eps: f32, dt: DType) -> Graph {
    let mut g = Graph::new("ln_bwd");
    let x = g.input("x", sh(xd, dt));
    let gamma = g.param("gamma", sh(gd, dt));
    let dy = g.input("dy", sh(xd, dt));
    let dx = g.add_node(
        Op::LayerNormBackwardInput { axis, eps },
        vec![x, gamma, dy],
        sh(xd, dt),
    );
    let dg = g.add_node(
        Op::LayerNormBackwardGamma { axis, eps },
        vec![x, dy],
        sh(gd, dt),
    );
    g.set_outputs(vec![dx, dg]);
    g
}

#[test]
fn layer_norm_backward_matches_finite_differences() {
    let eps = 1e-5f32;
    // (x dims, gamma dims): rank 1, rank 3, gamma of shape [1, D].
    let cases: [(&[usize], &[usize]); 3] = [(&[8], &[8]), (&[3, 5, 8], &[8]), (&[6, 7], &[1, 7])];
    for (xd, gd) in cases {
        let nx: usize = xd.iter().product();
        let h = *xd.last().unwrap();
        for dt in DTYPES {
            let what = format!("LayerNorm backward x {xd:?} gamma {gd:?} {dt:?}");
            let g = layer_norm_graph(xd, gd, -1, eps, dt);
            let x = rv(nx, dt, -1.0, 1.0, 1);
            let gamma = rv(h, dt, 0.5, 1.5, 2);
            let dy = rv(nx, dt, -1.0, 1.0, 3);
            let ops = [f64s(&x), f64s(&gamma), vec![0.0; h]];
            let fwd = |o: &[Vec<f64>]| layer_norm_fwd(o, h, eps as f64);
            let want = [
                f32s(&fd_grad(&fwd, &ops, 0, &f64s(&dy))),
                f32s(&fd_grad(&fwd, &ops, 1, &f64s(&dy))),
            ];
            let feeds = vec![feed("x", x), feed("gamma", gamma), feed("dy", dy)];
            if dt == DType::F32 {
                // Second opinion: rlx-cpu's kernels agree for the last axis.
                let cpu = run_cpu(&g, &feeds);
                assert_close(&format!("{what} cpu dx"), &cpu[0], &want[0], F32_TOL);
                assert_close(&format!("{what} cpu dgamma"), &cpu[1], &want[1], F32_TOL);
            }
            check_against(&what, &g, &feeds, &want, tol(dt));
        }
    }
}

#[test]
fn layer_norm_backward_over_a_leading_axis_is_refused() {
    // rlx-cpu normalises the last axis whatever `axis` says; the forward
    // lowering refuses any other axis, and so do the backward ops.
    for (axis, op) in [(0, "LayerNormBackwardInput"), (0, "LayerNormBackwardGamma")] {
        let mut g = Graph::new("ln_bwd_axis");
        let x = g.input("x", sh(&[4, 8], DType::F32));
        let dy = g.input("dy", sh(&[4, 8], DType::F32));
        let out = if op == "LayerNormBackwardInput" {
            let gamma = g.param("gamma", sh(&[4], DType::F32));
            g.add_node(
                Op::LayerNormBackwardInput { axis, eps: 1e-5 },
                vec![x, gamma, dy],
                sh(&[4, 8], DType::F32),
            )
        } else {
            g.add_node(
                Op::LayerNormBackwardGamma { axis, eps: 1e-5 },
                vec![x, dy],
                sh(&[4], DType::F32),
            )
        };
        g.set_outputs(vec![out]);
        assert_refused(&g, &[op, "axis 0"]);
    }
}

// ── GroupNorm ───────────────────────────────────────────────────────────

fn group_norm_graph(xd: &[usize], groups: usize, eps: f32, dt: DType) -> Graph {
    let c = xd[1];
    let mut g = Graph::new("gn_bwd");
    let x = g.input("x", sh(xd, dt));
    let gamma = g.param("gamma", sh(&[c], dt));
    let beta = g.param("beta", sh(&[c], dt));
    let dy = g.input("dy", sh(xd, dt));
    let dx = g.add_node(
        Op::GroupNormBackwardInput {
            num_groups: groups,
            eps,
        },
        vec![x, gamma, beta, dy],
        sh(xd, dt),
    );
    let dg = g.add_node(
        Op::GroupNormBackwardGamma {
            num_groups: groups,
            eps,
        },
        vec![x, dy],
        sh(&[c], dt),
    );
    let db = g.add_node(
        Op::GroupNormBackwardBeta {
            num_groups: groups,
            eps,
        },
        vec![x, dy],
        sh(&[c], dt),
    );
    g.set_outputs(vec![dx, dg, db]);
    g
}

#[test]
fn group_norm_backward_matches_finite_differences() {
    let eps = 1e-5f32;
    // NCHW and NCL, several group counts (1, some, one per channel).
    let cases: [(&[usize], usize); 5] = [
        (&[2, 6, 3, 4], 3),
        (&[2, 4, 2, 3], 1),
        (&[1, 4, 3, 3], 4),
        (&[2, 6, 5], 2),
        (&[3, 4, 7], 4),
    ];
    for (xd, groups) in cases {
        let nx: usize = xd.iter().product();
        let c = xd[1];
        let sp: usize = xd[2..].iter().product();
        for dt in DTYPES {
            let what = format!("GroupNorm backward x {xd:?} G={groups} {dt:?}");
            let g = group_norm_graph(xd, groups, eps, dt);
            let x = rv(nx, dt, -1.0, 1.0, 11);
            let gamma = rv(c, dt, 0.5, 1.5, 12);
            let beta = rv(c, dt, -0.5, 0.5, 13);
            let dy = rv(nx, dt, -1.0, 1.0, 14);
            let ops = [f64s(&x), f64s(&gamma), f64s(&beta)];
            let fwd = |o: &[Vec<f64>]| group_norm_fwd(o, c, sp, groups, eps as f64);
            let dyd = f64s(&dy);
            let want: Vec<Vec<f32>> = (0..3)
                .map(|k| f32s(&fd_grad(&fwd, &ops, k, &dyd)))
                .collect();
            let feeds = vec![
                feed("x", x),
                feed("gamma", gamma),
                feed("beta", beta),
                feed("dy", dy),
            ];
            if dt == DType::F32 && xd.len() == 4 {
                // Second opinion: rlx-cpu's NCHW kernels (rank 4 only).
                let cpu = run_cpu(&g, &feeds);
                for (i, name) in ["dx", "dgamma", "dbeta"].iter().enumerate() {
                    assert_close(&format!("{what} cpu {name}"), &cpu[i], &want[i], F32_TOL);
                }
            }
            check_against(&what, &g, &feeds, &want, tol(dt));
        }
    }
}

#[test]
fn group_norm_backward_refusals() {
    // Groups that do not divide the channels (the forward is refused: rlx-cpu
    // leaves the remainder channels undefined), and ranks other than 3 / 4.
    let g = group_norm_graph(&[2, 6, 3, 4], 4, 1e-5, DType::F32);
    assert_refused(&g, &["GroupNormBackward", "4 groups", "6 channels"]);
    let g = group_norm_graph(&[2, 6, 3, 4], 0, 1e-5, DType::F32);
    assert_refused(&g, &["GroupNormBackward", "0 groups"]);
    let g = group_norm_graph(&[2, 6], 2, 1e-5, DType::F32);
    assert_refused(&g, &["GroupNormBackward", "rank-2"]);
    for op in ["gamma", "beta"] {
        let mut g = Graph::new("gn_bwd_one");
        let x = g.input("x", sh(&[2, 6, 4], DType::F32));
        let dy = g.input("dy", sh(&[2, 6, 4], DType::F32));
        let (num_groups, eps) = (4, 1e-5);
        let o = if op == "gamma" {
            Op::GroupNormBackwardGamma { num_groups, eps }
        } else {
            Op::GroupNormBackwardBeta { num_groups, eps }
        };
        let out = g.add_node(o, vec![x, dy], sh(&[6], DType::F32));
        g.set_outputs(vec![out]);
        assert_refused(&g, &["4 groups", "6 channels"]);
    }
}

// ── AdaLayerNorm ────────────────────────────────────────────────────────

fn ada_graph(xd: &[usize], md: &[usize], norm: AdaNormKind, eps: f32, dt: DType) -> Graph {
    let nx: usize = xd.iter().product();
    let ns: usize = md.iter().product();
    let mut g = Graph::new("ada_bwd");
    let x = g.input("x", sh(xd, dt));
    let scale = g.input("scale", sh(md, dt));
    let shift = g.input("shift", sh(md, dt));
    let dy = g.input("dy", sh(xd, dt));
    let out = g.add_node(
        Op::AdaLayerNormBackward { norm, eps },
        vec![x, scale, shift, dy],
        sh(&[nx + 2 * ns], dt),
    );
    g.set_outputs(vec![out]);
    g
}

#[test]
fn ada_layer_norm_backward_matches_finite_differences() {
    // (x dims, modulation dims): per-sample [B, 1, D], shared [D], full
    // [B, S, D], and rank 2 with [1, D].
    let cases: [(&[usize], &[usize]); 4] = [
        (&[2, 5, 8], &[2, 1, 8]),
        (&[2, 5, 8], &[8]),
        (&[2, 3, 6], &[2, 3, 6]),
        (&[4, 6], &[1, 6]),
    ];
    for norm in [AdaNormKind::LayerNorm, AdaNormKind::RmsNorm] {
        let eps = match norm {
            AdaNormKind::LayerNorm => 1e-6f32,
            AdaNormKind::RmsNorm => 1e-5f32,
        };
        for (xd, md) in cases {
            let nx: usize = xd.iter().product();
            let ns: usize = md.iter().product();
            for dt in DTYPES {
                let what = format!("AdaLayerNorm backward {norm:?} x {xd:?} mod {md:?} {dt:?}");
                let g = ada_graph(xd, md, norm, eps, dt);
                let x = rv(nx, dt, -1.0, 1.0, 21);
                let scale = rv(ns, dt, -0.5, 0.5, 22);
                let shift = rv(ns, dt, -0.5, 0.5, 23);
                let dy = rv(nx, dt, -1.0, 1.0, 24);
                let ops = [f64s(&x), f64s(&scale), f64s(&shift)];
                let fwd = |o: &[Vec<f64>]| ada_fwd(o, xd, md, norm, eps as f64);
                let dyd = f64s(&dy);
                let want: Vec<f32> = (0..3)
                    .flat_map(|k| f32s(&fd_grad(&fwd, &ops, k, &dyd)))
                    .collect();
                let feeds = vec![
                    feed("x", x),
                    feed("scale", scale),
                    feed("shift", shift),
                    feed("dy", dy),
                ];
                let want = [want];
                if dt == DType::F32 {
                    // Second opinion: rlx-cpu's packed kernel agrees.
                    let cpu = run_cpu(&g, &feeds);
                    assert_close(&format!("{what} cpu"), &cpu[0], &want[0], F32_TOL);
                }
                check_against(&what, &g, &feeds, &want, tol(dt));
            }
        }
    }
}

#[test]
fn ada_layer_norm_backward_refusals() {
    // A modulation that does not end in the feature dim, and scale / shift
    // of different shapes.
    let mut g = Graph::new("ada_bwd_bad");
    let x = g.input("x", sh(&[2, 5, 8], DType::F32));
    let scale = g.input("scale", sh(&[2, 5, 1], DType::F32));
    let shift = g.input("shift", sh(&[2, 5, 1], DType::F32));
    let dy = g.input("dy", sh(&[2, 5, 8], DType::F32));
    let out = g.add_node(
        Op::AdaLayerNormBackward {
            norm: AdaNormKind::LayerNorm,
            eps: 1e-6,
        },
        vec![x, scale, shift, dy],
        sh(&[80 + 20], DType::F32),
    );
    g.set_outputs(vec![out]);
    assert_refused(&g, &["AdaLayerNormBackward", "scale"]);

    let mut g = Graph::new("ada_bwd_mixed");
    let x = g.input("x", sh(&[2, 5, 8], DType::F32));
    let scale = g.input("scale", sh(&[2, 1, 8], DType::F32));
    let shift = g.input("shift", sh(&[8], DType::F32));
    let dy = g.input("dy", sh(&[2, 5, 8], DType::F32));
    let out = g.add_node(
        Op::AdaLayerNormBackward {
            norm: AdaNormKind::RmsNorm,
            eps: 1e-6,
        },
        vec![x, scale, shift, dy],
        sh(&[80 + 32], DType::F32),
    );
    g.set_outputs(vec![out]);
    let e = compile_err(&g);
    assert_eq!(e.code, StatusCode::Unsupported, "{e}");
    assert!(e.message.contains("differ in shape"), "{e}");
}
