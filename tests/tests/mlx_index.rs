//! Parity of the indexing ops (ScatterAdd, ScatterNd, ScatterElements,
//! GatherNd, GatherElements) on the MLX plugin against rlx-runtime's CPU
//! backend, in every mode.
//!
//! Index feeds are integers (as f32, the encoding most rlx kernels read, and
//! as i32/i64), with repeated indices, negative indices and indices past the
//! end, so every rule of rlx-cpu's (accumulate in update order, last update
//! wins, wrap-then-clamp, negative -> 0, drop, error) is exercised against the
//! reference itself. Data and updates are seeded values in [-1, 1) rounded to
//! the tested dtype.
//!
//! Tolerances: gathers and the non-arithmetic scatters (None, Max, Min) move
//! values, so they are compared exactly (tolerance 0) in every dtype. Add and
//! Mul reductions combine a few values in update order, as rlx-cpu does, so
//! f32 is held to 1e-5 relative; f16/bf16 are computed in f32 on both sides
//! and rounded once to the dtype on the plugin, so they get the dtype's
//! one-rounding tolerance (Tol::for_dtype).

use rand::{Rng, SeedableRng};
use rlx_ir::op::ScatterNdReduction as R;
use rlx_ir::{DType as D, Graph, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{check_against, mlx, random_values, run_cpu, run_mlx, Feed, Tol};

fn s(d: &[usize], t: D) -> Shape {
    Shape::new(d, t)
}

const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };
const FLOATS: [D; 3] = [D::F32, D::F16, D::BF16];
/// Index encodings: f32 (most rlx kernels), f16 (exact for these small
/// values), i32, i64.
const INDEX_DTYPES: [D; 4] = [D::F32, D::F16, D::I32, D::I64];
const REDUCTIONS: [R; 5] = [R::None, R::Add, R::Mul, R::Max, R::Min];

fn n_of(d: &[usize]) -> usize {
    d.iter().product()
}

/// Seeded integers in [lo, hi), as f32.
fn ints(n: usize, lo: i64, hi: i64, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(lo..hi) as f32).collect()
}

fn feed(name: &str, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

/// Run `g` on the CPU backend and check the plugin against it in all modes.
fn check(what: &str, g: &Graph, feeds: &[Feed], tol: Tol) {
    let reference = run_cpu(g, feeds);
    check_against(what, g, feeds, &reference, tol);
}

/// The tolerance of a reduction in `dt` (see the module doc).
fn red_tol(r: R, dt: D) -> Tol {
    match r {
        R::Add | R::Mul => Tol::for_dtype(dt),
        _ => EXACT,
    }
}

// ── ScatterAdd ────────────────────────────────────────────────────────

fn scatter_add_graph(ud: &[usize], idt: D, axis: usize, od: &[usize], dt: D) -> Graph {
    let mut g = Graph::new("scatter_add");
    let u = g.input("u", s(ud, dt));
    let i = g.input("i", s(&[ud[axis]], idt));
    let o = g.add_node(Op::ScatterAdd { axis }, vec![u, i], s(od, dt));
    g.set_outputs(vec![o]);
    g
}

#[test]
fn scatter_add_parity() {
    // (updates, axis, output): ranks 1-4, odd extents, a size-1 case.
    let cases: [(&[usize], usize, &[usize]); 7] = [
        (&[7], 0, &[3]),
        (&[5, 3], 0, &[4, 3]),
        (&[1, 1], 0, &[1, 1]),
        (&[13, 2], 0, &[5, 2]),
        (&[2, 5, 3], 1, &[2, 4, 3]),
        (&[3, 2, 7], 2, &[3, 2, 5]),
        (&[2, 3, 4, 11], 3, &[2, 3, 4, 6]),
    ];
    for dt in FLOATS {
        for idt in INDEX_DTYPES {
            for (seed, (ud, axis, od)) in cases.iter().enumerate() {
                let g = scatter_add_graph(ud, idt, *axis, od, dt);
                let m = ud[*axis];
                let n = od[*axis] as i64;
                // Repeated rows accumulate; -1 lands on row 0 as on
                // rlx-cpu (a saturating `as usize`).
                let mut idx = ints(m, 0, n, 100 + seed as u64);
                if m > 2 {
                    idx[1] = -1.0;
                    idx[m - 1] = idx[0];
                }
                let feeds = [
                    feed("u", random_values(n_of(ud), dt, -1.0, 1.0, seed as u64)),
                    feed("i", idx),
                ];
                check(
                    &format!("ScatterAdd {dt:?} idx {idt:?} {ud:?} axis {axis} -> {od:?}"),
                    &g,
                    &feeds,
                    Tol::for_dtype(dt),
                );
            }
        }
    }
    // f32 indices holding fractions truncate toward zero, as on rlx-cpu.
    let g = scatter_add_graph(&[4, 2], D::F32, 0, &[3, 2], D::F32);
    let feeds = [
        feed("u", random_values(8, D::F32, -1.0, 1.0, 9)),
        feed("i", vec![1.7, 2.2, -0.5, 0.9]),
    ];
    check(
        "ScatterAdd fractional indices",
        &g,
        &feeds,
        Tol::for_dtype(D::F32),
    );
}

#[test]
fn scatter_add_index_past_the_end_is_a_run_time_error() {
    // rlx-cpu asserts `row < out_dim` (an error, not an answer), so the
    // plugin fails the run, in every mode, and runs again afterwards.
    let g = scatter_add_graph(&[3, 2], D::F32, 0, &[4, 2], D::F32);
    let u = feed("u", random_values(6, D::F32, -1.0, 1.0, 1));
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        for bad in [4.0, 1e9, f32::INFINITY] {
            let e = run_mlx(&g, &[u.clone(), feed("i", vec![0.0, bad, 1.0])], mode)
                .err()
                .unwrap_or_else(|| panic!("index {bad} past the end must fail [{mode:?}]"));
            assert!(
                e.message
                    .contains("is past its output's extent along the scatter axis"),
                "{e}"
            );
            if mode == Mode::Eager {
                assert!(e.message.contains("ScatterAdd"), "{e}");
            }
        }
        let good = [u.clone(), feed("i", vec![0.0, 3.0, 0.0])];
        let out = run_mlx(&g, &good, mode).unwrap()[0].to_f32_vec().unwrap();
        let want = run_cpu(&g, &good);
        assert_eq!(out, want[0], "after the error [{mode:?}]");
    }
}

// ── ScatterNd ─────────────────────────────────────────────────────────

fn scatter_nd_graph(dd: &[usize], id: &[usize], ud: &[usize], idt: D, r: R, dt: D) -> Graph {
    let mut g = Graph::new("scatter_nd");
    let d = g.input("d", s(dd, dt));
    let i = g.input("i", s(id, idt));
    let u = g.input("u", s(ud, dt));
    let o = g.scatter_nd(d, i, u, r);
    g.set_outputs(vec![o]);
    g
}

#[test]
fn scatter_nd_parity() {
    // (data, indices, updates): k = 1 .. rank, ranks 1-4, odd extents.
    let cases: [(&[usize], &[usize], &[usize]); 7] = [
        (&[7], &[5, 1], &[5]),
        (&[4, 3], &[6, 1], &[6, 3]),
        (&[1, 1], &[2, 2], &[2]),
        (&[5, 2], &[2, 3, 1], &[2, 3, 2]),
        (&[3, 4, 2], &[2, 3, 2], &[2, 3, 2]),
        (&[2, 3, 5], &[4, 3], &[4]),
        (&[2, 3, 2, 5], &[3, 2], &[3, 2, 5]),
    ];
    for dt in FLOATS {
        for r in REDUCTIONS {
            for (seed, (dd, id, ud)) in cases.iter().enumerate() {
                let k = *id.last().unwrap();
                // Components span [-dim - 1, dim + 1): duplicates, negatives
                // that wrap once, and out-of-range values rlx-cpu clamps.
                let mut idx = Vec::new();
                let tuples = n_of(id) / k;
                for t in 0..tuples {
                    for (m, &dim) in dd[..k].iter().enumerate() {
                        let dim = dim as i64;
                        idx.extend(ints(
                            1,
                            -dim - 1,
                            dim + 1,
                            (seed * 1000 + t * 10 + m) as u64,
                        ));
                    }
                }
                for idt in INDEX_DTYPES {
                    let g = scatter_nd_graph(dd, id, ud, idt, r, dt);
                    let feeds = [
                        feed("d", random_values(n_of(dd), dt, -1.0, 1.0, seed as u64)),
                        feed("i", idx.clone()),
                        feed(
                            "u",
                            random_values(n_of(ud), dt, -1.0, 1.0, 50 + seed as u64),
                        ),
                    ];
                    check(
                        &format!("ScatterNd {r:?} {dt:?} idx {idt:?} {dd:?} {id:?}"),
                        &g,
                        &feeds,
                        red_tol(r, dt),
                    );
                }
            }
        }
    }
}

#[test]
fn scatter_nd_duplicates_follow_update_order() {
    // Every update hits one of two rows: None keeps the last, the others
    // combine all of them in order.
    for r in REDUCTIONS {
        let g = scatter_nd_graph(&[3, 5], &[9, 1], &[9, 5], D::F32, r, D::F32);
        let feeds = [
            feed("d", random_values(15, D::F32, -1.0, 1.0, 3)),
            feed("i", vec![0., 2., 0., 0., 2., -3., 2., 0., 2.]),
            feed("u", random_values(45, D::F32, -1.0, 1.0, 4)),
        ];
        check(
            &format!("ScatterNd {r:?} duplicates"),
            &g,
            &feeds,
            red_tol(r, D::F32),
        );
    }
}

#[test]
fn scatter_nd_max_min_ignore_nan_like_rlx_cpu() {
    // f32::max/min: a NaN update never wins, a NaN slot takes the best
    // update, an all-NaN set of updates leaves the slot as it was.
    let nan = f32::NAN;
    for r in [R::Max, R::Min, R::None, R::Add] {
        let g = scatter_nd_graph(&[4], &[6, 1], &[6], D::F32, r, D::F32);
        let feeds = [
            feed("d", vec![nan, 0.5, -0.25, nan]),
            feed("i", vec![0., 0., 1., 1., 2., 0.]),
            feed("u", vec![nan, 0.75, nan, 0.25, nan, -0.5]),
        ];
        check(&format!("ScatterNd {r:?} NaN"), &g, &feeds, EXACT);
    }
}

#[test]
fn scatter_nd_larger() {
    // 300 updates of 17-element rows into 64 rows: many duplicates.
    for r in REDUCTIONS {
        let g = scatter_nd_graph(&[64, 17], &[300, 1], &[300, 17], D::F32, r, D::F32);
        let feeds = [
            feed("d", random_values(64 * 17, D::F32, -1.0, 1.0, 5)),
            feed("i", ints(300, 0, 64, 6)),
            // Near 1 so that long products stay representable.
            feed("u", random_values(300 * 17, D::F32, 0.9, 1.1, 7)),
        ];
        check(
            &format!("ScatterNd {r:?} large"),
            &g,
            &feeds,
            red_tol(r, D::F32),
        );
    }
}

// ── ScatterElements ───────────────────────────────────────────────────

fn scatter_elements_graph(dd: &[usize], id: &[usize], idt: D, axis: i32, r: R, dt: D) -> Graph {
    let mut g = Graph::new("scatter_elements");
    let d = g.input("d", s(dd, dt));
    let i = g.input("i", s(id, idt));
    let u = g.input("u", s(id, dt));
    let o = g.scatter_elements(d, i, u, axis, r);
    g.set_outputs(vec![o]);
    g
}

#[test]
fn scatter_elements_parity() {
    // (data, indices, axis): ranks 1-4, indices smaller than data off-axis,
    // negative axes.
    let cases: [(&[usize], &[usize], i32); 8] = [
        (&[7], &[5], 0),
        (&[1], &[3], 0),
        (&[5, 3], &[4, 3], 0),
        (&[3, 5], &[2, 4], 1),
        (&[3, 5], &[3, 7], -1),
        (&[2, 3, 5], &[2, 2, 5], 1),
        (&[4, 3, 2], &[4, 3, 3], 2),
        (&[2, 3, 2, 5], &[2, 3, 2, 3], -2),
    ];
    for dt in FLOATS {
        for r in REDUCTIONS {
            for (seed, (dd, id, axis)) in cases.iter().enumerate() {
                let ax = if *axis < 0 {
                    *axis + dd.len() as i32
                } else {
                    *axis
                } as usize;
                let dim = dd[ax] as i64;
                // Negative indices become 0 on rlx-cpu; past the end is
                // dropped (rank 1) or clamped (rank >= 2).
                let idx = ints(n_of(id), -2, dim + 2, 200 + seed as u64);
                for idt in INDEX_DTYPES {
                    let g = scatter_elements_graph(dd, id, idt, *axis, r, dt);
                    let feeds = [
                        feed("d", random_values(n_of(dd), dt, -1.0, 1.0, seed as u64)),
                        feed("i", idx.clone()),
                        feed(
                            "u",
                            random_values(n_of(id), dt, -1.0, 1.0, 70 + seed as u64),
                        ),
                    ];
                    check(
                        &format!(
                            "ScatterElements {r:?} {dt:?} idx {idt:?} {dd:?} {id:?} axis {axis}"
                        ),
                        &g,
                        &feeds,
                        red_tol(r, dt),
                    );
                }
            }
        }
    }
}

#[test]
fn scatter_elements_zeroes_non_finite_data_like_rlx_cpu() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    for r in REDUCTIONS {
        for (dd, id) in [(&[6usize][..], &[2usize][..]), (&[2, 3][..], &[1, 3][..])] {
            let g = scatter_elements_graph(dd, id, D::F32, 0, r, D::F32);
            let n = n_of(id);
            let feeds = [
                feed("d", vec![nan, 0.5, inf, -inf, 0.25, nan]),
                feed("i", vec![0.0; n]),
                feed("u", random_values(n, D::F32, -1.0, 1.0, 8)),
            ];
            check(
                &format!("ScatterElements {r:?} non-finite {dd:?}"),
                &g,
                &feeds,
                EXACT,
            );
        }
    }
}

// ── GatherNd ──────────────────────────────────────────────────────────

fn gather_nd_graph(dd: &[usize], id: &[usize], b: usize, idt: D, dt: D) -> Graph {
    let k = *id.last().unwrap();
    let mut od = id[..id.len() - 1].to_vec();
    od.extend_from_slice(&dd[b + k..]);
    let mut g = Graph::new("gather_nd");
    let d = g.input("d", s(dd, dt));
    let i = g.input("i", s(id, idt));
    let o = g.gather_nd(d, i, b as i32, s(&od, dt));
    g.set_outputs(vec![o]);
    g
}

#[test]
fn gather_nd_parity() {
    // (data, indices, batch_dims)
    let cases: [(&[usize], &[usize], usize); 8] = [
        (&[7], &[3, 1], 0),
        (&[5, 3], &[4, 2], 0),
        (&[5, 3], &[2, 2, 1], 0),
        (&[1, 1], &[1, 2], 0),
        (&[3, 4, 2], &[5, 3], 0),
        (&[2, 3, 5], &[2, 4, 1], 1),
        (&[3, 2, 5, 2], &[3, 2, 3, 1], 2),
        (&[2, 5, 3, 2], &[2, 7, 2], 1),
    ];
    for dt in FLOATS {
        for idt in INDEX_DTYPES {
            for (seed, (dd, id, b)) in cases.iter().enumerate() {
                let k = *id.last().unwrap();
                let mut idx = Vec::new();
                for t in 0..n_of(id) / k {
                    for (m, &dim) in dd[*b..*b + k].iter().enumerate() {
                        let dim = dim as i64;
                        idx.extend(ints(
                            1,
                            -dim - 2,
                            dim + 2,
                            (seed * 1000 + t * 10 + m) as u64,
                        ));
                    }
                }
                let g = gather_nd_graph(dd, id, *b, idt, dt);
                let feeds = [
                    feed("d", random_values(n_of(dd), dt, -1.0, 1.0, seed as u64)),
                    feed("i", idx),
                ];
                check(
                    &format!("GatherNd {dt:?} idx {idt:?} {dd:?} {id:?} batch {b}"),
                    &g,
                    &feeds,
                    EXACT,
                );
            }
        }
    }
}

// ── GatherElements ────────────────────────────────────────────────────

fn gather_elements_graph(dd: &[usize], id: &[usize], idt: D, axis: i32, dt: D) -> Graph {
    let mut g = Graph::new("gather_elements");
    let d = g.input("d", s(dd, dt));
    let i = g.input("i", s(id, idt));
    let o = g.gather_elements(d, i, axis);
    g.set_outputs(vec![o]);
    g
}

#[test]
fn gather_elements_parity() {
    // (data, indices, axis): ranks 1-4; indices larger than data off-axis
    // (rlx-cpu clamps those coordinates), smaller, negative axes.
    let cases: [(&[usize], &[usize], i32); 8] = [
        (&[7], &[11], 0),
        (&[1], &[2], 0),
        (&[5, 3], &[4, 3], 0),
        (&[3, 5], &[3, 8], 1),
        (&[3, 5], &[4, 2], -1),
        (&[2, 3, 5], &[2, 3, 5], 1),
        (&[4, 3, 2], &[2, 2, 7], 2),
        (&[2, 3, 2, 5], &[2, 3, 4, 5], -2),
    ];
    // rlx-ir infers GatherElements' output as the indices' shape *and
    // dtype*, and the output holds data values, so data, indices and output
    // share one dtype (the plugin refuses a mismatch, see below).
    for dt in [D::F32, D::F16, D::BF16, D::I32, D::I64] {
        let idt = dt;
        for (seed, (dd, id, axis)) in cases.iter().enumerate() {
            let ax = if *axis < 0 {
                *axis + dd.len() as i32
            } else {
                *axis
            } as usize;
            let dim = dd[ax] as i64;
            let idx = ints(n_of(id), -dim - 2, dim + 2, 300 + seed as u64);
            let data = match dt {
                D::I32 | D::I64 => ints(n_of(dd), -1 << 20, 1 << 20, seed as u64),
                _ => random_values(n_of(dd), dt, -1.0, 1.0, seed as u64),
            };
            let g = gather_elements_graph(dd, id, idt, *axis, dt);
            let feeds = [feed("d", data), feed("i", idx)];
            check(
                &format!("GatherElements {dt:?} idx {idt:?} {dd:?} {id:?} axis {axis}"),
                &g,
                &feeds,
                EXACT,
            );
        }
    }
}

// ── Refusals ──────────────────────────────────────────────────────────

#[test]
fn unsupported_variants_fail_at_compile_naming_the_node() {
    let p = mlx();
    let compile_err = |g: &Graph| {
        let text = rlx_ir::rlxmodel::to_text(g).unwrap();
        p.compile(&text, Mode::Lazy)
            .err()
            .expect("the graph must be refused at compile")
    };

    // An out-of-range axis (rlx-cpu silently clamps it).
    let g = gather_elements_graph(&[3, 4], &[3, 4], D::F32, 2, D::F32);
    let e = compile_err(&g);
    assert!(
        e.message.contains("node %2")
            && e.message.contains("GatherElements")
            && e.message.contains("not supported"),
        "{e}"
    );
    let g = scatter_elements_graph(&[3, 4], &[3, 4], D::F32, -3, R::Add, D::F32);
    let e = compile_err(&g);
    assert!(
        e.message.contains("node %3") && e.message.contains("ScatterElements"),
        "{e}"
    );

    // GatherNd whose batch extents differ between data and indices.
    let mut g = Graph::new("bad_batch");
    let d = g.input("d", s(&[2, 3, 4], D::F32));
    let i = g.input("i", s(&[3, 1], D::F32));
    let o = g.gather_nd(d, i, 1, s(&[3, 4], D::F32));
    g.set_outputs(vec![o]);
    let e = compile_err(&g);
    assert!(
        e.message.contains("node %2")
            && e.message.contains("GatherNd")
            && e.message.contains("not supported"),
        "{e}"
    );

    // `g.gather_elements` with i64 indices declares an i64 output for f32
    // data: rlx-cpu copies f32 bits into it; the plugin refuses.
    let mut g = Graph::new("ge_dtype");
    let d = g.input("d", s(&[3, 4], D::F32));
    let i = g.input("i", s(&[3, 4], D::I64));
    let o = g.gather_elements(d, i, 1);
    g.set_outputs(vec![o]);
    let e = compile_err(&g);
    assert!(
        e.message.contains("node %2") && e.message.contains("dtype change is not supported"),
        "{e}"
    );

    // Indices of a dtype the plugin does not read (u8).
    let mut g = Graph::new("u8_idx");
    let d = g.input("d", s(&[4], D::F32));
    let i = g.input("i", s(&[2, 1], D::U8));
    let u = g.input("u", s(&[2], D::F32));
    let o = g.scatter_nd(d, i, u, R::None);
    g.set_outputs(vec![o]);
    let e = compile_err(&g);
    assert!(
        e.message.contains("node %3")
            && e.message.contains("ScatterNd")
            && e.message.contains("not supported"),
        "{e}"
    );
}
