//! Parity of Reduce (Sum, Mean, Max, Min, Prod over any axis set, with and
//! without keep_dim) and Softmax (any axis) on the MLX plugin against
//! rlx-runtime's CPU backend, f32/f16/bf16, in every mode.
//!
//! rlx-cpu promotes f16/bf16 graphs to f32 and computes there; the plugin
//! accumulates half inputs in f32 as well and rounds once, so the half
//! tolerances are the dtype's rounding of the result.

use rlx_ir::op::ReduceOp;
use rlx_ir::{DType as IrDType, Graph, Op, Shape};
use rlx_plugin_api::StatusCode;
use rlx_plugin_tests::parity::{check_against, leaves, mlx, random_values, run_cpu, Feed, Tol};

fn s(d: &[usize], t: IrDType) -> Shape {
    Shape::new(d, t)
}

const FLOATS: [IrDType; 3] = [IrDType::F32, IrDType::F16, IrDType::BF16];
const OPS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Mean,
    ReduceOp::Max,
    ReduceOp::Min,
    ReduceOp::Prod,
];

/// Max and Min pick an element: exact in every dtype. The others accumulate
/// in f32 on both sides in a different order: f32 allows a few ulps of the
/// sum of |x| (at most ~200 terms of |x| < 1.25 here, so ~2e-5 absolute);
/// half types allow the dtype's rounding of the result (plus that).
fn tol(op: ReduceOp, dt: IrDType) -> Tol {
    match (op, dt) {
        (ReduceOp::Max | ReduceOp::Min, _) => Tol { abs: 0.0, rel: 0.0 },
        (_, IrDType::F32) => Tol {
            abs: 2e-5,
            rel: 1e-5,
        },
        (_, d) => Tol::for_dtype(d),
    }
}

/// Values that keep every reduction well conditioned: |x| in [0.8, 1.25)
/// with a random sign, so a product over ~200 terms stays far from 0 and
/// inf, and sums are not all cancellation.
fn feed_values(n: usize, dt: IrDType, seed: u64) -> Vec<f32> {
    let mag = random_values(n, IrDType::F32, 0.8, 1.25, seed);
    let sign = random_values(n, IrDType::F32, -1.0, 1.0, seed ^ 0x5eed);
    let v: Vec<f32> = mag
        .iter()
        .zip(&sign)
        .map(|(m, s)| if *s < 0.0 { -m } else { *m })
        .collect();
    rlx_plugin_tests::parity::round_to(&v, dt)
}

fn feeds(g: &Graph, seed: u64) -> Vec<Feed> {
    leaves(g)
        .iter()
        .enumerate()
        .map(|(i, l)| Feed {
            name: l.name.clone(),
            values: feed_values(l.dims.iter().product(), l.dtype, seed + 17 * i as u64),
        })
        .collect()
}

fn reduced_dims(dims: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, d) in dims.iter().enumerate() {
        if axes.contains(&i) {
            if keep {
                out.push(1);
            }
        } else {
            out.push(*d);
        }
    }
    out
}

/// One Reduce node over `axes` (whatever they are), as the plugin gets it.
fn reduce_node(
    dims: &[usize],
    op: ReduceOp,
    axes: &[usize],
    keep: bool,
    dt: IrDType,
    declared: Option<&[usize]>,
) -> Graph {
    let mut g = Graph::new("reduce");
    let x = g.input("x", s(dims, dt));
    let out = declared
        .map(|d| d.to_vec())
        .unwrap_or_else(|| reduced_dims(dims, axes, keep));
    let r = g.add_node(
        Op::Reduce {
            op,
            axes: axes.to_vec(),
            keep_dim: keep,
        },
        vec![x],
        s(&out, dt),
    );
    g.set_outputs(vec![r]);
    g
}

/// The same reduction through `Graph::reduce`, which splits non-adjacent
/// axes into a chain of single-range reductions (rlx-cpu refuses a single
/// node over non-adjacent axes): the reference for those.
fn reduce_chain(dims: &[usize], op: ReduceOp, axes: &[usize], keep: bool, dt: IrDType) -> Graph {
    let mut g = Graph::new("reduce_chain");
    let x = g.input("x", s(dims, dt));
    let r = g.reduce(
        x,
        op,
        axes.to_vec(),
        keep,
        s(&reduced_dims(dims, axes, keep), dt),
    );
    g.set_outputs(vec![r]);
    g
}

#[test]
fn reduce_contiguous_axes_parity() {
    // (dims, axes): ranks 1-5, odd sizes, single axes, ranges, all axes.
    let cases: &[(&[usize], &[usize])] = &[
        (&[7], &[0]),
        (&[1], &[0]),
        (&[3, 5], &[0]),
        (&[3, 5], &[1]),
        (&[3, 5], &[0, 1]),
        (&[2, 3, 13], &[2]),
        (&[2, 3, 13], &[1]),
        (&[2, 3, 13], &[0, 1]),
        (&[2, 3, 13], &[1, 2]),
        (&[4, 1, 3, 5], &[1, 2]),
        (&[4, 1, 3, 5], &[3]),
        (&[2, 3, 5, 7], &[0, 1, 2, 3]),
        (&[2, 3, 2, 5, 3], &[1, 2, 3]),
        (&[2, 3, 2, 5, 3], &[4]),
        (&[1, 11, 17], &[1, 2]),
    ];
    let mut seed = 1;
    for (dims, axes) in cases {
        for op in OPS {
            for keep in [false, true] {
                for dt in FLOATS {
                    seed += 1;
                    let g = reduce_node(dims, op, axes, keep, dt, None);
                    let f = feeds(&g, seed);
                    let reference = run_cpu(&g, &f);
                    check_against(
                        &format!("Reduce {op:?} {dims:?} axes {axes:?} keep {keep} {dt:?}"),
                        &g,
                        &f,
                        &reference,
                        tol(op, dt),
                    );
                }
            }
        }
    }
}

#[test]
fn reduce_any_axis_set_parity() {
    // Non-adjacent and unsorted axis sets in one node; the reference is the
    // CPU running the equivalent chain (see `reduce_chain`).
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 4, 5], &[0, 2]),
        (&[3, 4, 5], &[2, 0]),
        (&[2, 3, 5, 7], &[0, 2]),
        (&[2, 3, 5, 7], &[1, 3]),
        (&[2, 3, 5, 7], &[3, 0, 1]),
        (&[2, 3, 2, 5, 3], &[0, 2, 4]),
        (&[2, 3, 2, 5, 3], &[1, 4]),
    ];
    let mut seed = 500;
    for (dims, axes) in cases {
        for op in OPS {
            for keep in [false, true] {
                for dt in FLOATS {
                    seed += 1;
                    let g = reduce_node(dims, op, axes, keep, dt, None);
                    let f = feeds(&g, seed);
                    let reference = run_cpu(&reduce_chain(dims, op, axes, keep, dt), &f);
                    check_against(
                        &format!("Reduce {op:?} {dims:?} axes {axes:?} keep {keep} {dt:?}"),
                        &g,
                        &f,
                        &reference,
                        tol(op, dt),
                    );
                }
            }
        }
    }
}

#[test]
fn reduce_to_one_element_declared_as_rank_1() {
    // A full reduction without keep_dim may be declared [1] as well as [].
    for op in OPS {
        for dt in FLOATS {
            let g = reduce_node(&[3, 5], op, &[0, 1], false, dt, Some(&[1]));
            let f = feeds(&g, 77);
            let reference = run_cpu(&g, &f);
            check_against(
                &format!("Reduce {op:?} [3, 5] -> [1] {dt:?}"),
                &g,
                &f,
                &reference,
                tol(op, dt),
            );
        }
    }
}

/// Softmax: exp differs in the last ulp between the CPU's polynomial and
/// MLX's, and the normaliser sums up to 17 terms: f32 gets a few ulps.
fn softmax_tol(dt: IrDType) -> Tol {
    match dt {
        IrDType::F32 => Tol {
            abs: 1e-6,
            rel: 1e-5,
        },
        d => Tol::for_dtype(d),
    }
}

fn softmax_graph(dims: &[usize], axis: i32, dt: IrDType) -> Graph {
    let mut g = Graph::new("softmax");
    let x = g.input("x", s(dims, dt));
    let y = g.softmax(x, axis, s(dims, dt));
    g.set_outputs(vec![y]);
    g
}

#[test]
fn softmax_parity() {
    let cases: &[(&[usize], i32)] = &[
        (&[7], 0),
        (&[7], -1),
        (&[1], 0),
        (&[3, 5], -1),
        (&[3, 5], 1),
        (&[3, 5], 0),
        (&[2, 3, 17], -1),
        (&[2, 3, 17], 1),
        (&[2, 3, 17], -3),
        (&[2, 3, 4, 5], 3),
        (&[2, 3, 4, 5], 2),
        (&[2, 3, 4, 5], -3),
    ];
    let mut seed = 900;
    for (dims, axis) in cases {
        for dt in FLOATS {
            seed += 1;
            let g = softmax_graph(dims, *axis, dt);
            // Logits spread over [-4, 4).
            let f = vec![Feed {
                name: "x".into(),
                values: random_values(dims.iter().product(), dt, -4.0, 4.0, seed),
            }];
            let reference = run_cpu(&g, &f);
            check_against(
                &format!("Softmax {dims:?} axis {axis} {dt:?}"),
                &g,
                &f,
                &reference,
                softmax_tol(dt),
            );
        }
    }
}

#[test]
fn softmax_is_numerically_stable() {
    // Logits in [-200, 200): exp overflows f32 without the max subtraction.
    for dt in FLOATS {
        for (dims, axis) in [(&[4usize, 9][..], -1), (&[5, 3, 2][..], 0)] {
            let g = softmax_graph(dims, axis, dt);
            let f = vec![Feed {
                name: "x".into(),
                values: random_values(dims.iter().product(), dt, -200.0, 200.0, 31),
            }];
            let reference = run_cpu(&g, &f);
            assert!(
                reference[0].iter().all(|v| v.is_finite()),
                "the CPU reference is finite"
            );
            check_against(
                &format!("Softmax large logits {dims:?} axis {axis} {dt:?}"),
                &g,
                &f,
                &reference,
                softmax_tol(dt),
            );
        }
    }
}

#[test]
fn reduce_softmax_chain_parity() {
    // softmax -> reduce max over the softmax axis -> reduce sum: a small
    // pipeline, checked end to end.
    for dt in FLOATS {
        let mut g = Graph::new("chain");
        let x = g.input("x", s(&[3, 4, 5], dt));
        let p = g.softmax(x, 1, s(&[3, 4, 5], dt));
        let m = g.reduce(p, ReduceOp::Max, vec![1], true, s(&[3, 1, 5], dt));
        let t = g.reduce(m, ReduceOp::Sum, vec![0, 1, 2], false, s(&[], dt));
        g.set_outputs(vec![m, t]);
        let f = feeds(&g, 4242);
        let reference = run_cpu(&g, &f);
        check_against(
            &format!("softmax->max->sum {dt:?}"),
            &g,
            &f,
            &reference,
            // Both outputs pass through a softmax (softmax_tol); the sum adds
            // 15 such values.
            match dt {
                IrDType::F32 => Tol {
                    abs: 1e-5,
                    rel: 1e-5,
                },
                d => Tol::for_dtype(d),
            },
        );
    }
}

#[test]
fn unsupported_variants_fail_at_compile_naming_the_node() {
    let p = mlx();
    // Reduce over an empty axis list: the shape rule says identity, ONNX says
    // reduce-all, rlx-cpu refuses it. Not lowered.
    let mut g = Graph::new("empty_axes");
    let x = g.input("x", s(&[3, 4], IrDType::F32));
    let r = g.add_node(
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![],
            keep_dim: false,
        },
        vec![x],
        s(&[3, 4], IrDType::F32),
    );
    g.set_outputs(vec![r]);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    for mode in rlx_plugin_tests::parity::modes_for(&g) {
        let e = p
            .compile(&text, mode)
            .err()
            .expect("an empty axis list is not lowered");
        assert_eq!(e.code, StatusCode::Unsupported, "{e}");
        assert!(
            e.message.contains("node %1")
                && e.message.contains("Reduce")
                && e.message.contains("empty axis list is not supported"),
            "{e}"
        );
    }
}
