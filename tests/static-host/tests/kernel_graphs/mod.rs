//! The graphs that reach every kernel of the plugin with a portable path
//! and every branch of its loops, and how closely two evaluations of each
//! must agree: compared on x86 between the AVX2 and the portable loops
//! (`portable_kernels.rs`), and exported for arm64, where the portable
//! loops are the only ones, to run under qemu against the CPU backend
//! (`qemu_graphs.rs`, `scripts/qemu-aarch64-check.sh`).

use rlx_ir::infer::GraphExt;
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, Shape};

pub fn s(d: &[usize]) -> Shape {
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

/// `x [rows, 128]` times a weight `[45, 128]` packed in MLX's affine
/// layout with `bits`-bit codes in groups of 64 (the plugin's quantized
/// kernel: streamed for up to 8 rows, dequantised blocks past that).
fn quantized(rows: usize, bits: u8) -> Graph {
    use rlx_ir::{Op, QuantScheme};
    let (k, n) = (128, 45);
    let mut g = Graph::new(format!("q{bits}_{rows}x{k}x{n}"));
    let x = g.input("x", s(&[rows, k]));
    let w = g.param("w", Shape::new(&[n * k * bits as usize / 8], DType::U8));
    let sc = g.param("scales", s(&[n, k / 64]));
    let bi = g.param("biases", s(&[n, k / 64]));
    let scheme = QuantScheme::MlxAffine {
        bits,
        group_size: 64,
    };
    let y = g.add_node(
        Op::DequantMatMul { scheme },
        vec![x, w, sc, bi],
        s(&[rows, n]),
    );
    g.set_outputs(vec![y]);
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
/// operand (read row by row). The broadcasts are Expand nodes, as rlx-ir
/// asks of Fma's operands (rlx-cpu's Fma reads each as the output's
/// length and is wrong for a smaller one); the plugin reads them as views
/// with zero strides.
fn fma(width: usize) -> Graph {
    let mut g = Graph::new(format!("fma_{width}"));
    let a = g.input("a", s(&[3, 4, width]));
    let b = g.input("b", s(&[4, width]));
    let c = g.input("c", s(&[1]));
    let r = g.input("r", s(&[3, 1, width]));
    let t = g.input("t", s(&[width, 4]));
    let full = [3, 4, width as i64];
    let sh = s(&[3, 4, width]);
    let expand = |g: &mut Graph, x, to: &[i64]| {
        let dims: Vec<usize> = to.iter().map(|&d| d as usize).collect();
        g.add_node(
            rlx_ir::Op::Expand {
                target_shape: to.to_vec(),
            },
            vec![x],
            s(&dims),
        )
    };
    let b3 = expand(&mut g, b, &full);
    let c3 = expand(&mut g, c, &full);
    let r3 = expand(&mut g, r, &full);
    let c2 = expand(&mut g, c, &[4, width as i64]);
    let whole = g.add_node(rlx_ir::Op::Fma, vec![a, a, a], sh.clone());
    let bcast = g.add_node(rlx_ir::Op::Fma, vec![a, b3, c3], sh.clone());
    let rows = g.add_node(rlx_ir::Op::Fma, vec![r3, b3, a], sh.clone());
    let tt = g.transpose_(t, vec![1, 0]);
    let strided = g.add_node(rlx_ir::Op::Fma, vec![tt, b, c2], s(&[4, width]));
    g.set_outputs(vec![whole, bcast, rows, strided]);
    g
}

/// How closely a case's two paths must agree.
#[derive(Clone, Copy, Debug)]
pub enum Agree {
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

/// Every case, in order.
pub fn cases() -> Vec<(Graph, Agree)> {
    let mut cases: Vec<(Graph, Agree)> = Vec::new();
    for r in 1..=9 {
        cases.push((products(r, 37, 45), Agree::Exact));
    }
    cases.push((products(3, 16, 64), Agree::Exact));
    cases.push((products(8, 130, 257), Agree::Exact));
    // Its vector loops sum each group's codes in lanes, the portable loop
    // in order.
    for rows in [1, 3, 9] {
        for bits in [4, 8] {
            cases.push((quantized(rows, bits), Agree::Scaled(1e-6)));
        }
    }
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
    cases
}

/// The builtin model `name` of `rlx-host bench`, named so.
fn builtin(name: &str) -> Graph {
    let mut g = rlx_host::bench::builtins::builtin(name).unwrap().graph;
    g.name = format!("builtin_{name}");
    g
}
