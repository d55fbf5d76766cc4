//! Training ops of the activation / loss / fake-quantisation family on the
//! MLX plugin: ReluBackward, ActivationBackward (every kind),
//! SoftmaxCrossEntropy{,WithLogits,Backward}, FakeQuantize (per batch, EMA
//! with its state written back, Fixed), FakeQuantizeBackward (every STE) and
//! GatedResidualBackward.
//!
//! References: rlx-runtime's CPU backend where it is right (f32 in all three
//! modes, f16 / bf16 lazy + eager, `Tol::for_dtype`: 1e-5, 2e-3, 1.6e-2 abs
//! and rel; FakeQuantize in f32 and its hand cases to 1e-6, the quantiser
//! being exact; GatedResidualBackward at twice `Tol::for_dtype`, its dgate
//! summing up to 6 products); where it is not, an independent reference written here, checked
//! by hand on a tiny case in the same test:
//! - ActivationBackward of Erf / HardSwish / HardSigmoid / Mish / Softsign /
//!   LogSigmoid (rlx-cpu's kernel panics): central finite differences in f64
//!   of the forward definitions, 1e-5 abs + 1e-4 rel;
//! - softmax cross-entropy: a second opinion in plain f64, and labels ≥ C
//!   (an out-of-bounds index on rlx-cpu; no class selected here), 1e-5 abs
//!   and 1e-5 rel; rank-3 logits (not [N, C]: rlx-ir's verifier rejects them
//!   for the labelled forms, rlx-cpu skips them) must be refused;
//! - FakeQuantize EMA over two runs (the second starts from the written-back
//!   state): rlx-cpu's own f32 algorithm written out here (the quantiser is
//!   discontinuous, so the reference rounds as the op does), exact to 1e-6;
//! - FakeQuantizeBackward: with no forward (or a PerBatch one) its
//!   per-batch scale is what rlx-cpu computes too, so it is checked against
//!   rlx-cpu and, separately, against a plain f64 reference of the STE
//!   formulas (1e-5 abs + 1e-5 rel). After an EMA / Fixed forward on the
//!   same x the plugin uses that forward's scale (rlx-cpu does not: it
//!   recomputes the per-batch one), checked against the f64 reference
//!   with the forward's scale.

use rlx_ir::op::{Activation, ScaleMode, SteKind};
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::{HostTensor, Mode};
use rlx_plugin_tests::parity::{
    assert_close, check_against, check_against_every_mode, check_parity, mlx, random_values,
    run_cpu, Feed, Tol,
};

const HALVES: [DType; 2] = [DType::F16, DType::BF16];
const EXACT: Tol = Tol {
    abs: 1e-6,
    rel: 1e-6,
};
const F64_TOL: Tol = Tol {
    abs: 1e-5,
    rel: 1e-5,
};

fn sh(d: &[usize], dt: DType) -> Shape {
    Shape::new(d, dt)
}

fn feed(name: &str, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

/// `op(x, dy)` with both inputs of `dims`, plus `dy` when `plus_dy` (so a
/// zero gradient still gives a non-trivial output).
fn unary_bwd_graph(op: Op, dims: &[usize], dt: DType, plus_dy: bool) -> Graph {
    let mut g = Graph::new("bwd");
    let x = g.input("x", sh(dims, dt));
    let dy = g.input("dy", sh(dims, dt));
    let mut o = g.add_node(op, vec![x, dy], sh(dims, dt));
    if plus_dy {
        o = g.add_node(
            Op::Binary(rlx_ir::op::BinaryOp::Add),
            vec![o, dy],
            sh(dims, dt),
        );
    }
    g.set_outputs(vec![o]);
    g
}

#[test]
fn relu_backward_matches_cpu() {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let g = unary_bwd_graph(Op::ReluBackward, &[3, 5], dt, false);
        check_parity(&format!("ReluBackward {dt:?}"), &g, 11, Tol::for_dtype(dt));
    }
}

/// The kinds rlx-cpu's `activation_backward_kernel` computes.
const CPU_KINDS: [Activation; 21] = [
    Activation::Relu,
    Activation::Sigmoid,
    Activation::Tanh,
    Activation::Silu,
    Activation::Gelu,
    Activation::GeluApprox,
    Activation::Exp,
    Activation::Log,
    Activation::Sqrt,
    Activation::Rsqrt,
    Activation::Neg,
    Activation::Abs,
    Activation::Round,
    Activation::Sin,
    Activation::Cos,
    Activation::Tan,
    Activation::Atan,
    Activation::Recip,
    Activation::Floor,
    Activation::Ceil,
    Activation::Sign,
];

#[test]
fn activation_backward_matches_cpu_for_its_kinds() {
    for kind in CPU_KINDS
        .into_iter()
        .chain([Activation::Softplus, Activation::Elu])
    {
        // Floor / Ceil / Sign have a zero gradient: + dy keeps the
        // reference non-trivial.
        let zero = matches!(
            kind,
            Activation::Floor | Activation::Ceil | Activation::Sign
        );
        let g = unary_bwd_graph(Op::ActivationBackward { kind }, &[4, 6], DType::F32, zero);
        // x over [-2, 2): negative x for Log / Sqrt / Rsqrt (0 or NaN on
        // both sides), both branches of Relu / Elu / Abs.
        let feeds = vec![
            feed("x", random_values(24, DType::F32, -2.0, 2.0, 5)),
            feed("dy", random_values(24, DType::F32, -1.0, 1.0, 6)),
        ];
        let reference = run_cpu(&g, &feeds);
        check_against(
            &format!("ActivationBackward {kind:?}"),
            &g,
            &feeds,
            &reference,
            Tol::for_dtype(DType::F32),
        );
        for dt in HALVES {
            let g = unary_bwd_graph(Op::ActivationBackward { kind }, &[4, 6], dt, zero);
            // Positive x in halves: Log / Rsqrt / Recip near 0 amplify the
            // input rounding past a half's tolerance.
            let feeds = vec![
                feed("x", random_values(24, dt, 0.25, 2.0, 7)),
                feed("dy", random_values(24, dt, -1.0, 1.0, 8)),
            ];
            let reference = run_cpu(&g, &feeds);
            check_against(
                &format!("ActivationBackward {kind:?} {dt:?}"),
                &g,
                &feeds,
                &reference,
                Tol::for_dtype(dt),
            );
        }
    }
}

/// erf in f64 by its Maclaurin series (|x| ≤ 4 here; 80 terms suffice).
fn erf_series(x: f64) -> f64 {
    let mut term = x;
    let mut sum = x;
    for n in 1..120 {
        term *= -x * x / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * std::f64::consts::FRAC_2_SQRT_PI
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The forward definitions (rlx-ir `Activation` docs).
fn forward64(kind: Activation, x: f64) -> f64 {
    match kind {
        Activation::Erf => erf_series(x),
        Activation::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::HardSigmoid => (x / 6.0 + 0.5).clamp(0.0, 1.0),
        Activation::Mish => x * (1.0 + x.exp()).ln().tanh(),
        Activation::Softsign => x / (1.0 + x.abs()),
        Activation::LogSigmoid => sigmoid64(x).ln(),
        _ => unreachable!(),
    }
}

/// Central difference, h = 1e-5 (error ~1e-10 for these smooth pieces).
fn fd(kind: Activation, x: f64) -> f64 {
    let h = 1e-5;
    (forward64(kind, x + h) - forward64(kind, x - h)) / (2.0 * h)
}

#[test]
fn activation_backward_of_kinds_the_cpu_lacks_matches_finite_differences() {
    // Hand-checked values of the derivatives.
    let hand = [
        (Activation::Erf, 0.0, std::f64::consts::FRAC_2_SQRT_PI),
        (Activation::HardSwish, 0.0, 0.5),
        (Activation::HardSwish, 4.0, 1.0),
        (Activation::HardSigmoid, 1.0, 1.0 / 6.0),
        (Activation::HardSigmoid, -3.5, 0.0),
        (Activation::Mish, 0.0, (2f64).ln().tanh()),
        (Activation::Softsign, 1.0, 0.25),
        (Activation::LogSigmoid, 0.0, 0.5),
    ];
    for (k, x, want) in hand {
        assert!(
            (fd(k, x) - want).abs() < 1e-8,
            "{k:?}'({x}) = {} not {want}",
            fd(k, x)
        );
    }
    let tol = Tol {
        abs: 1e-5,
        rel: 1e-4,
    };
    for kind in [
        Activation::Erf,
        Activation::HardSwish,
        Activation::HardSigmoid,
        Activation::Mish,
        Activation::Softsign,
        Activation::LogSigmoid,
    ] {
        // x over [-4, 4), away from the kinks of HardSwish / HardSigmoid
        // (±3) and Softsign (0) where a central difference straddles them.
        let x: Vec<f32> = random_values(40, DType::F32, -4.0, 4.0, 21)
            .into_iter()
            .map(|v| {
                if (v.abs() - 3.0).abs() < 1e-3 || v.abs() < 1e-3 {
                    v + 0.01
                } else {
                    v
                }
            })
            .collect();
        let dy = random_values(40, DType::F32, -1.0, 1.0, 22);
        let want: Vec<f32> = x
            .iter()
            .zip(&dy)
            .map(|(&x, &d)| (fd(kind, x as f64) * d as f64) as f32)
            .collect();
        let g = unary_bwd_graph(Op::ActivationBackward { kind }, &[5, 8], DType::F32, false);
        let feeds = vec![feed("x", x.clone()), feed("dy", dy.clone())];
        check_against(
            &format!("ActivationBackward {kind:?}"),
            &g,
            &feeds,
            std::slice::from_ref(&want),
            tol,
        );
        // f16: inputs rounded to f16, the f64 reference on those values.
        let g = unary_bwd_graph(Op::ActivationBackward { kind }, &[5, 8], DType::F16, false);
        let (xh, dh) = (
            rlx_plugin_tests::parity::round_to(&x, DType::F16),
            rlx_plugin_tests::parity::round_to(&dy, DType::F16),
        );
        let want: Vec<f32> = xh
            .iter()
            .zip(&dh)
            .map(|(&x, &d)| (fd(kind, x as f64) * d as f64) as f32)
            .collect();
        check_against(
            &format!("ActivationBackward {kind:?} F16"),
            &g,
            &[feed("x", xh), feed("dy", dh)],
            &[want],
            Tol::for_dtype(DType::F16),
        );
    }
}

// ── Softmax cross-entropy ──────────────────────────────────────────────

fn lse64(row: &[f32]) -> f64 {
    let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
}

/// rlx-cpu's `label as usize`.
fn label_index(l: f32) -> usize {
    l as usize
}

fn sce_graph(op: Op, rows: &[usize], c: usize, dt: DType, dense: bool) -> Graph {
    let mut g = Graph::new("sce");
    let mut ld = rows.to_vec();
    ld.push(c);
    let l = g.input("logits", sh(&ld, dt));
    let t = if dense {
        g.input("targets", sh(&ld, dt))
    } else {
        g.input("labels", sh(rows, dt))
    };
    let mut ins = vec![l, t];
    let backward = matches!(op, Op::SoftmaxCrossEntropyBackward);
    if backward {
        ins.push(g.input("d_loss", sh(rows, dt)));
    }
    let out = if backward { ld } else { rows.to_vec() };
    let o = g.add_node(op, ins, sh(&out, dt));
    g.set_outputs(vec![o]);
    g
}

#[test]
fn softmax_cross_entropy_dense_matches_cpu_and_reference() {
    // Hand check: logits [0, 0], targets [1, 0] → ln 2.
    assert!((lse64(&[0.0, 0.0]) - 0.0 - std::f64::consts::LN_2).abs() < 1e-12);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let g = sce_graph(Op::SoftmaxCrossEntropy, &[4], 7, dt, true);
        check_parity(
            &format!("SoftmaxCrossEntropy {dt:?}"),
            &g,
            31,
            Tol::for_dtype(dt),
        );
    }
    // A second opinion: f64 on wider logits and non-normalised targets.
    let (rows, c) = ([6usize], 5usize);
    let g = sce_graph(Op::SoftmaxCrossEntropy, &rows, c, DType::F32, true);
    let l = random_values(30, DType::F32, -3.0, 3.0, 32);
    let t = random_values(30, DType::F32, 0.0, 1.0, 33);
    let want: Vec<f32> = l
        .chunks(c)
        .zip(t.chunks(c))
        .map(|(lr, tr)| {
            (lse64(lr)
                - lr.iter()
                    .zip(tr)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()) as f32
        })
        .collect();
    check_against(
        "SoftmaxCrossEntropy vs f64",
        &g,
        &[feed("logits", l), feed("targets", t)],
        &[want],
        F64_TOL,
    );
    refused(sce_graph(
        Op::SoftmaxCrossEntropy,
        &[2, 3],
        c,
        DType::F32,
        true,
    ));
}

/// Rank-3 logits (rlx-ir's verifier wants [N, C]; rlx-cpu skips them) are
/// refused, naming why.
fn refused(g: Graph) {
    let feeds = rlx_plugin_tests::parity::random_feeds(&g, 1);
    match rlx_plugin_tests::parity::run_mlx(&g, &feeds, Mode::Lazy) {
        Ok(_) => panic!("rank-3 logits were lowered"),
        Err(e) => assert!(e.to_string().contains("not lowered"), "{e}"),
    }
}

/// Labels for `n` rows of `c` classes: in range, fractional (truncated)
/// and negative (read as 0), as rlx-cpu reads them.
fn labels(n: usize, c: usize) -> Vec<f32> {
    (0..n)
        .map(|i| match i % 4 {
            0 => (i * 3 % c) as f32,
            1 => (c - 1) as f32 + 0.7,
            2 => -2.0,
            _ => 1.5,
        })
        .collect()
}

fn sce_labels_reference(l: &[f32], lab: &[f32], c: usize) -> Vec<f32> {
    l.chunks(c)
        .zip(lab)
        .map(|(r, &y)| {
            let k = label_index(y);
            let pick = if k < c { r[k] as f64 } else { 0.0 };
            (lse64(r) - pick) as f32
        })
        .collect()
}

fn sce_backward_reference(l: &[f32], lab: &[f32], dl: &[f32], c: usize) -> Vec<f32> {
    l.chunks(c)
        .zip(lab.iter().zip(dl))
        .flat_map(|(r, (&y, &d))| {
            let lse = lse64(r);
            let k = label_index(y);
            (0..c).map(move |j| {
                let p = (r[j] as f64 - lse).exp();
                ((p - if j == k { 1.0 } else { 0.0 }) * d as f64) as f32
            })
        })
        .collect()
}

#[test]
fn softmax_cross_entropy_with_labels_matches_cpu_and_reference() {
    // Hand check: logits [0, ln 3], label 1 → ln 4 − ln 3; label 2.7 → 2.
    let r = sce_labels_reference(&[0.0, 3f32.ln()], &[1.0], 2);
    assert!((r[0] as f64 - (4f64.ln() - 3f64.ln())).abs() < 1e-6);
    assert_eq!(label_index(2.7), 2);
    assert_eq!(label_index(-2.0), 0);
    let (n, c) = (8usize, 6usize);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let g = sce_graph(Op::SoftmaxCrossEntropyWithLogits, &[n], c, dt, false);
        let feeds = vec![
            feed("logits", random_values(n * c, dt, -3.0, 3.0, 41)),
            feed("labels", labels(n, c)),
        ];
        let reference = run_cpu(&g, &feeds);
        let mine = sce_labels_reference(&feeds[0].values, &feeds[1].values, c);
        assert_close(
            "SCE labels: CPU vs f64",
            &reference[0],
            &mine,
            Tol::for_dtype(dt),
        );
        check_against(
            &format!("SoftmaxCrossEntropyWithLogits {dt:?}"),
            &g,
            &feeds,
            &reference,
            Tol::for_dtype(dt),
        );
    }
    // A label ≥ C (no class selected; an out-of-bounds panic on rlx-cpu):
    // f64 reference.
    let rows = [6usize];
    let g = sce_graph(
        Op::SoftmaxCrossEntropyWithLogits,
        &rows,
        c,
        DType::F32,
        false,
    );
    let l = random_values(6 * c, DType::F32, -3.0, 3.0, 42);
    let mut lab = labels(6, c);
    lab[5] = c as f32 + 1.0;
    let want = sce_labels_reference(&l, &lab, c);
    check_against(
        "SoftmaxCrossEntropyWithLogits label >= C",
        &g,
        &[feed("logits", l), feed("labels", lab)],
        &[want],
        F64_TOL,
    );
    refused(sce_graph(
        Op::SoftmaxCrossEntropyWithLogits,
        &[2, 3],
        c,
        DType::F32,
        false,
    ));
}

#[test]
fn softmax_cross_entropy_backward_matches_cpu_and_reference() {
    // Hand check: logits [0, 0], label 0, d_loss 2 → [(0.5 − 1)·2, 0.5·2].
    assert_eq!(
        sce_backward_reference(&[0.0, 0.0], &[0.0], &[2.0], 2),
        vec![-1.0, 1.0]
    );
    let (n, c) = (8usize, 6usize);
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let g = sce_graph(Op::SoftmaxCrossEntropyBackward, &[n], c, dt, false);
        let feeds = vec![
            feed("logits", random_values(n * c, dt, -3.0, 3.0, 51)),
            feed("labels", labels(n, c)),
            feed("d_loss", random_values(n, dt, -1.0, 1.0, 52)),
        ];
        let reference = run_cpu(&g, &feeds);
        let mine = sce_backward_reference(&feeds[0].values, &feeds[1].values, &feeds[2].values, c);
        assert_close(
            "SCE backward: CPU vs f64",
            &reference[0],
            &mine,
            Tol::for_dtype(dt),
        );
        check_against(
            &format!("SoftmaxCrossEntropyBackward {dt:?}"),
            &g,
            &feeds,
            &reference,
            Tol::for_dtype(dt),
        );
    }
    // A label ≥ C: f64 reference.
    let rows = [6usize];
    let g = sce_graph(Op::SoftmaxCrossEntropyBackward, &rows, c, DType::F32, false);
    let l = random_values(6 * c, DType::F32, -3.0, 3.0, 53);
    let mut lab = labels(6, c);
    lab[4] = c as f32 + 3.0;
    let dl = random_values(6, DType::F32, 0.5, 1.5, 54);
    let want = sce_backward_reference(&l, &lab, &dl, c);
    check_against(
        "SoftmaxCrossEntropyBackward label >= C",
        &g,
        &[feed("logits", l), feed("labels", lab), feed("d_loss", dl)],
        &[want],
        F64_TOL,
    );
    refused(sce_graph(
        Op::SoftmaxCrossEntropyBackward,
        &[2, 3],
        c,
        DType::F32,
        false,
    ));
}

// ── FakeQuantize ───────────────────────────────────────────────────────

fn fq_graph(
    dims: &[usize],
    dt: DType,
    bits: u8,
    axis: Option<usize>,
    ste: SteKind,
    scale_mode: ScaleMode,
) -> Graph {
    let mut g = Graph::new("fq");
    let x = g.input("x", sh(dims, dt));
    let mut ins = vec![x];
    if !matches!(scale_mode, ScaleMode::PerBatch) {
        let c = axis.map_or(1, |a| dims[a]);
        ins.push(g.param("state", sh(&[c], DType::F32)));
    }
    let o = g.add_node(
        Op::FakeQuantize {
            bits,
            axis,
            ste,
            scale_mode,
        },
        ins,
        sh(dims, dt),
    );
    g.set_outputs(vec![o]);
    g
}

fn q_of(bits: u8) -> f32 {
    match bits {
        8 => 127.0,
        4 => 7.0,
        _ => 1.0,
    }
}

/// Channel of flat element `i` (rlx-cpu's `(i / inner) % chan`).
fn chan_of(i: usize, dims: &[usize], axis: Option<usize>) -> usize {
    match axis {
        None => 0,
        Some(a) => (i / dims[a + 1..].iter().product::<usize>()) % dims[a],
    }
}

/// rlx-cpu's per-batch scale, in f32.
fn per_batch_scale(x: &[f32], dims: &[usize], axis: Option<usize>, q: f32) -> Vec<f32> {
    let c = axis.map_or(1, |a| dims[a]);
    let mut m = vec![0f32; c];
    for (i, &v) in x.iter().enumerate() {
        let k = chan_of(i, dims, axis);
        m[k] = m[k].max(v.abs());
    }
    m.iter().map(|&m| (m / q).max(1e-12)).collect()
}

fn quantize(x: &[f32], dims: &[usize], axis: Option<usize>, q: f32, s: &[f32]) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let s = s[chan_of(i, dims, axis)];
            (v / s).round().clamp(-q, q) * s
        })
        .collect()
}

#[test]
fn fake_quantize_per_batch_matches_cpu() {
    // Hand check, 2 bits (q = 1), s = max|x| = 1: -0.5 rounds away from
    // zero to -1 (half to even would give 0).
    let x = [0.1f32, -0.5, 1.0, 0.26];
    let s = per_batch_scale(&x, &[4], None, 1.0);
    assert_eq!(quantize(&x, &[4], None, 1.0, &s), vec![0.0, -1.0, 1.0, 0.0]);
    let mut g = fq_graph(
        &[4],
        DType::F32,
        2,
        None,
        SteKind::Identity,
        ScaleMode::PerBatch,
    );
    check_against_every_mode(
        "FakeQuantize hand",
        &g,
        &[feed("x", x.to_vec())],
        &[vec![0.0, -1.0, 1.0, 0.0]],
        EXACT,
    );
    for (dims, axis) in [
        (vec![4usize, 6], None),
        (vec![4, 6], Some(0)),
        (vec![4, 6], Some(1)),
        (vec![2, 3, 4], Some(1)),
    ] {
        for bits in [8u8, 4, 2] {
            for dt in [DType::F32, DType::F16, DType::BF16] {
                g = fq_graph(&dims, dt, bits, axis, SteKind::Tanh, ScaleMode::PerBatch);
                let what = format!("FakeQuantize {dims:?} axis {axis:?} bits {bits} {dt:?}");
                let tol = if dt == DType::F32 {
                    EXACT
                } else {
                    Tol::for_dtype(dt)
                };
                check_parity(&what, &g, 61 + bits as u64, tol);
            }
        }
    }
}

#[test]
fn fake_quantize_fixed_matches_cpu() {
    let dims = [3usize, 5];
    for axis in [None, Some(1)] {
        let c = axis.map_or(1, |a| dims[a]);
        let g = fq_graph(
            &dims,
            DType::F32,
            4,
            axis,
            SteKind::Identity,
            ScaleMode::Fixed,
        );
        // A zero state is read as 1e-12 (everything saturates to ±q·1e-12).
        let mut st = random_values(c, DType::F32, 0.05, 0.3, 71);
        if c > 1 {
            st[2] = 0.0;
        }
        let feeds = vec![
            feed("x", random_values(15, DType::F32, -1.0, 1.0, 72)),
            feed("state", st.clone()),
        ];
        let reference = run_cpu(&g, &feeds);
        let s: Vec<f32> = st.iter().map(|v| v.max(1e-12)).collect();
        let mine = quantize(&feeds[0].values, &dims, axis, 7.0, &s);
        assert_close(
            "FakeQuantize Fixed: CPU vs mine",
            &reference[0],
            &mine,
            EXACT,
        );
        check_against(
            &format!("FakeQuantize Fixed axis {axis:?}"),
            &g,
            &feeds,
            &reference,
            EXACT,
        );
    }
}

#[test]
fn fake_quantize_ema_writes_its_state_back() {
    let dims = [4usize, 3];
    let decay = 0.75f32;
    for axis in [None, Some(1)] {
        let c = axis.map_or(1, |a| dims[a]);
        let g = fq_graph(
            &dims,
            DType::F32,
            8,
            axis,
            SteKind::Identity,
            ScaleMode::EMA { decay },
        );
        let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
        // Channel 0 cold-starts (state 0 → seeded with the batch scale).
        let mut s0 = random_values(c, DType::F32, 0.002, 0.01, 81);
        s0[0] = 0.0;
        let x1 = random_values(12, DType::F32, -1.0, 1.0, 82);
        let x2 = random_values(12, DType::F32, -2.0, 2.0, 83);
        // rlx-cpu's algorithm, f32.
        let step = |st: &[f32], x: &[f32]| -> (Vec<f32>, Vec<f32>) {
            let cur = per_batch_scale(x, &dims, axis, 127.0);
            let new: Vec<f32> = st
                .iter()
                .zip(&cur)
                .map(|(&s, &k)| {
                    if s <= 0.0 {
                        k
                    } else {
                        decay * s + (1.0 - decay) * k
                    }
                })
                .collect();
            (quantize(x, &dims, axis, 127.0, &new), new)
        };
        let (y1, s1) = step(&s0, &x1);
        let (y2, _) = step(&s1, &x2);
        // Hand check of the blend on channel 0 (cold) and the EMA formula.
        assert_eq!(s1[0], per_batch_scale(&x1, &dims, axis, 127.0)[0]);
        // The first run agrees with rlx-cpu.
        let cpu = run_cpu(&g, &[feed("x", x1.clone()), feed("state", s0.clone())]);
        assert_close("FakeQuantize EMA: CPU vs mine", &cpu[0], &y1, EXACT);
        for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
            let mut exe = mlx().compile(&text, mode).unwrap();
            exe.bind_param("state", &HostTensor::from_f32(vec![c], &s0).unwrap())
                .unwrap();
            for (x, want, run) in [(&x1, &y1, 1), (&x2, &y2, 2)] {
                let t = HostTensor::from_f32(dims.to_vec(), x).unwrap();
                let out = exe.run(&[("x", &t)]).unwrap();
                assert_close(
                    &format!("FakeQuantize EMA axis {axis:?} [{}] run {run}", mode.name()),
                    &out[0].to_f32_vec().unwrap(),
                    want,
                    EXACT,
                );
            }
        }
    }
}

// ── FakeQuantizeBackward ───────────────────────────────────────────────

const STES: [SteKind; 4] = [
    SteKind::Identity,
    SteKind::ClippedIdentity,
    SteKind::Tanh,
    SteKind::HardTanh,
];

fn fqb_graph(dims: &[usize], dt: DType, bits: u8, axis: Option<usize>, ste: SteKind) -> Graph {
    let mut g = Graph::new("fqb");
    let x = g.input("x", sh(dims, dt));
    let dy = g.input("dy", sh(dims, dt));
    let o = g.add_node(
        Op::FakeQuantizeBackward { bits, axis, ste },
        vec![x, dy],
        sh(dims, dt),
    );
    g.set_outputs(vec![o]);
    g
}

/// The STE attenuation in f64.
fn ste64(ste: SteKind, x: f64, s: f64, q: f64) -> f64 {
    match ste {
        SteKind::Identity => 1.0,
        SteKind::ClippedIdentity => {
            if x.abs() <= q * s {
                1.0
            } else {
                0.0
            }
        }
        SteKind::Tanh => 1.0 - (x / s).tanh().powi(2),
        SteKind::HardTanh => (1.0 - (x / (q * s)).abs()).max(0.0),
    }
}

#[test]
fn fake_quantize_backward_per_batch_matches_cpu() {
    for (dims, axis) in [(vec![4usize, 6], None), (vec![2, 3, 4], Some(1))] {
        for bits in [8u8, 4, 2] {
            for ste in STES {
                for dt in [DType::F32, DType::F16] {
                    let g = fqb_graph(&dims, dt, bits, axis, ste);
                    check_parity(
                        &format!("FakeQuantizeBackward {ste:?} bits {bits} axis {axis:?} {dt:?}"),
                        &g,
                        91 + bits as u64,
                        Tol::for_dtype(dt),
                    );
                }
            }
        }
    }
}

#[test]
fn fake_quantize_backward_matches_an_independent_reference() {
    // Hand check: q = 1, s = 1, x = [0.5, 2]: clipped [1, 0], hard-tanh
    // [0.5, 0], tanh [1 − tanh²(0.5), 1 − tanh²(2)].
    assert_eq!(ste64(SteKind::ClippedIdentity, 0.5, 1.0, 1.0), 1.0);
    assert_eq!(ste64(SteKind::ClippedIdentity, 2.0, 1.0, 1.0), 0.0);
    assert_eq!(ste64(SteKind::HardTanh, 0.5, 1.0, 1.0), 0.5);
    assert_eq!(ste64(SteKind::HardTanh, 2.0, 1.0, 1.0), 0.0);
    assert!((ste64(SteKind::Tanh, 2.0, 1.0, 1.0) - (1.0 - 2f64.tanh().powi(2))).abs() < 1e-15);
    // The op has no scale input (rlx-ir's verifier requires [x, dy]), so
    // the scale is the per-batch one, as the forward's PerBatch mode: the
    // f32 scale of the op's definition (max|x|/q, so the max element sits
    // exactly on the clip bound as in the kernel), the attenuation in f64.
    let dims = [2usize, 3, 4];
    for axis in [None, Some(1), Some(2)] {
        for bits in [8u8, 4, 2] {
            let q = q_of(bits);
            for ste in STES {
                let g = fqb_graph(&dims, DType::F32, bits, axis, ste);
                let x = random_values(24, DType::F32, -1.0, 1.0, 101);
                let dy = random_values(24, DType::F32, -1.0, 1.0, 102);
                let sc = per_batch_scale(&x, &dims, axis, q);
                let want: Vec<f32> = (0..24)
                    .map(|i| {
                        let s = sc[chan_of(i, &dims, axis)];
                        let att = if ste == SteKind::ClippedIdentity {
                            // the bound q·s in f32, as the op computes it
                            if x[i].abs() <= q * s {
                                1.0
                            } else {
                                0.0
                            }
                        } else {
                            ste64(ste, x[i] as f64, s as f64, q as f64)
                        };
                        (dy[i] as f64 * att) as f32
                    })
                    .collect();
                check_against(
                    &format!("FakeQuantizeBackward {ste:?} bits {bits} axis {axis:?} vs f64"),
                    &g,
                    &[feed("x", x), feed("dy", dy)],
                    &[want],
                    F64_TOL,
                );
            }
        }
    }
}

/// FakeQuantizeBackward after an EMA or Fixed forward on the same x: the
/// plugin uses the scale that forward used (the forward's state, linked to
/// the backward at compile), against a reference written here from the
/// op's definition (EMA `decay·state + (1 − decay)·cur`, per channel a cold
/// channel 0 seeded with `cur`; Fixed `max(state, 1e-12)`; then the STE formulas of
/// `ste64`), F64_TOL. The plugin does better than the CPU here: rlx-cpu
/// recomputes the per-batch scale whatever the forward did, and the test
/// checks that its answer is off (so the case tells the two apart).
#[test]
fn fake_quantize_backward_uses_its_forwards_scale() {
    let dims = [4usize, 3];
    let (bits, q) = (4u8, 7.0f32);
    let decay = 0.75f32;
    for axis in [None, Some(1)] {
        let c = axis.map_or(1, |a| dims[a]);
        for scale_mode in [ScaleMode::EMA { decay }, ScaleMode::Fixed] {
            for ste in [SteKind::ClippedIdentity, SteKind::Tanh, SteKind::HardTanh] {
                let mut g = Graph::new("fq_fwd_bwd");
                let x = g.input("x", sh(&dims, DType::F32));
                let dy = g.input("dy", sh(&dims, DType::F32));
                let state = g.param("state", sh(&[c], DType::F32));
                let y = g.add_node(
                    Op::FakeQuantize {
                        bits,
                        axis,
                        ste,
                        scale_mode,
                    },
                    vec![x, state],
                    sh(&dims, DType::F32),
                );
                let dx = g.add_node(
                    Op::FakeQuantizeBackward { bits, axis, ste },
                    vec![x, dy],
                    sh(&dims, DType::F32),
                );
                g.set_outputs(vec![y, dx]);
                let xs = random_values(12, DType::F32, -2.0, 2.0, 111);
                let dys = random_values(12, DType::F32, -1.0, 1.0, 112);
                // q·s between 0.35 and 2.1 against |x| up to 2: some
                // elements clip, and every channel's scale is far from the
                // per-batch one (max|x| / 7, ~0.28).
                let mut st = random_values(c, DType::F32, 0.05, 0.3, 113);
                let cur = per_batch_scale(&xs, &dims, axis, q);
                let scale: Vec<f32> = match scale_mode {
                    ScaleMode::EMA { decay } => {
                        if c > 1 {
                            st[0] = 0.0; // cold: seeded with the batch scale
                        }
                        st.iter()
                            .zip(&cur)
                            .map(|(&s, &k)| {
                                if s <= 0.0 {
                                    k
                                } else {
                                    decay * s + (1.0 - decay) * k
                                }
                            })
                            .collect()
                    }
                    _ => st.iter().map(|s| s.max(1e-12)).collect(),
                };
                let want_y = quantize(&xs, &dims, axis, q, &scale);
                let want_dx: Vec<f32> = (0..12)
                    .map(|i| {
                        let s = scale[chan_of(i, &dims, axis)];
                        let att = if ste == SteKind::ClippedIdentity {
                            // the bound q·s in f32, as the op computes it
                            if xs[i].abs() <= q * s {
                                1.0
                            } else {
                                0.0
                            }
                        } else {
                            ste64(ste, xs[i] as f64, s as f64, q as f64)
                        };
                        (dys[i] as f64 * att) as f32
                    })
                    .collect();
                let feeds = [feed("x", xs), feed("dy", dys), feed("state", st)];
                let what =
                    format!("FakeQuantizeBackward after {scale_mode:?} {ste:?} axis {axis:?}");
                check_against_every_mode(&what, &g, &feeds, &[want_y, want_dx.clone()], F64_TOL);
                let cpu = run_cpu(&g, &feeds);
                let off = cpu[1]
                    .iter()
                    .zip(&want_dx)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    off > 1e-3,
                    "{what}: the CPU's per-batch scale gives the same answer"
                );
            }
        }
    }
}

/// A FakeQuantizeBackward whose two forwards on its x disagree on the scale
/// (an EMA and a Fixed one) has no defined answer: refused, naming it.
#[test]
fn fake_quantize_backward_with_disagreeing_forwards_is_refused() {
    let dims = [4usize, 3];
    let mut g = Graph::new("fq_two_forwards");
    let x = g.input("x", sh(&dims, DType::F32));
    let dy = g.input("dy", sh(&dims, DType::F32));
    let st = g.param("state", sh(&[1], DType::F32));
    let mut outs = Vec::new();
    for scale_mode in [ScaleMode::EMA { decay: 0.5 }, ScaleMode::Fixed] {
        outs.push(g.add_node(
            Op::FakeQuantize {
                bits: 8,
                axis: None,
                ste: SteKind::Tanh,
                scale_mode,
            },
            vec![x, st],
            sh(&dims, DType::F32),
        ));
    }
    let dx = g.add_node(
        Op::FakeQuantizeBackward {
            bits: 8,
            axis: None,
            ste: SteKind::Tanh,
        },
        vec![x, dy],
        sh(&dims, DType::F32),
    );
    outs.push(dx);
    g.set_outputs(outs);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let e = mlx().compile(&text, Mode::Lazy).err().expect("refused");
    assert_eq!(e.code, rlx_plugin_api::StatusCode::Unsupported, "{e}");
    assert!(
        e.message.contains("FakeQuantizeBackward") && e.message.contains("disagree"),
        "{e}"
    );
}

// ── GatedResidualBackward ──────────────────────────────────────────────

fn grb_graph(xd: &[usize], gd: &[usize], dt: DType) -> Graph {
    let mut g = Graph::new("grb");
    let x = g.input("x", sh(xd, dt));
    let y = g.input("y", sh(xd, dt));
    let gate = g.input("gate", sh(gd, dt));
    let dy = g.input("dy", sh(xd, dt));
    let nx: usize = xd.iter().product();
    let ng: usize = gd.iter().product();
    let o = g.add_node(
        Op::GatedResidualBackward,
        vec![x, y, gate, dy],
        sh(&[2 * nx + ng], dt),
    );
    g.set_outputs(vec![o]);
    g
}

#[test]
fn gated_residual_backward_matches_cpu() {
    // Hand check: x, y, dy of [2, 2], gate [2]: y = [[1, 2], [3, 4]],
    // dy = [[1, 1], [2, 0]], gate = [10, 20] → dx = dy,
    // dy·gate = [10, 20, 20, 0], dgate = [1 + 6, 2 + 0].
    let g = grb_graph(&[2, 2], &[2], DType::F32);
    let feeds = vec![
        feed("x", vec![5.0, 6.0, 7.0, 8.0]),
        feed("y", vec![1.0, 2.0, 3.0, 4.0]),
        feed("gate", vec![10.0, 20.0]),
        feed("dy", vec![1.0, 1.0, 2.0, 0.0]),
    ];
    let want = vec![1.0, 1.0, 2.0, 0.0, 10.0, 20.0, 20.0, 0.0, 7.0, 2.0];
    assert_close(
        "GatedResidualBackward hand: CPU",
        &run_cpu(&g, &feeds)[0],
        &want,
        EXACT,
    );
    check_against_every_mode("GatedResidualBackward hand", &g, &feeds, &[want], EXACT);
    for gd in [vec![4usize], vec![1, 4], vec![2, 1, 4], vec![2, 3, 4]] {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let g = grb_graph(&[2, 3, 4], &gd, dt);
            // dgate sums up to 6 products: twice the single-op tolerance.
            let t = Tol::for_dtype(dt);
            let tol = Tol {
                abs: 2.0 * t.abs,
                rel: 2.0 * t.rel,
            };
            check_parity(
                &format!("GatedResidualBackward gate {gd:?} {dt:?}"),
                &g,
                111,
                tol,
            );
        }
    }
}
