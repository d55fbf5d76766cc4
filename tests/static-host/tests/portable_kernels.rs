//! The plugin's CPU kernels have an x86 path (AVX2 + FMA, AVX-512) and a
//! portable loop, the one every arm64 CPU (Apple silicon, Graviton, Grace)
//! runs. `set_portable_kernels(true)` (`RLX_MLX_PORTABLE_KERNELS=1`) makes
//! this x86 CPU take the portable loops, so both are compared here, on
//! graphs that reach every kernel and every branch of its loops: products
//! of 1 to 9 rows (the skinny kernels, per row count, and the blocked one
//! from 4), with K and N off every vector width (tails), the right operand
//! transposed (the dot kernel); the unary kernels (erf GELU, exp, sigmoid,
//! SiLU) on lengths 1, 7, 8, 9, 17 and 1,000; row kernels (softmax, layer
//! and RMS norm) on odd widths; elementwise arithmetic with unit and zero
//! strides (broadcasts, the inline evaluator's rows); Fma, whole,
//! broadcast, by rows and transposed; the tanh scan; and
//! the builtin models (attention, rope, SwiGLU, an LSTM). Products, row
//! kernels, arithmetic and Fma (one rounding either way) agree bit for bit; the polynomial kernels within
//! 16 ulps (their vector bodies fuse multiply-adds the portable loops round
//! twice, as rlx-cpu's two arms do), and whole models within 1e-6 of the
//! output's magnitude ([`Agree`]).
//!
//! The plugin is linked in and the switch is process-wide: one test, in a
//! binary of its own.

use rlx_host::run::{execute, random_data};
use rlx_ir::infer::GraphExt;
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, Shape};
use rlx_mlx_shim::kernels::{kernels_vectorized, set_portable_kernels};
use rlx_plugin_api::Mode;
use rlx_runtime::Device;

fn s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// `x [rows, k] @ w [k, n]` and `x @ transpose(v [n, k])`.
fn products(rows: usize, k: usize, n: usize) -> Graph {
    let mut g = Graph::new(format!("mm_{rows}x{k}x{n}"));
    let x = g.input("x", s(&[rows, k]));
    let w = g.param("w", s(&[k, n]));
    let v = g.param("v", s(&[n, k]));
    let y = g.mm(x, w);
    let vt = g.transpose_(v, vec![1, 0]);
    let z = g.mm(x, vt);
    g.set_outputs(vec![y, z]);
    g
}

/// The unary kernels on `[len]`.
fn unary(len: usize) -> Graph {
    let mut g = Graph::new(format!("unary_{len}"));
    let x = g.input("x", s(&[len]));
    let a = g.gelu(x);
    let b = g.exp(x);
    let c = g.sigmoid(x);
    let d = g.silu(x);
    g.set_outputs(vec![a, b, c, d]);
    g
}

/// Softmax, layer norm and RMS norm over rows of `width`.
fn rows(width: usize) -> Graph {
    let mut g = Graph::new(format!("rows_{width}"));
    let x = g.input("x", s(&[5, width]));
    let gamma = g.param("gamma", s(&[width]));
    let beta = g.param("beta", s(&[width]));
    let a = g.sm(x, -1);
    let b = g.add_node(
        rlx_ir::Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        vec![x, gamma, beta],
        s(&[5, width]),
    );
    let c = g.rms_norm(x, gamma, beta, 1e-6);
    g.set_outputs(vec![a, b, c]);
    g
}

/// Arithmetic with broadcast (zero-stride) and unit-stride operands.
fn arithmetic(width: usize) -> Graph {
    let mut g = Graph::new(format!("arith_{width}"));
    let a = g.input("a", s(&[3, 1, width]));
    let b = g.input("b", s(&[4, width]));
    let c = g.param("c", s(&[width]));
    let sh = s(&[3, 4, width]);
    let ab = g.binary(BinaryOp::Add, a, b, sh.clone());
    let d = g.binary(BinaryOp::Sub, ab, c, sh.clone());
    let e = g.binary(BinaryOp::Mul, d, b, sh.clone());
    let f = g.binary(BinaryOp::Div, e, c, sh);
    g.set_outputs(vec![f]);
    g
}

/// Fma (one rounding) of operands whole, broadcast from one value and
/// along rows ([3, 1, width] against [4, width]), and with a transposed
/// operand (read row by row).
fn fma(width: usize) -> Graph {
    let mut g = Graph::new(format!("fma_{width}"));
    let a = g.input("a", s(&[3, 4, width]));
    let b = g.input("b", s(&[4, width]));
    let c = g.input("c", s(&[1]));
    let r = g.input("r", s(&[3, 1, width]));
    let t = g.input("t", s(&[width, 4]));
    let sh = s(&[3, 4, width]);
    let whole = g.add_node(rlx_ir::Op::Fma, vec![a, a, a], sh.clone());
    let bcast = g.add_node(rlx_ir::Op::Fma, vec![a, b, c], sh.clone());
    let rows = g.add_node(rlx_ir::Op::Fma, vec![r, b, a], sh.clone());
    let tt = g.transpose_(t, vec![1, 0]);
    let strided = g.add_node(rlx_ir::Op::Fma, vec![tt, b, c], s(&[4, width]));
    g.set_outputs(vec![whole, bcast, rows, strided]);
    g
}

/// Outputs of two runs of `graph` on the plugin in `mode`.
fn outputs(graph: &Graph, mode: Mode) -> Vec<Vec<f32>> {
    let data = random_data(graph, 5).unwrap();
    rlx_plugin_host::with_mode(mode, || execute(Device::Mlx, graph, &data, 2))
        .unwrap()
        .outputs
}

/// How closely a case's two paths must agree.
#[derive(Clone, Copy, Debug)]
enum Agree {
    /// Bit for bit: the portable loop is the vector code's arithmetic.
    Exact,
    /// Within this many units in the last place, element by element: the
    /// vector body fuses multiply-adds (erf, exp, tanh polynomials) that
    /// the portable loop rounds twice (rlx-cpu's scalar and AVX2 arms
    /// differ the same way). Seen: 9 (erf GELU over a million values).
    Ulps(u32),
    /// Within this fraction of the output's largest magnitude: a model,
    /// where those few ulps pass through many ops (near zero an ulp is
    /// tiny, so a relative bound would mean nothing there). Seen: 1.4e-7.
    Scaled(f32),
}

fn agree(a: &[f32], b: &[f32], how: Agree) -> Result<(), String> {
    let amax = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = match how {
            Agree::Exact => x.to_bits() == y.to_bits(),
            Agree::Ulps(n) => {
                x.is_finite() == y.is_finite()
                    && (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs() <= n as u64
                    && x.is_sign_negative() == y.is_sign_negative()
                    || x == y
            }
            Agree::Scaled(f) => (x - y).abs() <= f * amax,
        };
        if !ok {
            return Err(format!("[{k}]: x86 {x} portable {y} ({how:?})"));
        }
    }
    Ok(())
}

#[test]
fn the_portable_loops_match_the_x86_kernels() {
    let opts = rlx_plugin_host::Options::default();
    // SAFETY: rlx_mlx::rlx_plugin_entry is the MLX plugin's entry, linked
    // into this test.
    unsafe { rlx_plugin_host::install_static(rlx_mlx::rlx_plugin_entry, "mlx", &opts) }.unwrap();
    set_portable_kernels(false);
    if !kernels_vectorized() {
        eprintln!("skipped: this CPU has no AVX2 + FMA, so only the portable loops exist here");
        return;
    }
    let mut cases: Vec<(Graph, Agree)> = Vec::new();
    for r in 1..=9 {
        cases.push((products(r, 37, 45), Agree::Exact));
    }
    cases.push((products(3, 16, 64), Agree::Exact));
    cases.push((products(8, 130, 257), Agree::Exact));
    for len in [1, 7, 8, 9, 17, 1000] {
        cases.push((unary(len), Agree::Ulps(16)));
    }
    for width in [1, 7, 33, 130] {
        cases.push((rows(width), Agree::Exact));
        cases.push((arithmetic(width), Agree::Exact));
        cases.push((fma(width), Agree::Exact));
    }
    cases.push((builtin("scan1000"), Agree::Ulps(16)));
    cases.push((builtin("gelu"), Agree::Ulps(16)));
    cases.push((builtin("add-broadcast"), Agree::Exact));
    for name in ["transformer", "lstm"] {
        cases.push((builtin(name), Agree::Scaled(1e-6)));
    }
    for (graph, how) in &cases {
        for mode in [Mode::Lazy, Mode::Eager] {
            set_portable_kernels(false);
            assert!(kernels_vectorized());
            let vector = outputs(graph, mode);
            set_portable_kernels(true);
            assert!(!kernels_vectorized());
            let portable = outputs(graph, mode);
            set_portable_kernels(false);
            assert_eq!(vector.len(), portable.len());
            for (i, (a, b)) in vector.iter().zip(&portable).enumerate() {
                assert_eq!(a.len(), b.len(), "{} {mode:?} output {i}", graph.name);
                if let Err(e) = agree(a, b, *how) {
                    panic!("{} {mode:?} output {i}{e}", graph.name);
                }
                assert!(
                    a.iter().any(|v| *v != 0.0),
                    "{} output {i}: all zeros",
                    graph.name
                );
            }
        }
    }
}

fn builtin(name: &str) -> Graph {
    rlx_host::bench::builtins::builtin(name).unwrap().graph
}
