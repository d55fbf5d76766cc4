//! Ordering and selection (lower/order.rs), StopGradient (lower/shape.rs)
//! and DotGeneral (lower/contract.rs) on the MLX plugin: Reverse,
//! StopGradient, Cumsum, ArgMax/ArgMin, TopK and DotGeneral, checked against
//! rlx-runtime's CPU backend in lazy, eager and compiled modes.
//!
//! Where the CPU reference cannot judge (rlx-cpu 0.2.19 runs Cumsum only on
//! the last axis, and DotGeneral only in its plain 2-D form — rlx-ir's
//! verifier infers every other DotGeneral's shape as the lhs shape and
//! rejects the graph), the reference is either a CPU graph computing the
//! same thing from ops it does run (Transpose + last-axis Cumsum; batched
//! MatMul), or an independent plain-Rust reference, which is itself first
//! checked against the CPU on the forms the CPU runs.

use rlx_ir::{DType as IrDType, Graph, NodeId, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::*;

use IrDType::{BF16, F16, F32, F64, I32, I64};

fn s(d: &[usize], t: IrDType) -> Shape {
    Shape::new(d, t)
}

/// Index outputs and pure data movement must match exactly.
const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

fn node(g: &mut Graph, op: Op, inputs: Vec<NodeId>, shape: Shape) -> NodeId {
    g.add_node(op, inputs, shape)
}

/// Seeded integers in [lo, hi] for every leaf (for integer dtypes, and for
/// float inputs with many ties).
fn int_feeds(g: &Graph, seed: u64, lo: i32, hi: i32) -> Vec<Feed> {
    leaves(g)
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let n: usize = l.dims.iter().product();
            let v = random_values(n, F32, 0.0, 1.0, seed + i as u64 * 101);
            Feed {
                name: l.name.clone(),
                values: v
                    .iter()
                    .map(|u| (lo + (u * (hi - lo + 1) as f32).floor() as i32).min(hi) as f32)
                    .collect(),
            }
        })
        .collect()
}

/// The CPU backend's answer for `feeds`, checked on the plugin in every mode.
fn parity_with(what: &str, g: &Graph, feeds: &[Feed], tol: Tol) {
    let reference = run_cpu(g, feeds);
    check_against(what, g, feeds, &reference, tol);
}

fn row_major_strides(dims: &[usize]) -> Vec<usize> {
    let mut st = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * dims[i + 1];
    }
    st
}

fn unravel(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        idx[i] = flat % dims[i];
        flat /= dims[i];
    }
    idx
}

// ───────────────────────────── Reverse / StopGradient ──────────────────────

const REVERSE_CASES: &[(&[usize], &[usize])] = &[
    (&[1], &[0]),
    (&[7], &[0]),
    (&[7], &[]),
    (&[3, 5], &[1]),
    (&[3, 5], &[0, 1]),
    (&[4, 1, 13], &[0, 2]),
    (&[4, 1, 13], &[1]),
    // rlx-cpu flips a repeated axis once (a mask), in any listed order.
    (&[2, 3, 5, 9], &[3, 1, 3]),
    (&[2, 3, 5, 9], &[0, 2]),
    (&[2, 1, 3, 2, 11], &[4, 0, 3]),
];

fn movement_graph(dims: &[usize], dt: IrDType, op: Op) -> Graph {
    let mut g = Graph::new("move");
    let x = g.input("x", s(dims, dt));
    let y = node(&mut g, op, vec![x], s(dims, dt));
    g.set_outputs(vec![y]);
    g
}

#[test]
fn reverse_parity_every_rank_and_dtype() {
    for dt in [F32, F16, BF16, F64, I32, I64] {
        for (i, (dims, axes)) in REVERSE_CASES.iter().enumerate() {
            let g = movement_graph(
                dims,
                dt,
                Op::Reverse {
                    axes: axes.to_vec(),
                },
            );
            let what = format!("reverse {dt:?} {dims:?} axes {axes:?}");
            if matches!(dt, I32 | I64) {
                parity_with(&what, &g, &int_feeds(&g, 17 + i as u64, -50, 50), EXACT);
            } else {
                // Pure data movement: exact in every dtype.
                check_parity(&what, &g, 17 + i as u64, EXACT);
            }
        }
    }
}

#[test]
fn stop_gradient_is_identity_in_every_dtype() {
    for dt in [F32, F16, BF16, F64, I32, I64] {
        for (i, dims) in [&[1][..], &[7], &[3, 5], &[2, 3, 5, 9], &[2, 1, 3, 2, 11]]
            .iter()
            .enumerate()
        {
            let g = movement_graph(dims, dt, Op::StopGradient);
            let what = format!("stop_gradient {dt:?} {dims:?}");
            if matches!(dt, I32 | I64) {
                parity_with(&what, &g, &int_feeds(&g, 5 + i as u64, -50, 50), EXACT);
            } else {
                check_parity(&what, &g, 5 + i as u64, EXACT);
            }
        }
    }
}

// ───────────────────────────────── Cumsum ──────────────────────────────────

/// Tolerance of a cumulative sum of values in [-1, 1). f32: the CPU and MLX
/// both scan in f32 (and agree exactly on the last axis); against the f64
/// reference (prefixes up to 131 terms, partial sums up to ~10) the f32
/// accumulation stays near 1e-6, inside the f32 default. f16/bf16: both
/// accumulate in f32 (rlx-cpu widens half dtypes; the plugin casts up before
/// the scan) and the plugin rounds the result once to the dtype: half an ulp,
/// inside the per-dtype default. Integers: exact.
fn cumsum_tol(dt: IrDType) -> Tol {
    match dt {
        I32 | I64 => EXACT,
        _ => Tol::for_dtype(dt),
    }
}

fn cumsum_graph(dims: &[usize], dt: IrDType, axis: i32, exclusive: bool) -> Graph {
    let mut g = Graph::new("cumsum");
    let x = g.input("x", s(dims, dt));
    let y = node(&mut g, Op::Cumsum { axis, exclusive }, vec![x], s(dims, dt));
    g.set_outputs(vec![y]);
    g
}

#[test]
fn cumsum_last_axis_parity() {
    let shapes: &[&[usize]] = &[
        &[1],
        &[7],
        &[3, 13],
        &[2, 3, 17],
        &[2, 1, 3, 5],
        &[2, 1, 2, 3, 9],
        &[3, 257],
    ];
    for dt in [F32, F16, BF16, I32, I64] {
        for (i, dims) in shapes.iter().enumerate() {
            for exclusive in [false, true] {
                // The last axis, spelled both ways.
                for axis in [-1, dims.len() as i32 - 1] {
                    let g = cumsum_graph(dims, dt, axis, exclusive);
                    let what = format!("cumsum {dt:?} {dims:?} axis {axis} exclusive={exclusive}");
                    let tol = cumsum_tol(dt);
                    if dims == &[1] && exclusive {
                        // An exclusive scan of one element is exactly 0: the
                        // harness refuses an all-zero reference, so assert it.
                        let feeds = int_feeds(&g, 1, 1, 5);
                        assert_eq!(run_cpu(&g, &feeds)[0], vec![0.0], "{what}: CPU");
                        for mode in rlx_plugin_tests::parity::modes_for(&g) {
                            let out = run_mlx(&g, &feeds, mode).unwrap();
                            assert_eq!(out[0].to_f32_vec().unwrap(), vec![0.0], "{what}");
                        }
                    } else if matches!(dt, I32 | I64) {
                        parity_with(&what, &g, &int_feeds(&g, 3 + i as u64, -9, 9), tol);
                    } else {
                        check_parity(&what, &g, 3 + i as u64, tol);
                    }
                }
            }
        }
    }
}

/// Independent reference: a cumulative sum along any axis, in f64.
fn cumsum_ref(x: &[f32], dims: &[usize], axis: usize, exclusive: bool) -> Vec<f32> {
    let st = row_major_strides(dims);
    (0..x.len())
        .map(|flat| {
            let idx = unravel(flat, dims);
            let base = flat - idx[axis] * st[axis];
            let end = if exclusive { idx[axis] } else { idx[axis] + 1 };
            (0..end).map(|j| x[base + j * st[axis]] as f64).sum::<f64>() as f32
        })
        .collect()
}

#[test]
fn cumsum_any_axis() {
    // rlx-cpu 0.2.19 asserts the last axis. The reference is a CPU graph that
    // moves the axis last (Transpose), scans there, and moves it back — and
    // an independent f64 reference, which must agree with that CPU graph.
    let cases: &[(&[usize], i32)] = &[
        (&[5, 3], 0),
        (&[5, 3], -2),
        (&[4, 7, 3], 1),
        (&[4, 7, 3], 0),
        (&[2, 11, 1, 3], 1),
        (&[2, 11, 1, 3], -3),
        (&[3, 2, 5, 1, 4], 2),
        (&[3, 2, 5, 1, 4], 0),
        (&[131, 2], 0),
    ];
    for dt in [F32, F16, BF16, I32, I64] {
        for (i, (dims, axis)) in cases.iter().enumerate() {
            for exclusive in [false, true] {
                let rank = dims.len();
                let ax = if *axis < 0 {
                    (*axis + rank as i32) as usize
                } else {
                    *axis as usize
                };
                let g = cumsum_graph(dims, dt, *axis, exclusive);
                let what = format!("cumsum {dt:?} {dims:?} axis {axis} exclusive={exclusive}");
                let feeds = if matches!(dt, I32 | I64) {
                    int_feeds(&g, 40 + i as u64, -9, 9)
                } else {
                    random_feeds(&g, 40 + i as u64)
                };

                // CPU: transpose `ax` last, scan, transpose back.
                let mut perm: Vec<usize> = (0..rank).filter(|&d| d != ax).collect();
                perm.push(ax);
                let mut inv = vec![0; rank];
                for (p, &d) in perm.iter().enumerate() {
                    inv[d] = p;
                }
                let tdims: Vec<usize> = perm.iter().map(|&d| dims[d]).collect();
                let mut c = Graph::new("cumsum_via_transpose");
                let x = c.input("x", s(dims, dt));
                let t = node(&mut c, Op::Transpose { perm }, vec![x], s(&tdims, dt));
                let cs = node(
                    &mut c,
                    Op::Cumsum {
                        axis: -1,
                        exclusive,
                    },
                    vec![t],
                    s(&tdims, dt),
                );
                let y = node(&mut c, Op::Transpose { perm: inv }, vec![cs], s(dims, dt));
                c.set_outputs(vec![y]);
                let cpu = run_cpu(&c, &feeds);

                let tol = cumsum_tol(dt);
                let indep = cumsum_ref(&feeds[0].values, dims, ax, exclusive);
                assert_close(
                    &format!("{what}: CPU graph vs f64 reference"),
                    &cpu[0],
                    &indep,
                    tol,
                );
                check_against(&what, &g, &feeds, &cpu, tol);
            }
        }
    }
}

// ───────────────────────────── ArgMax / ArgMin ─────────────────────────────

fn arg_graph(dims: &[usize], dt: IrDType, axis: usize, keep_dim: bool, is_max: bool) -> Graph {
    let mut out: Vec<usize> = dims.to_vec();
    if keep_dim {
        out[axis] = 1;
    } else {
        out.remove(axis);
    }
    let op = if is_max {
        Op::ArgMax { axis, keep_dim }
    } else {
        Op::ArgMin { axis, keep_dim }
    };
    let mut g = Graph::new("arg");
    let x = g.input("x", s(dims, dt));
    // rlx-ir infers the index output's dtype as the input's.
    let y = node(&mut g, op, vec![x], s(&out, dt));
    g.set_outputs(vec![y]);
    g
}

#[test]
fn argmax_argmin_parity_every_axis() {
    let shapes: &[&[usize]] = &[
        &[7],
        &[1, 5],
        &[3, 13],
        &[4, 1, 9],
        &[2, 3, 5, 7],
        &[2, 1, 3, 2, 11],
        &[3, 300],
    ];
    for dt in [F32, F16, BF16, I32] {
        for (i, dims) in shapes.iter().enumerate() {
            for axis in 0..dims.len() {
                if dims[axis] == 1 {
                    // The answer is all zeros, which the harness (rightly)
                    // refuses as a reference.
                    continue;
                }
                if matches!(dt, BF16) && dims[axis] > 256 {
                    // bf16 cannot hold indices past 256 exactly.
                    continue;
                }
                for keep_dim in [false, true] {
                    for is_max in [true, false] {
                        let g = arg_graph(dims, dt, axis, keep_dim, is_max);
                        let what = format!(
                            "{} {dt:?} {dims:?} axis {axis} keep_dim={keep_dim}",
                            if is_max { "argmax" } else { "argmin" }
                        );
                        let seed = 100 + i as u64 * 7 + axis as u64;
                        if dt == I32 {
                            // Small integers: many ties, first hit wins.
                            parity_with(&what, &g, &int_feeds(&g, seed, -3, 3), EXACT);
                        } else {
                            // bf16/f16 rounding of [-1, 1) makes ties too.
                            check_parity(&what, &g, seed, EXACT);
                        }
                    }
                }
            }
        }
    }
}

/// Rows with NaN, ±inf, ±0 and ties (rlx's first-hit, NaN-at-0 rule).
fn special_rows() -> (Vec<f32>, usize, usize) {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let rows = vec![
        nan, 1.0, 2.0, 2.0, 0.0, //
        1.0, nan, 3.0, 3.0, -1.0, //
        -inf, -inf, 5.0, inf, -inf, //
        0.0, -0.0, 0.0, 1.0, 1.0, //
        -inf, -inf, -inf, -inf, -inf, //
        nan, nan, nan, nan, nan, //
        2.0, nan, -inf, inf, nan, //
    ];
    (rows, 7, 5)
}

#[test]
fn argmax_argmin_special_values() {
    let (rows, r, c) = special_rows();
    for dt in [F32, F16, BF16] {
        let feeds = vec![Feed {
            name: "x".into(),
            values: round_to(&rows, dt),
        }];
        for is_max in [true, false] {
            let g = arg_graph(&[r, c], dt, 1, false, is_max);
            let cpu = run_cpu(&g, &feeds);
            // What rlx-cpu does, spelled out (strict compare from element 0).
            let want: Vec<f32> = if is_max {
                vec![0., 2., 3., 3., 0., 0., 3.]
            } else {
                vec![0., 4., 0., 0., 0., 0., 2.]
            };
            assert_eq!(cpu[0], want, "rlx-cpu's rule for {dt:?} is_max={is_max}");
            check_against(
                &format!("arg{} special {dt:?}", if is_max { "max" } else { "min" }),
                &g,
                &feeds,
                &cpu,
                EXACT,
            );
        }
        // The same rows along axis 0 (transposed input).
        let t: Vec<f32> = (0..c * r).map(|i| rows[(i % r) * c + i / r]).collect();
        let feeds = vec![Feed {
            name: "x".into(),
            values: round_to(&t, dt),
        }];
        for is_max in [true, false] {
            let g = arg_graph(&[c, r], dt, 0, true, is_max);
            parity_with(
                &format!("arg special axis 0 {dt:?} {is_max}"),
                &g,
                &feeds,
                EXACT,
            );
        }
    }
}

// ─────────────────────────────────── TopK ──────────────────────────────────

fn topk_graph(dims: &[usize], din: IrDType, dout: IrDType, k: usize) -> Graph {
    let mut out = dims.to_vec();
    *out.last_mut().unwrap() = k;
    let mut g = Graph::new("topk");
    let x = g.input("x", s(dims, din));
    let y = node(&mut g, Op::TopK { k }, vec![x], s(&out, dout));
    g.set_outputs(vec![y]);
    g
}

#[test]
fn topk_parity() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[7], &[1, 3, 7]),
        (&[1, 13], &[1, 5, 13]),
        (&[3, 2], &[1, 2]),
        (&[4, 1, 9], &[2, 9]),
        (&[2, 3, 5, 17], &[1, 4, 17]),
        (&[2, 1, 3, 2, 11], &[3, 11]),
        (&[3, 200], &[8, 200]),
    ];
    // (input dtype, index dtype): rlx-cpu writes f32-encoded indices (also in
    // the dtypes its arena widens to f32) or i64.
    let dtypes = [
        (F32, F32),
        (F16, F16),
        (BF16, BF16),
        (F32, I64),
        (F32, I32),
        (F16, F32),
        (I32, I32),
        (I32, I64),
    ];
    for (din, dout) in dtypes {
        for (i, (dims, ks)) in cases.iter().enumerate() {
            for &k in ks.iter() {
                if dout == BF16 && *dims.last().unwrap() > 256 {
                    continue; // bf16 cannot hold indices past 256 exactly
                }
                let g = topk_graph(dims, din, dout, k);
                let what = format!("topk {din:?}->{dout:?} {dims:?} k={k}");
                let seed = 200 + i as u64;
                if din == I32 {
                    // Many ties: sorted descending, the smaller index first.
                    parity_with(&what, &g, &int_feeds(&g, seed, -4, 4), EXACT);
                } else {
                    check_parity(&what, &g, seed, EXACT);
                }
            }
        }
    }
}

#[test]
fn topk_special_values() {
    let (rows, r, c) = special_rows();
    for dt in [F32, F16, BF16] {
        let feeds = vec![Feed {
            name: "x".into(),
            values: round_to(&rows, dt),
        }];
        for k in [1, 3, 5] {
            let g = topk_graph(&[r, c], dt, F32, k);
            let cpu = run_cpu(&g, &feeds);
            if k == 5 {
                // rlx-cpu's repeated-argmax-with-masking, spelled out: a NaN at
                // element 0 first, other NaNs and -inf never, leftover slots 0.
                let want = vec![
                    0., 2., 3., 1., 4., //
                    2., 3., 0., 4., 0., //
                    3., 2., 0., 0., 0., //
                    3., 4., 0., 1., 2., //
                    0., 0., 0., 0., 0., //
                    0., 0., 0., 0., 0., //
                    3., 0., 0., 0., 0., //
                ];
                assert_eq!(cpu[0], want, "rlx-cpu's TopK rule for {dt:?}");
            }
            check_against(
                &format!("topk special {dt:?} k={k}"),
                &g,
                &feeds,
                &cpu,
                EXACT,
            );
        }
    }
}

// ──────────────────────────────── DotGeneral ───────────────────────────────

struct Dg {
    l: Vec<usize>,
    r: Vec<usize>,
    lc: Vec<usize>,
    rc: Vec<usize>,
    lb: Vec<usize>,
    rb: Vec<usize>,
}

impl Dg {
    fn lfree(&self) -> Vec<usize> {
        (0..self.l.len())
            .filter(|i| !self.lc.contains(i) && !self.lb.contains(i))
            .collect()
    }
    fn rfree(&self) -> Vec<usize> {
        (0..self.r.len())
            .filter(|i| !self.rc.contains(i) && !self.rb.contains(i))
            .collect()
    }
    /// rlx's (XLA's) output order: batch, lhs free, rhs free.
    fn out_dims(&self) -> Vec<usize> {
        self.lb
            .iter()
            .map(|&i| self.l[i])
            .chain(self.lfree().iter().map(|&i| self.l[i]))
            .chain(self.rfree().iter().map(|&i| self.r[i]))
            .collect()
    }
    fn contracted(&self) -> usize {
        self.lc.iter().map(|&i| self.l[i]).product()
    }
    fn graph(&self, dt: IrDType) -> Graph {
        let mut g = Graph::new("dot_general");
        let a = g.input("a", s(&self.l, dt));
        let b = g.param("b", s(&self.r, dt));
        let y = node(
            &mut g,
            Op::DotGeneral {
                lhs_contracting: self.lc.clone(),
                rhs_contracting: self.rc.clone(),
                lhs_batch: self.lb.clone(),
                rhs_batch: self.rb.clone(),
            },
            vec![a, b],
            s(&self.out_dims(), dt),
        );
        g.set_outputs(vec![y]);
        g
    }
    /// Independent reference: naive loops in f64 over the output and the
    /// contracted indices.
    fn reference(&self, a: &[f32], b: &[f32]) -> Vec<f32> {
        let out = self.out_dims();
        let (lfree, rfree) = (self.lfree(), self.rfree());
        let (ls, rs) = (row_major_strides(&self.l), row_major_strides(&self.r));
        let cdims: Vec<usize> = self.lc.iter().map(|&i| self.l[i]).collect();
        let n_out: usize = out.iter().product();
        (0..n_out)
            .map(|flat| {
                let o = unravel(flat, &out);
                let mut li = vec![0; self.l.len()];
                let mut ri = vec![0; self.r.len()];
                let nb = self.lb.len();
                for (j, (&x, &y)) in self.lb.iter().zip(&self.rb).enumerate() {
                    li[x] = o[j];
                    ri[y] = o[j];
                }
                for (j, &x) in lfree.iter().enumerate() {
                    li[x] = o[nb + j];
                }
                for (j, &y) in rfree.iter().enumerate() {
                    ri[y] = o[nb + lfree.len() + j];
                }
                let mut acc = 0f64;
                for c in 0..self.contracted() {
                    let ci = unravel(c, &cdims);
                    for (j, (&x, &y)) in self.lc.iter().zip(&self.rc).enumerate() {
                        li[x] = ci[j];
                        ri[y] = ci[j];
                    }
                    let lf: usize = li.iter().zip(&ls).map(|(i, s)| i * s).sum();
                    let rf: usize = ri.iter().zip(&rs).map(|(i, s)| i * s).sum();
                    acc += a[lf] as f64 * b[rf] as f64;
                }
                acc as f32
            })
            .collect()
    }
}

fn dg(l: &[usize], r: &[usize], lc: &[usize], rc: &[usize], lb: &[usize], rb: &[usize]) -> Dg {
    Dg {
        l: l.to_vec(),
        r: r.to_vec(),
        lc: lc.to_vec(),
        rc: rc.to_vec(),
        lb: lb.to_vec(),
        rb: rb.to_vec(),
    }
}

/// A dot product of up to 35 terms of values in [-1, 1). f32: f32
/// accumulation against an f64 reference (or the CPU's own f32 order) stays
/// near 1e-6, inside the f32 default. f16/bf16: both sides accumulate in f32
/// (rlx-cpu widens half dtypes; the plugin casts up before the matmul) and
/// round once to the dtype: half an ulp, inside the per-dtype default.
fn dot_tol(dt: IrDType) -> Tol {
    Tol::for_dtype(dt)
}

#[test]
fn dot_general_plain_2d_parity() {
    // The one form rlx-cpu runs (rewritten to MatMul): the CPU judges, and
    // it also validates the independent reference used below.
    for dt in [F32, F16, BF16] {
        for (m, k, n) in [(1, 1, 1), (3, 5, 7), (1, 13, 2), (17, 9, 1), (8, 33, 11)] {
            let d = dg(&[m, k], &[k, n], &[1], &[0], &[], &[]);
            let g = d.graph(dt);
            let what = format!("dot_general 2d {dt:?} {m}x{k}x{n}");
            let feeds = random_feeds(&g, 300 + m as u64 + k as u64);
            let cpu = run_cpu(&g, &feeds);
            let indep = d.reference(&feeds[0].values, &feeds[1].values);
            assert_close(
                &format!("{what}: CPU vs reference"),
                &cpu[0],
                &indep,
                dot_tol(dt),
            );
            check_against(&what, &g, &feeds, &cpu, dot_tol(dt));
        }
    }
}

#[test]
fn dot_general_batched_matches_cpu_batched_matmul() {
    // [B, M, K] x [B, K, N] with batch (0, 0), contracting (2, 1) is what
    // rlx-cpu's batched MatMul computes: a CPU reference for a batched form.
    // The CPU graph takes `b` as an Input: rlx-cpu 0.2.19 returns wrong
    // values for a 3-D MatMul whose rhs is an f16/bf16 *Param* (f32 is fine;
    // as an Input all three are right).
    for dt in [F32, F16, BF16] {
        for (b, m, k, n) in [(1, 3, 5, 7), (3, 1, 7, 2), (5, 4, 9, 3)] {
            let d = dg(&[b, m, k], &[b, k, n], &[2], &[1], &[0], &[0]);
            let g = d.graph(dt);
            let feeds = random_feeds(&g, 400 + b as u64 * 13 + k as u64);
            let mut c = Graph::new("bmm");
            let x = c.input("a", s(&[b, m, k], dt));
            let w = c.input("b", s(&[b, k, n], dt));
            let y = c.matmul(x, w, s(&[b, m, n], dt));
            c.set_outputs(vec![y]);
            let cpu = run_cpu(&c, &feeds);
            let indep = d.reference(&feeds[0].values, &feeds[1].values);
            let tol = dot_tol(dt);
            let what = format!("dot_general batched {dt:?} {b}x{m}x{k}x{n}");
            assert_close(&format!("{what}: CPU vs reference"), &cpu[0], &indep, tol);
            check_against(&what, &g, &feeds, &cpu, tol);
        }
    }
}

#[test]
fn dot_general_any_dims() {
    // Not judgeable by rlx-cpu 0.2.19 (its verifier rejects these graphs):
    // the independent reference above judges, in f64.
    let cases = [
        // contract lhs axis 0 (lhsᵀ·rhs)
        dg(&[5, 3], &[5, 7], &[0], &[0], &[], &[]),
        // contract rhs axis 1 (lhs·rhsᵀ)
        dg(&[3, 5], &[7, 5], &[1], &[1], &[], &[]),
        // batch dims in different positions on each side
        dg(&[3, 2, 5], &[5, 4, 2], &[2], &[0], &[1], &[2]),
        // two contracting dims, paired out of order
        dg(&[2, 3, 5, 7], &[5, 3, 4], &[1, 2], &[1, 0], &[], &[]),
        // two batch dims, swapped on the rhs
        dg(&[2, 3, 4, 5], &[3, 2, 5, 6], &[3], &[2], &[0, 1], &[1, 0]),
        // no contraction: outer product
        dg(&[3, 4], &[5], &[], &[], &[], &[]),
        // batch only: elementwise product
        dg(&[3, 4], &[3, 4], &[], &[], &[0, 1], &[0, 1]),
        // full contraction to a scalar
        dg(&[3, 4], &[4, 3], &[0, 1], &[1, 0], &[], &[]),
        // vector dot
        dg(&[13], &[13], &[0], &[0], &[], &[]),
        // matrix-vector with the vector on the left
        dg(&[7], &[3, 7], &[0], &[1], &[], &[]),
        // rank 5 lhs: batch (0, 2), free (1, 3), contract 4
        dg(
            &[2, 1, 3, 4, 5],
            &[2, 5, 3, 6],
            &[4],
            &[1],
            &[0, 2],
            &[0, 2],
        ),
        // rank 4 x rank 4, one batch, two contractions, odd sizes
        dg(&[3, 7, 2, 5], &[5, 3, 11, 7], &[1, 3], &[3, 0], &[0], &[1]),
    ];
    for dt in [F32, F16, BF16] {
        for (i, d) in cases.iter().enumerate() {
            let g = d.graph(dt);
            let feeds = random_feeds(&g, 500 + i as u64);
            let want = d.reference(&feeds[0].values, &feeds[1].values);
            let what = format!(
                "dot_general {dt:?} {:?}x{:?} lc {:?} rc {:?} lb {:?} rb {:?}",
                d.l, d.r, d.lc, d.rc, d.lb, d.rb
            );
            check_against(&what, &g, &feeds, &[want], dot_tol(dt));
        }
    }
}

// ──────────────────────────────── Errors ───────────────────────────────────

fn compile_error(g: &Graph) -> String {
    let text = rlx_ir::rlxmodel::to_text(g).unwrap();
    match mlx().compile(&text, Mode::Lazy) {
        Ok(_) => panic!("compiled, but should not have"),
        Err(e) => e.message,
    }
}

#[test]
fn unlowered_variants_fail_at_compile_naming_the_node() {
    // TopK with k past the axis: rlx-cpu would read index 0 for the missing
    // slots; MLX has no such answer to give.
    let g = topk_graph(&[2, 5], F32, F32, 6);
    let e = compile_error(&g);
    assert!(
        e.contains("node %1") && e.contains("TopK") && e.contains("not supported"),
        "{e}"
    );

    // ArgMax of an i64 input: rlx-cpu's kernel reads it as f32.
    let mut g = Graph::new("argmax_i64");
    let x = g.input("x", s(&[2, 5], I64));
    let y = node(
        &mut g,
        Op::ArgMax {
            axis: 1,
            keep_dim: false,
        },
        vec![x],
        s(&[2], F32),
    );
    g.set_outputs(vec![y]);
    let e = compile_error(&g);
    assert!(
        e.contains("node %1") && e.contains("ArgMax") && e.contains("not supported"),
        "{e}"
    );

    // Cumsum in f64: rlx-cpu's scan reads f64 as f32, so it is not claimed.
    let g = cumsum_graph(&[3, 4], F64, -1, false);
    let e = compile_error(&g);
    assert!(e.contains("node %1") && e.contains("Cumsum"), "{e}");

    // Reverse over an axis the input does not have: rlx-cpu skips it
    // silently; the plugin refuses the graph instead.
    let g = movement_graph(&[3, 4], F32, Op::Reverse { axes: vec![0, 2] });
    let e = compile_error(&g);
    assert!(
        e.contains("node %1") && e.contains("Reverse") && e.contains("not supported"),
        "{e}"
    );

    // DotGeneral whose contracting dims differ: an invalid graph.
    let d = dg(&[3, 4], &[5, 2], &[1], &[0], &[], &[]);
    let g = d.graph(F32);
    let e = compile_error(&g);
    assert!(
        e.contains("node %2") && e.contains("DotGeneral") && e.contains("contracting"),
        "{e}"
    );
}
