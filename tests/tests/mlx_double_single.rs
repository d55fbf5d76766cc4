//! `Op::DoubleSingle` (rlx's double-single "f64x2" arithmetic over
//! `[.., 2]` f32 `(hi, lo)` pairs) on the MLX plugin, in every mode.
//!
//! Each `DfOp` is built directly as a node over pair tensors (broadcasting,
//! batched matmul with each batch side 1 or full, sum and max with keep_dim
//! both ways, exp, sqrt) and must match rlx-runtime's CPU backend bit for
//! bit: both run rlxsl's error-free transforms in rlx-cpu's operation order.
//! So that an agreeing pair of wrong kernels cannot pass, every case is
//! also checked against the same op in plain f64 (joined `hi + lo`) to
//! 1e-12 of the output's largest magnitude (double-single keeps ~48 bits).
//!
//! Last, an f64 graph (matmul, broadcast add, sqrt, div, max, softmax, sum)
//! compiled with `NumberFormat::F64` through a `Session` on the plugin
//! (registered for `Device::Gpu`), which rewrites it into DoubleSingle
//! nodes, with CPU fallback off so the plugin runs every node; checked
//! against an f64 reference written here to 1e-11 relative (to the
//! output's largest magnitude), as rlx-runtime's
//! `double_single_runs_the_block_on_every_backend` does.

use rlx_ir::double_single::{join_f64, split_f64, DfOp};
use rlx_ir::op::{Activation, BinaryOp, ReduceOp};
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{mlx, run_cpu, run_mlx, Feed, MODES};
use rlx_runtime::{CompileOptions, Device, NumberFormat, Session};

fn pairs(logical: &[usize]) -> Shape {
    let mut d = logical.to_vec();
    d.push(2);
    Shape::new(&d, DType::F32)
}

fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

/// Seeded f64 values in [lo, hi) with all 53 bits in use (xorshift).
fn f64s(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// One `DoubleSingle(op)` node over inputs `a` (and `b`) of the given
/// logical shapes, producing logical `out`.
fn df_graph(op: DfOp, ins: &[&[usize]], out: &[usize]) -> Graph {
    let mut g = Graph::new("df");
    let ids: Vec<_> = ins
        .iter()
        .zip(["a", "b"])
        .map(|(d, name)| g.input(name, pairs(d)))
        .collect();
    let y = g.add_node(Op::DoubleSingle(op), ids, pairs(out));
    g.set_outputs(vec![y]);
    g
}

/// Row-major coordinates of flat index `i` over `dims`.
fn coords(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut c = vec![0; dims.len()];
    for ax in (0..dims.len()).rev() {
        c[ax] = i % dims[ax];
        i /= dims[ax];
    }
    c
}

/// Flat index into `d` (right-aligned, numpy broadcasting) of output
/// coordinates `c`.
fn bidx(c: &[usize], d: &[usize]) -> usize {
    let off = c.len() - d.len();
    d.iter().enumerate().fold(0, |idx, (k, &dk)| {
        idx * dk + if dk == 1 { 0 } else { c[k + off] }
    })
}

/// The op in plain f64 on the joined inputs (the independent reference).
fn f64_reference(op: &DfOp, ins: &[&[usize]], xs: &[Vec<f64>], out: &[usize]) -> Vec<f64> {
    let n = numel(out);
    let bin = |f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
        (0..n)
            .map(|i| {
                let c = coords(i, out);
                f(xs[0][bidx(&c, ins[0])], xs[1][bidx(&c, ins[1])])
            })
            .collect()
    };
    match op {
        DfOp::Add => bin(&|a, b| a + b),
        DfOp::Sub => bin(&|a, b| a - b),
        DfOp::Mul => bin(&|a, b| a * b),
        DfOp::Div => bin(&|a, b| a / b),
        DfOp::Maximum => bin(&f64::max),
        DfOp::Sqrt => xs[0].iter().map(|v| v.sqrt()).collect(),
        DfOp::Exp => xs[0].iter().map(|v| v.exp()).collect(),
        DfOp::MatMul => {
            let (a, b) = (ins[0], ins[1]);
            let (m, k, nn) = (a[a.len() - 2], a[a.len() - 1], b[b.len() - 1]);
            let batch = n / (m * nn);
            let (ab, bb) = (numel(&a[..a.len() - 2]), numel(&b[..b.len() - 2]));
            (0..n)
                .map(|i| {
                    let (bi, r, j) = (i / (m * nn), (i / nn) % m, i % nn);
                    let (a0, b0) = (
                        if ab == batch { bi * m * k } else { 0 },
                        if bb == batch { bi * k * nn } else { 0 },
                    );
                    (0..k)
                        .map(|t| xs[0][a0 + r * k + t] * xs[1][b0 + t * nn + j])
                        .sum()
                })
                .collect()
        }
        DfOp::Sum { axes, .. } | DfOp::Max { axes, .. } => {
            let x = ins[0];
            let kept: Vec<usize> = (0..x.len()).filter(|i| !axes.contains(i)).collect();
            let kept_dims: Vec<usize> = kept.iter().map(|&i| x[i]).collect();
            let mut acc = vec![
                if matches!(op, DfOp::Max { .. }) {
                    f64::NEG_INFINITY
                } else {
                    0.0
                };
                numel(&kept_dims)
            ];
            for (i, v) in xs[0].iter().enumerate() {
                let c = coords(i, x);
                let o = kept.iter().fold(0, |o, &ax| o * x[ax] + c[ax]);
                acc[o] = match op {
                    DfOp::Max { .. } => acc[o].max(*v),
                    _ => acc[o] + v,
                };
            }
            acc
        }
    }
}

/// Run `op` on the CPU backend and the plugin (every mode), require the
/// same bits, and the CPU result within 1e-12 of plain f64.
fn check(op: DfOp, ins: &[&[usize]], out: &[usize], xs: Vec<Vec<f64>>) {
    let what = format!("{op} {ins:?} -> {out:?}");
    let g = df_graph(op.clone(), ins, out);
    // The inputs as rounded to double-single are the reference's inputs.
    let pairs_in: Vec<Vec<f32>> = xs.iter().map(|x| split_f64(x)).collect();
    let joined: Vec<Vec<f64>> = pairs_in.iter().map(|p| join_f64(p)).collect();
    let feeds: Vec<Feed> = pairs_in
        .iter()
        .zip(["a", "b"])
        .map(|(v, name)| Feed {
            name: name.into(),
            values: v.clone(),
        })
        .collect();
    let cpu = run_cpu(&g, &feeds);
    assert_eq!(cpu.len(), 1, "{what}: CPU outputs");
    assert_eq!(cpu[0].len(), 2 * numel(out), "{what}: CPU output length");
    let want = f64_reference(&op, ins, &joined, out);
    let got = join_f64(&cpu[0]);
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{what}: the reference is all zeros");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * scale,
            "{what}: the CPU backend's element {i} is {g}, f64 gives {w}"
        );
    }
    for mode in MODES {
        let outs =
            run_mlx(&g, &feeds, mode).unwrap_or_else(|e| panic!("{what} [{}]: {e}", mode.name()));
        assert_eq!(outs.len(), 1, "{what} [{}]: outputs", mode.name());
        assert_eq!(
            outs[0].shape,
            g.shape(g.outputs[0])
                .dims()
                .iter()
                .map(|d| d.unwrap_static())
                .collect::<Vec<_>>()
        );
        let mlx_out = outs[0].to_f32_vec().unwrap();
        assert_eq!(
            mlx_out.len(),
            cpu[0].len(),
            "{what} [{}]: length",
            mode.name()
        );
        if let Some(i) = (0..mlx_out.len()).find(|&i| mlx_out[i].to_bits() != cpu[0][i].to_bits()) {
            panic!(
                "{what} [{}]: float {i} (element {}, {}) is {:e} ({:#010x}), the CPU backend gives {:e} ({:#010x})",
                mode.name(),
                i / 2,
                if i % 2 == 0 { "hi" } else { "lo" },
                mlx_out[i],
                mlx_out[i].to_bits(),
                cpu[0][i],
                cpu[0][i].to_bits()
            );
        }
    }
}

fn inputs(ins: &[&[usize]], lo: f64, hi: f64, seed: u64) -> Vec<Vec<f64>> {
    ins.iter()
        .enumerate()
        .map(|(i, d)| f64s(numel(d), lo, hi, seed + 101 * i as u64))
        .collect()
}

/// `(op, a, b, out)`, logical shapes.
type ElementwiseCase = (DfOp, &'static [usize], &'static [usize], &'static [usize]);

#[test]
fn elementwise_ops_match_the_cpu_bit_for_bit() {
    let cases: [ElementwiseCase; 7] = [
        (DfOp::Add, &[3, 4], &[3, 4], &[3, 4]),
        // Both operands broadcast.
        (DfOp::Sub, &[3, 1], &[4], &[3, 4]),
        (DfOp::Mul, &[2, 3, 4], &[1, 4], &[2, 3, 4]),
        (DfOp::Div, &[2, 5], &[5], &[2, 5]),
        (DfOp::Maximum, &[4, 3], &[3], &[4, 3]),
        // A rank-0 (logical) operand: a [2] pair tensor.
        (DfOp::Mul, &[5, 3], &[], &[5, 3]),
        (DfOp::Add, &[2, 1, 3, 1], &[4, 1, 5], &[2, 4, 3, 5]),
    ];
    for (k, (op, a, b, out)) in cases.into_iter().enumerate() {
        let mut xs = inputs(&[a, b], -3.0, 3.0, 10 + k as u64);
        if op == DfOp::Div {
            // Divisors away from zero.
            xs[1]
                .iter_mut()
                .for_each(|v| *v = v.signum() * (0.5 + v.abs()));
        }
        check(op, &[a, b], out, xs);
    }
}

#[test]
fn maximum_compares_hi_then_lo() {
    // Equal hi, different lo (either way round), and equal values.
    let base = [1.0f64, -2.5, 3.0, 0.75];
    let eps = [1e-12, -1e-12, 0.0, 3e-13];
    let a: Vec<f64> = base.to_vec();
    let b: Vec<f64> = base.iter().zip(&eps).map(|(x, e)| x + e).collect();
    // The pairs really differ only in lo.
    let (pa, pb) = (split_f64(&a), split_f64(&b));
    for i in 0..4 {
        assert_eq!(pa[2 * i], pb[2 * i], "hi of {i}");
    }
    check(
        DfOp::Maximum,
        &[&[4], &[4]],
        &[4],
        vec![a.clone(), b.clone()],
    );
    check(DfOp::Maximum, &[&[4], &[4]], &[4], vec![b, a]);
}

#[test]
fn sqrt_and_exp_match_the_cpu_bit_for_bit() {
    let x = f64s(24, 1e-3, 50.0, 3);
    check(DfOp::Sqrt, &[&[4, 6]], &[4, 6], vec![x]);
    // Zero takes sqrt's early return.
    check(DfOp::Sqrt, &[&[3]], &[3], vec![vec![0.0, 2.0, 1e-20]]);
    let x = f64s(42, -20.0, 20.0, 4);
    check(DfOp::Exp, &[&[2, 7, 3]], &[2, 7, 3], vec![x]);
}

#[test]
fn batched_matmul_matches_the_cpu_bit_for_bit() {
    let cases: [(&[usize], &[usize], &[usize]); 5] = [
        (&[4, 5], &[5, 3], &[4, 3]),
        // Both batches full.
        (&[3, 4, 5], &[3, 5, 6], &[3, 4, 6]),
        // a's batch broadcast (absent, then 1).
        (&[4, 5], &[2, 5, 3], &[2, 4, 3]),
        (&[1, 4, 5], &[3, 5, 2], &[3, 4, 2]),
        // b's batch broadcast, two batch axes.
        (&[2, 3, 4, 5], &[5, 6], &[2, 3, 4, 6]),
    ];
    for (k, (a, b, out)) in cases.into_iter().enumerate() {
        let xs = inputs(&[a, b], -2.0, 2.0, 20 + k as u64);
        check(DfOp::MatMul, &[a, b], out, xs);
    }
}

#[test]
fn sum_and_max_match_the_cpu_bit_for_bit_with_keep_dim_both_ways() {
    let x: &[usize] = &[2, 3, 4];
    let cases: [(Vec<usize>, bool, &[usize]); 7] = [
        (vec![1], false, &[2, 4]),
        (vec![1], true, &[2, 1, 4]),
        (vec![0, 2], true, &[1, 3, 1]),
        (vec![0, 2], false, &[3]),
        (vec![2], false, &[2, 3]),
        (vec![0, 1, 2], false, &[]),
        (vec![0, 1, 2], true, &[1, 1, 1]),
    ];
    for (k, (axes, keep_dim, out)) in cases.into_iter().enumerate() {
        let xs = inputs(&[x], -4.0, 4.0, 30 + k as u64);
        let sum = DfOp::Sum {
            axes: axes.clone(),
            keep_dim,
        };
        check(sum, &[x], out, xs.clone());
        check(DfOp::Max { axes, keep_dim }, &[x], out, xs);
    }
}

#[test]
fn bad_shapes_are_refused_naming_the_op() {
    // A matmul whose inner dims disagree, and a node that is not pairs.
    let g = df_graph(DfOp::MatMul, &[&[2, 3], &[4, 5]], &[2, 5]);
    let feeds = vec![
        Feed {
            name: "a".into(),
            values: vec![1.0; 12],
        },
        Feed {
            name: "b".into(),
            values: vec![1.0; 40],
        },
    ];
    let e = run_mlx(&g, &feeds, Mode::Lazy).unwrap_err().to_string();
    assert!(e.contains("df_matmul") && e.contains("inner dims"), "{e}");
    let mut g = Graph::new("df");
    let a = g.input("a", Shape::new(&[3, 4], DType::F32));
    let y = g.add_node(
        Op::DoubleSingle(DfOp::Sqrt),
        vec![a],
        Shape::new(&[3, 4], DType::F32),
    );
    g.set_outputs(vec![y]);
    let feeds = vec![Feed {
        name: "a".into(),
        values: vec![1.0; 12],
    }];
    let e = run_mlx(&g, &feeds, Mode::Lazy).unwrap_err().to_string();
    assert!(e.contains("df_sqrt") && e.contains("pair axis"), "{e}");
}

// ── NumberFormat::F64 through Session ───────────────────────────────────

const M: usize = 4;
const K: usize = 8;
const N: usize = 6;

fn f64_graph() -> Graph {
    let sh = |d: &[usize]| Shape::new(d, DType::F64);
    let mut g = Graph::new("f64_df");
    let x = g.input("x", sh(&[M, K]));
    let w = g.param("w", sh(&[K, N]));
    let bias = g.param("bias", sh(&[N]));
    let pos = g.param("pos", sh(&[N]));
    let h = g.matmul(x, w, sh(&[M, N]));
    let h = g.binary(BinaryOp::Add, h, bias, sh(&[M, N]));
    let q = g.binary(BinaryOp::Mul, h, h, sh(&[M, N]));
    let q = g.binary(BinaryOp::Add, q, pos, sh(&[M, N]));
    let s = g.add_node(Op::Activation(Activation::Sqrt), vec![q], sh(&[M, N]));
    let d = g.binary(BinaryOp::Div, h, s, sh(&[M, N]));
    let mx = g.binary(BinaryOp::Max, h, d, sh(&[M, N]));
    let sm = g.softmax(mx, 1, sh(&[M, N]));
    let tot = g.reduce(s, ReduceOp::Sum, vec![1], false, sh(&[M]));
    g.set_outputs(vec![sm, tot]);
    g
}

fn block_reference(x: &[f64], w: &[f64], bias: &[f64], pos: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut sm = vec![0.0; M * N];
    let mut tot = vec![0.0; M];
    for i in 0..M {
        let row: Vec<(f64, f64)> = (0..N)
            .map(|j| {
                let h = (0..K).map(|t| x[i * K + t] * w[t * N + j]).sum::<f64>() + bias[j];
                let s = (h * h + pos[j]).sqrt();
                (h.max(h / s), s)
            })
            .collect();
        let m = row.iter().map(|r| r.0).fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = row.iter().map(|r| (r.0 - m).exp()).collect();
        let z: f64 = e.iter().sum();
        for j in 0..N {
            sm[i * N + j] = e[j] / z;
        }
        tot[i] = row.iter().map(|r| r.1).sum();
    }
    (sm, tot)
}

#[test]
fn an_f64_graph_runs_in_double_single_on_the_plugin() {
    use rlx_plugin_host::backend::{register_plugin_backend, set_fallback, with_mode};
    use rlx_plugin_host::partition::Fallback;
    // Its own device slot (any but the CPU forces the rewrite), so the
    // fallback policy does not reach suites sharing the binary (gpu_all).
    register_plugin_backend(mlx(), Device::Gpu, Mode::Lazy);
    // Every node on the plugin: a node it did not take fails the compile.
    assert!(set_fallback(Device::Gpu, Fallback::Never));
    let x = f64s(M * K, -1.5, 1.5, 41);
    let w = f64s(K * N, -1.0, 1.0, 42);
    let bias = f64s(N, -0.5, 0.5, 43);
    let pos = f64s(N, 0.1, 2.0, 44);
    let (sm, tot) = block_reference(&x, &w, &bias, &pos);
    let bytes = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    for mode in MODES {
        let out = with_mode(mode, || {
            let mut opts = CompileOptions::new().number_format(NumberFormat::F64);
            opts.fusion_opts.skip_fusion = true;
            let mut cg = Session::new(Device::Gpu).compile_with(f64_graph(), &opts);
            for (n, v) in [("w", &w), ("bias", &bias), ("pos", &pos)] {
                cg.set_param_typed(n, &bytes(v), DType::F64);
            }
            cg.run_typed(&[("x", &bytes(&x), DType::F64)])
        });
        for ((b, dt), want, name) in [(&out[0], &sm, "softmax"), (&out[1], &tot, "sum")] {
            assert_eq!(*dt, DType::F64, "[{}] {name}", mode.name());
            let got: Vec<f64> = b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(got.len(), want.len(), "[{}] {name}", mode.name());
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            let err = got
                .iter()
                .zip(want)
                .map(|(g, w)| (g - w).abs() / scale)
                .fold(0.0, f64::max);
            eprintln!("[{}] {name}: max rel {err:.2e}", mode.name());
            assert!(err < 1e-11, "[{}] {name}: max rel {err:.2e}", mode.name());
        }
    }
}
