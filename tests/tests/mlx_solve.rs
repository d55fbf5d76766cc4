//! Parity of the dense linear solves (DenseSolve, BatchedDenseSolve) on the
//! MLX plugin against rlx-runtime's CPU backend (LAPACK sgesv/dgesv), in
//! every mode.
//!
//! Systems are well conditioned: `A = R + n*I` with `R` uniform in [-1, 1)
//! (strictly diagonally dominant, condition number below ~3), `b` uniform in
//! [-1, 1). Feeds are rounded to the tested dtype first, so both sides solve
//! the same system.
//!
//! Tolerances: the per-dtype defaults (Tol::for_dtype). The two sides
//! factor differently (LAPACK's sgesv vs MLX's LU + triangular inverses +
//! matmul), but with this conditioning an f32 solution agrees to ~1e-6 up to
//! n = 32 (measured), inside the 1e-5 default. f16/bf16 are solved in f32
//! on both sides (rlx-cpu widens half graphs) and rounded once to the dtype
//! on the plugin: the dtype's one-rounding tolerance.

use rlx_ir::{DType as D, Graph, Shape};
use rlx_plugin_api::{HostTensor, Mode};
use rlx_plugin_tests::parity::{check_against, mlx, random_values, round_to, run_cpu, Feed, Tol};

fn s(d: &[usize], t: D) -> Shape {
    Shape::new(d, t)
}

fn feed(name: &str, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

fn tol(dt: D) -> Tol {
    Tol::for_dtype(dt)
}

/// `batch` well-conditioned `n x n` matrices (R + n*I), rounded to `dt`.
fn matrices(batch: usize, n: usize, dt: D, seed: u64) -> Vec<f32> {
    let mut a = random_values(batch * n * n, D::F32, -1.0, 1.0, seed);
    for m in 0..batch {
        for i in 0..n {
            a[m * n * n + i * n + i] += n as f32;
        }
    }
    round_to(&a, dt)
}

fn check(what: &str, g: &Graph, feeds: &[Feed], t: Tol) {
    let reference = run_cpu(g, feeds);
    check_against(what, g, feeds, &reference, t);
}

fn dense_graph(n: usize, k: Option<usize>, dt: D) -> Graph {
    let bd: Vec<usize> = match k {
        None => vec![n],
        Some(k) => vec![n, k],
    };
    let mut g = Graph::new("dense_solve");
    let a = g.input("a", s(&[n, n], dt));
    let b = g.input("b", s(&bd, dt));
    let x = g.dense_solve(a, b, s(&bd, dt));
    g.set_outputs(vec![x]);
    g
}

fn batched_graph(batch: usize, n: usize, k: Option<usize>, dt: D) -> Graph {
    let bd: Vec<usize> = match k {
        None => vec![batch, n],
        Some(k) => vec![batch, n, k],
    };
    let mut g = Graph::new("batched_dense_solve");
    let a = g.input("a", s(&[batch, n, n], dt));
    let b = g.input("b", s(&bd, dt));
    let x = g.batched_dense_solve(a, b, s(&bd, dt));
    g.set_outputs(vec![x]);
    g
}

#[test]
fn dense_solve_parity() {
    for dt in [D::F32, D::F16, D::BF16] {
        for n in [1usize, 2, 5, 7, 13, 32] {
            for k in [None, Some(1), Some(3)] {
                let seed = (n * 10 + k.unwrap_or(0)) as u64;
                let g = dense_graph(n, k, dt);
                let feeds = [
                    feed("a", matrices(1, n, dt, seed)),
                    feed(
                        "b",
                        random_values(n * k.unwrap_or(1), dt, -1.0, 1.0, seed + 1),
                    ),
                ];
                check(
                    &format!("DenseSolve {dt:?} n {n} rhs {k:?}"),
                    &g,
                    &feeds,
                    tol(dt),
                );
            }
        }
    }
}

#[test]
fn dense_solve_params() {
    // A bound as a param, b an input: the harness binds params by name.
    let mut g = Graph::new("dense_solve_param");
    let a = g.param("a", s(&[11, 11], D::F32));
    let b = g.input("b", s(&[11, 2], D::F32));
    let x = g.dense_solve(a, b, s(&[11, 2], D::F32));
    g.set_outputs(vec![x]);
    let feeds = [
        feed("a", matrices(1, 11, D::F32, 5)),
        feed("b", random_values(22, D::F32, -1.0, 1.0, 6)),
    ];
    check("DenseSolve param A", &g, &feeds, tol(D::F32));
}

#[test]
fn batched_dense_solve_parity() {
    for dt in [D::F32, D::F16, D::BF16] {
        for (batch, n) in [(1usize, 1usize), (1, 4), (3, 7), (5, 2), (2, 17)] {
            for k in [None, Some(1), Some(4)] {
                let seed = (batch * 100 + n * 10 + k.unwrap_or(0)) as u64;
                let g = batched_graph(batch, n, k, dt);
                let feeds = [
                    feed("a", matrices(batch, n, dt, seed)),
                    feed(
                        "b",
                        random_values(batch * n * k.unwrap_or(1), dt, -1.0, 1.0, seed + 1),
                    ),
                ];
                check(
                    &format!("BatchedDenseSolve {dt:?} batch {batch} n {n} rhs {k:?}"),
                    &g,
                    &feeds,
                    tol(dt),
                );
            }
        }
    }
}

/// An exactly singular system is an error on rlx-cpu (LAPACK reports the
/// zero pivot and the kernel panics); on the plugin it is a run-time error
/// in every mode, and the executable keeps working afterwards.
#[test]
fn singular_system_is_a_run_time_error() {
    let singular_2x2 = [1.0f32, 2.0, 2.0, 4.0];
    // (graph, A's dims, a singular A, a good A)
    type Case = (Graph, Vec<usize>, Vec<f32>, Vec<f32>);
    let cases: Vec<Case> = vec![
        (
            dense_graph(2, None, D::F32),
            vec![2, 2],
            singular_2x2.to_vec(),
            vec![2.0, 1.0, 1.0, 3.0],
        ),
        (
            dense_graph(3, Some(2), D::F32),
            vec![3, 3],
            vec![0.0; 9],
            matrices(1, 3, D::F32, 1),
        ),
        // One singular slice in a batch.
        (
            batched_graph(2, 2, None, D::F32),
            vec![2, 2, 2],
            [[2.0, 1.0, 1.0, 3.0], singular_2x2].concat(),
            matrices(2, 2, D::F32, 2),
        ),
    ];
    for (g, adims, bad, good) in cases {
        // The reference refuses it too.
        let b_dims: Vec<usize> = rlx_plugin_tests::parity::leaves(&g)[1].dims.clone();
        let b_vals = random_values(b_dims.iter().product(), D::F32, -1.0, 1.0, 3);
        let feeds_bad = [feed("a", bad.clone()), feed("b", b_vals.clone())];
        let cpu = std::panic::catch_unwind(|| run_cpu(&g, &feeds_bad));
        assert!(cpu.is_err(), "rlx-cpu solves a singular system");

        let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
        for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
            let mut exe = mlx().compile(&text, mode).unwrap();
            let b = HostTensor::from_f32(b_dims.clone(), &b_vals).unwrap();
            let a_bad = HostTensor::from_f32(adims.clone(), &bad).unwrap();
            let e = exe
                .run(&[("a", &a_bad), ("b", &b)])
                .expect_err("a singular system must fail");
            assert!(e.message.contains("inversion failed"), "{e}");
            if mode == Mode::Eager {
                assert!(e.message.contains("DenseSolve"), "{e}");
            }
            // The same executable solves a good system afterwards.
            let a_good = HostTensor::from_f32(adims.clone(), &good).unwrap();
            let out = exe.run(&[("a", &a_good), ("b", &b)]).unwrap();
            let want = run_cpu(&g, &[feed("a", good.clone()), feed("b", b_vals.clone())]);
            rlx_plugin_tests::parity::assert_close(
                &format!("after the error [{mode:?}]"),
                &out[0].to_f32_vec().unwrap(),
                &want[0],
                tol(D::F32),
            );
        }
    }
}

#[test]
fn unsupported_shapes_fail_at_compile_naming_the_node() {
    // b's leading extent differs from A's: not a system the op describes.
    let mut g = Graph::new("bad_rhs");
    let a = g.input("a", s(&[3, 3], D::F32));
    let b = g.input("b", s(&[4, 2], D::F32));
    let x = g.dense_solve(a, b, s(&[4, 2], D::F32));
    g.set_outputs(vec![x]);
    let e = mlx()
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("mismatched b must be refused");
    assert!(
        e.message.contains("node %2")
            && e.message.contains("DenseSolve")
            && e.message.contains("not supported"),
        "{e}"
    );

    // A 2-D A for the batched op.
    let mut g = Graph::new("bad_batch");
    let a = g.input("a", s(&[3, 3], D::F32));
    let b = g.input("b", s(&[3, 3], D::F32));
    let x = g.batched_dense_solve(a, b, s(&[3, 3], D::F32));
    g.set_outputs(vec![x]);
    let e = mlx()
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("a rank-2 A must be refused by the batched op");
    assert!(
        e.message.contains("node %2")
            && e.message.contains("BatchedDenseSolve")
            && e.message.contains("not supported"),
        "{e}"
    );

    // f64 is not lowered (MLX 0.32.4's f64 solve corrupts the heap for a
    // 1x1 system): refused at compile, not run.
    let mut g = Graph::new("f64_solve");
    let a = g.input("a", s(&[2, 2], D::F64));
    let b = g.input("b", s(&[2], D::F64));
    let x = g.dense_solve(a, b, s(&[2], D::F64));
    g.set_outputs(vec![x]);
    let e = mlx()
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("an f64 solve must be refused");
    assert!(
        e.message.contains("node %2")
            && e.message.contains("DenseSolve")
            && e.message.contains("f64"),
        "{e}"
    );

    // An integer solve is not lowered.
    let mut g = Graph::new("int_solve");
    let a = g.input("a", s(&[2, 2], D::I32));
    let b = g.input("b", s(&[2], D::I32));
    let x = g.dense_solve(a, b, s(&[2], D::I32));
    g.set_outputs(vec![x]);
    let e = mlx()
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("an i32 solve must be refused");
    assert!(
        e.message.contains("node %2") && e.message.contains("DenseSolve"),
        "{e}"
    );
}
