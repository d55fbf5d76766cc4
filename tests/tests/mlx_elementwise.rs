//! Parity of the elementwise family (Activation, Binary, Compare, Where,
//! Cast) on the MLX plugin against rlx-runtime's CPU backend, in every
//! execution mode.
//!
//! Where the CPU reference cannot judge, the test computes an independent
//! reference in plain Rust and says so:
//! - a Bool (or 1-/2-byte integer) graph output reads back from the CPU
//!   backend as garbage (its 1-byte slots are read as f32), so Compare is
//!   checked through a trailing Cast to f32, and raw Bool outputs against
//!   Rust comparisons;
//! - rlx-cpu's Where indexes only same-shape or one-element operands (a
//!   partial broadcast such as cond [2,1] reads past the operand), so
//!   partial broadcasting is checked against a plain-Rust select;
//! - rlx-cpu's f16/bf16 → integer casts return garbage, and its f32 → f16
//!   output is not rounded, so the full cast matrix is checked against
//!   Rust's `as` (the semantics rlx-cpu's generic cast kernel documents).

use rlx_ir::op::{Activation, BinaryOp, CmpOp};
use rlx_ir::{DType as D, Graph, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{
    check_against, check_against_every_mode, mlx, random_values, round_to, run_cpu, Feed, Tol,
    ALL_ACTIVATIONS,
};

fn s(dims: &[usize], d: D) -> Shape {
    Shape::new(dims, d)
}

fn feed(name: &str, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

const FLOATS: [D; 3] = [D::F32, D::F16, D::BF16];

/// Single elementwise op: a few ulps of the dtype (rlx-cpu's polynomial
/// exp/tanh/log are within ~2 ulp of f32).
fn tol(d: D) -> Tol {
    match d {
        D::F32 => Tol {
            abs: 1e-5,
            rel: 1e-5,
        },
        D::F16 => Tol {
            abs: 2e-3,
            rel: 2e-3,
        },
        D::BF16 => Tol {
            abs: 1.6e-2,
            rel: 1.6e-2,
        },
        // Integer and Bool results are exact.
        _ => EXACT,
    }
}

const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

/// Numpy broadcast of two shapes (rlx-ir's rule for Binary/Compare/Where).
fn bcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i < r - a.len() {
                1
            } else {
                a[i - (r - a.len())]
            };
            let db = if i < r - b.len() {
                1
            } else {
                b[i - (r - b.len())]
            };
            assert!(da == db || da == 1 || db == 1, "{a:?} vs {b:?}");
            da.max(db)
        })
        .collect()
}

/// Flat index into an operand of shape `d` for output coordinate `out_i`
/// of shape `out` (numpy broadcasting).
fn bidx(out: &[usize], out_i: usize, d: &[usize]) -> usize {
    let mut rem = out_i;
    let mut coords = vec![0; out.len()];
    for ax in (0..out.len()).rev() {
        coords[ax] = rem % out[ax];
        rem /= out[ax];
    }
    let off = out.len() - d.len();
    let mut idx = 0;
    for (k, &dk) in d.iter().enumerate() {
        let c = if dk == 1 { 0 } else { coords[k + off] };
        idx = idx * dk + c;
    }
    idx
}

/// Seeded values in [lo, hi) rounded to `d`.
fn uni(n: usize, d: D, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    random_values(n, d, lo, hi, seed)
}

/// Seeded integers in [lo, hi] (as f32), exact in every dtype used here.
fn ints(n: usize, lo: i32, hi: i32, seed: u64) -> Vec<f32> {
    random_values(n, D::F32, 0.0, 1.0, seed)
        .iter()
        .map(|u| (lo + ((u * (hi - lo + 1) as f32) as i32).min(hi - lo)) as f32)
        .collect()
}

/// Seeded values with magnitude in [lo, hi) and a random sign.
fn away_from_zero(n: usize, d: D, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    let m = random_values(n, D::F32, lo, hi, seed);
    let sg = random_values(n, D::F32, -1.0, 1.0, seed ^ 0x5eed);
    round_to(
        &m.iter()
            .zip(&sg)
            .map(|(m, s)| if *s < 0.0 { -m } else { *m })
            .collect::<Vec<_>>(),
        d,
    )
}

/// `specials` first (as many as fit), then `rest`.
fn with_specials(specials: &[f32], rest: Vec<f32>, d: D) -> Vec<f32> {
    let n = rest.len();
    let mut v: Vec<f32> = specials.iter().copied().take(n).collect();
    v.extend_from_slice(&rest[v.len()..]);
    round_to(&v, d)
}

/// Which of `len` cases to run: all of them (`full`), else `n` of them,
/// rotated by `rot` so that across variants and dtypes every case runs.
/// (Each case compiles and runs two backends in three modes; the full
/// cross product takes too long on a shared debug build.)
fn subset(len: usize, full: bool, n: usize, rot: usize) -> Vec<usize> {
    if full {
        (0..len).collect()
    } else {
        (0..n).map(|m| (rot + 2 * m) % len).collect()
    }
}

/// Run on the CPU backend and check the plugin against it in every mode.
fn parity(what: &str, g: &Graph, feeds: &[Feed], tol: Tol) {
    let reference = run_cpu(g, feeds);
    check_against(what, g, feeds, &reference, tol);
}

// ── Activation ─────────────────────────────────────────────────────────

/// Inputs that exercise the whole of each activation's formula (both sides
/// of every clamp/branch) and stay in its domain.
fn activation_input(act: Activation, n: usize, d: D, seed: u64) -> Vec<f32> {
    use Activation as A;
    match act {
        A::Log | A::Sqrt | A::Rsqrt => uni(n, d, 0.05, 4.0, seed),
        A::Recip => away_from_zero(n, d, 0.2, 3.0, seed),
        // Exact halves first: rlx rounds half to even.
        A::Round => with_specials(
            &[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 0.0, -3.5, 4.5, 1.0],
            uni(n, d, -4.0, 4.0, seed),
            d,
        ),
        A::Floor | A::Ceil | A::Sign => with_specials(
            &[0.0, -1.0, 2.0, -0.0, 0.5, -0.5, 3.0],
            uni(n, d, -4.0, 4.0, seed),
            d,
        ),
        A::Exp => uni(n, d, -5.0, 5.0, seed),
        A::Tan => uni(n, d, -1.2, 1.2, seed),
        A::Atan | A::Softsign => uni(n, d, -10.0, 10.0, seed),
        A::Erf => uni(n, d, -3.0, 3.0, seed),
        A::Sin | A::Cos => uni(n, d, -4.0, 4.0, seed),
        A::Softplus | A::LogSigmoid | A::Mish | A::Elu => uni(n, d, -12.0, 12.0, seed),
        // Past ±3 both clamps engage.
        A::HardSwish | A::HardSigmoid => uni(n, d, -5.0, 5.0, seed),
        A::Gelu | A::GeluApprox | A::Silu | A::Sigmoid | A::Tanh => uni(n, d, -6.0, 6.0, seed),
        _ => uni(n, d, -2.0, 2.0, seed),
    }
}

const SHAPES: [&[usize]; 5] = [&[1], &[7], &[3, 5], &[2, 3, 4], &[2, 1, 3, 5]];

#[test]
fn every_activation_matches_the_cpu_in_every_float_dtype() {
    for (k, act) in ALL_ACTIVATIONS.iter().enumerate() {
        for (i, dt) in FLOATS.into_iter().enumerate() {
            // Every shape in f32; two (rotating) in each half dtype.
            for j in subset(SHAPES.len(), dt == D::F32, 2, k + i) {
                let dims = SHAPES[j];
                let mut g = Graph::new("act");
                let x = g.input("x", s(dims, dt));
                let y = g.activation(*act, x, s(dims, dt));
                g.set_outputs(vec![y]);
                let seed = 100 + (k * 10 + j) as u64;
                let feeds = [feed("x", activation_input(*act, numel(dims), dt, seed))];
                parity(&format!("{act:?} {dt:?} {dims:?}"), &g, &feeds, tol(dt));
            }
        }
    }
}

#[test]
fn activation_edge_values_follow_rlx() {
    // NaN through relu is 0 (f32::max), through sign is 0; round is half to
    // even; hard clamps saturate exactly.
    let cases: [(Activation, Vec<f32>, Vec<f32>); 5] = [
        (
            Activation::Relu,
            vec![f32::NAN, -1.0, 2.0, -0.0, 0.0],
            vec![0.0, 0.0, 2.0, 0.0, 0.0],
        ),
        (
            Activation::Sign,
            vec![f32::NAN, -3.0, 0.0, 5.0, -0.0],
            vec![0.0, -1.0, 0.0, 1.0, 0.0],
        ),
        (
            Activation::Round,
            vec![0.5, 1.5, 2.5, -2.5, -0.5],
            vec![0.0, 2.0, 2.0, -2.0, 0.0],
        ),
        (
            Activation::HardSigmoid,
            vec![-3.0, 3.0, -10.0, 10.0, 0.0],
            vec![0.0, 1.0, 0.0, 1.0, 0.5],
        ),
        (
            Activation::HardSwish,
            vec![-3.0, 3.0, -10.0, 10.0, 1.0],
            vec![0.0, 3.0, 0.0, 10.0, 4.0 / 6.0],
        ),
    ];
    for (act, x, want) in cases {
        for dt in FLOATS {
            let mut g = Graph::new("edge");
            let xi = g.input("x", s(&[5], dt));
            let y = g.activation(act, xi, s(&[5], dt));
            g.set_outputs(vec![y]);
            let feeds = [feed("x", round_to(&x, dt))];
            // The CPU agrees with the stated values...
            let cpu = run_cpu(&g, &feeds);
            rlx_plugin_tests::parity::assert_close(
                &format!("cpu {act:?} {dt:?}"),
                &cpu[0],
                &round_to(&want, dt),
                tol(dt),
            );
            // ...and so does the plugin.
            check_against(
                &format!("{act:?} {dt:?} edges"),
                &g,
                &feeds,
                &[round_to(&want, dt)],
                tol(dt),
            );
        }
    }
}

#[test]
fn activation_saturation_matches_the_cpu() {
    // rlx-cpu's exp clamps its argument to [-87.3, 88.7]: exp(100) is
    // 3.3e38 (not inf), sigmoid(-100) 3e-39, silu(-inf) -inf, mish(-inf)
    // NaN. (NaN inputs are left out here: rlx-cpu's AVX2 exp turns NaN
    // into ~0, a platform-specific gap its own source documents.)
    let x = vec![
        100.0,
        -100.0,
        88.71,
        89.0,
        -88.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-30,
        0.0,
        -0.0,
        30.0,
        -30.0,
    ];
    use Activation as A;
    for act in [
        A::Exp,
        A::Sigmoid,
        A::Silu,
        A::Softplus,
        A::LogSigmoid,
        A::Mish,
        A::Elu,
        A::Tanh,
        A::Gelu,
        A::GeluApprox,
        A::HardSwish,
        A::HardSigmoid,
        A::Softsign,
        A::Erf,
        A::Atan,
        A::Relu,
    ] {
        for dt in FLOATS {
            let mut g = Graph::new("sat");
            let xi = g.input("x", s(&[12], dt));
            let y = g.activation(act, xi, s(&[12], dt));
            g.set_outputs(vec![y]);
            parity(
                &format!("{act:?} {dt:?} saturation"),
                &g,
                &[feed("x", round_to(&x, dt))],
                tol(dt),
            );
        }
    }
}

// ── Binary ─────────────────────────────────────────────────────────────

const ALL_BINARY: [BinaryOp; 14] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::Pow,
    BinaryOp::Mod,
    BinaryOp::BitAnd,
    BinaryOp::BitOr,
    BinaryOp::BitXor,
    BinaryOp::Shl,
    BinaryOp::Shr,
    BinaryOp::Atan2,
];

/// Broadcasting pairs: trailing bias, both sides size-1, scalar [1] on
/// either side, same shape, rank-4 crossed size-1 axes, odd sizes.
const PAIRS: [(&[usize], &[usize]); 7] = [
    (&[2, 3], &[3]),
    (&[4, 1, 5], &[1, 3, 1]),
    (&[7], &[1]),
    (&[1], &[7]),
    (&[5], &[5]),
    (&[2, 3, 4, 5], &[2, 3, 4, 5]),
    (&[3, 1, 5, 1], &[1, 4, 1, 6]),
];

/// Float operands for `op`: in its domain, and (for the integer ops)
/// fractional so the truncation to i64 is exercised.
fn float_operands(op: BinaryOp, na: usize, nb: usize, d: D, seed: u64) -> (Vec<f32>, Vec<f32>) {
    use BinaryOp as B;
    match op {
        B::Div => (
            uni(na, d, -2.0, 2.0, seed),
            away_from_zero(nb, d, 0.25, 2.0, seed + 1),
        ),
        B::Pow => (uni(na, d, 0.1, 3.0, seed), uni(nb, d, -2.5, 2.5, seed + 1)),
        B::Mod => (
            uni(na, d, -10.0, 10.0, seed),
            away_from_zero(nb, d, 0.5, 4.0, seed + 1),
        ),
        B::BitAnd | B::BitOr | B::BitXor => (
            uni(na, d, -20.0, 20.0, seed),
            uni(nb, d, -20.0, 20.0, seed + 1),
        ),
        // Negative counts saturate to 0 (`b as u32`).
        B::Shl | B::Shr => (
            uni(na, d, -50.0, 50.0, seed),
            uni(nb, d, -2.0, 9.0, seed + 1),
        ),
        _ => (uni(na, d, -1.0, 1.0, seed), uni(nb, d, -1.0, 1.0, seed + 1)),
    }
}

fn binary_graph(op: BinaryOp, a: &[usize], b: &[usize], d: D) -> Graph {
    let mut g = Graph::new("bin");
    let x = g.input("a", s(a, d));
    let y = g.input("b", s(b, d));
    let o = g.binary(op, x, y, s(&bcast(a, b), d));
    g.set_outputs(vec![o]);
    g
}

#[test]
fn every_binary_op_matches_the_cpu_in_every_float_dtype_with_broadcasting() {
    for (k, op) in ALL_BINARY.iter().enumerate() {
        for (i, dt) in FLOATS.into_iter().enumerate() {
            // Every pair in f32; three (rotating) in each half dtype.
            for j in subset(PAIRS.len(), dt == D::F32, 3, k + i) {
                let (a, b) = PAIRS[j];
                let g = binary_graph(*op, a, b, dt);
                let seed = 1000 + (k * 10 + j) as u64 * 3;
                let (va, vb) = float_operands(*op, numel(a), numel(b), dt, seed);
                let feeds = [feed("a", va), feed("b", vb)];
                parity(&format!("{op:?} {dt:?} {a:?}x{b:?}"), &g, &feeds, tol(dt));
            }
        }
    }
}

/// Integer operands for `op` (as f32): zeros allowed where rlx defines the
/// result, shift counts past 63 and negative where the count wraps.
fn int_operands(op: BinaryOp, na: usize, nb: usize, d: D, seed: u64) -> (Vec<f32>, Vec<f32>) {
    use BinaryOp as B;
    let unsigned = d == D::U32;
    let (lo, hi) = if unsigned { (0, 60) } else { (-30, 30) };
    let a = ints(na, lo, hi, seed);
    let b = match op {
        B::Pow => ints(nb, if unsigned { 0 } else { -3 }, 6, seed + 1),
        B::Shl | B::Shr if d == D::I64 => ints(nb, -3, 70, seed + 1),
        B::Shl | B::Shr => ints(nb, if unsigned { 0 } else { -3 }, 40, seed + 1),
        // rlx-cpu's i64 `%` panics on a zero divisor.
        B::Mod if d == D::I64 => ints(nb, 1, 9, seed + 1)
            .iter()
            .enumerate()
            .map(|(i, v)| if i % 2 == 0 { -v } else { *v })
            .collect(),
        _ => ints(nb, lo, hi, seed + 1),
    };
    let a = match op {
        B::Pow => ints(na, if unsigned { 0 } else { -5 }, 5, seed),
        _ => a,
    };
    (a, b)
}

#[test]
fn every_binary_op_matches_the_cpu_on_integers() {
    // I32/U32: rlx-cpu computes in f32 and casts back (truncating,
    // saturating: a zero divisor gives ±i32::MAX or 0); I64: Rust integer
    // semantics (a / 0 = 0, wrapping shifts).
    for (k, op) in ALL_BINARY.iter().enumerate() {
        for (i, dt) in [D::I32, D::U32, D::I64].into_iter().enumerate() {
            // Three (rotating) pairs per op and dtype.
            for j in subset(PAIRS.len(), false, 3, k + i) {
                let (a, b) = PAIRS[j];
                let g = binary_graph(*op, a, b, dt);
                let seed = 5000 + (k * 10 + j) as u64 * 3;
                let (va, vb) = int_operands(*op, numel(a), numel(b), dt, seed);
                let feeds = [feed("a", va), feed("b", vb)];
                parity(&format!("{op:?} {dt:?} {a:?}x{b:?}"), &g, &feeds, EXACT);
            }
        }
    }
}

#[test]
fn binary_edge_values_follow_rlx() {
    // NaN in max/min yields the other operand (f32::max); fmod keeps the
    // dividend's sign; pow of a negative base with integer exponents is
    // real, with a fractional one NaN; x/0 is ±inf.
    let a = vec![
        f32::NAN,
        1.0,
        f32::NAN,
        -7.0,
        7.0,
        -7.5,
        -2.0,
        -2.0,
        -2.0,
        3.0,
        -3.0,
    ];
    let b = vec![
        1.0,
        f32::NAN,
        f32::NAN,
        2.0,
        -2.0,
        2.0,
        3.0,
        -2.0,
        0.5,
        0.0,
        0.0,
    ];
    for op in [
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Mod,
        BinaryOp::Pow,
        BinaryOp::Div,
        BinaryOp::Atan2,
    ] {
        for dt in FLOATS {
            let g = binary_graph(op, &[11], &[11], dt);
            let feeds = [feed("a", round_to(&a, dt)), feed("b", round_to(&b, dt))];
            parity(&format!("{op:?} {dt:?} edges"), &g, &feeds, tol(dt));
        }
    }
    // Independently of the CPU: the values rlx documents.
    let g = binary_graph(BinaryOp::Max, &[11], &[11], D::F32);
    let feeds = [feed("a", a.clone()), feed("b", b.clone())];
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x.max(*y)).collect();
    check_against("Max f32::max", &g, &feeds, &[want], EXACT);
    let g = binary_graph(BinaryOp::Mod, &[11], &[11], D::F32);
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x % y).collect();
    check_against("Mod fmod", &g, &feeds, &[want], EXACT);
}

// ── Compare ────────────────────────────────────────────────────────────

const ALL_CMP: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
];

fn rust_cmp(op: CmpOp, a: f32, b: f32) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

/// Values from a small set, so equal pairs are common.
fn cmp_values(n: usize, d: D, seed: u64) -> Vec<f32> {
    let v = ints(n, -3, 3, seed);
    match d {
        D::Bool => v.iter().map(|x| (*x > 0.0) as u8 as f32).collect(),
        D::I32 | D::I64 => v,
        _ => round_to(&v.iter().map(|x| x * 0.5).collect::<Vec<_>>(), d),
    }
}

#[test]
fn every_compare_op_matches_the_cpu_with_broadcasting() {
    // The Bool result is read through a Cast to f32 (the CPU backend cannot
    // read back a Bool output).
    for (k, op) in ALL_CMP.iter().enumerate() {
        for (i, dt) in [D::F32, D::F16, D::BF16, D::I32, D::I64, D::Bool]
            .into_iter()
            .enumerate()
        {
            // Every pair in f32; two (rotating) for the other input dtypes.
            for j in subset(PAIRS.len(), dt == D::F32, 2, k + i) {
                let (a, b) = PAIRS[j];
                let out = bcast(a, b);
                let mut g = Graph::new("cmp");
                let x = g.input("a", s(a, dt));
                let y = g.input("b", s(b, dt));
                let c = g.add_node(Op::Compare(*op), vec![x, y], s(&out, D::Bool));
                let f = g.add_node(Op::Cast { to: D::F32 }, vec![c], s(&out, D::F32));
                g.set_outputs(vec![f]);
                let seed = 9000 + (k * 10 + j) as u64 * 3;
                let feeds = [
                    feed("a", cmp_values(numel(a), dt, seed)),
                    feed("b", cmp_values(numel(b), dt, seed + 1)),
                ];
                parity(&format!("{op:?} {dt:?} {a:?}x{b:?}"), &g, &feeds, EXACT);
            }
        }
    }
}

#[test]
fn compare_returns_bool_with_nan_unordered() {
    // Independent reference (Rust comparisons): the CPU backend cannot read
    // back a Bool output.
    let a = vec![f32::NAN, 1.0, -0.0, 2.0, -1.0, 3.0];
    for op in ALL_CMP {
        for dt in FLOATS {
            for (da, db) in [(&[2usize, 3][..], &[3usize][..]), (&[6][..], &[1][..])] {
                let out = bcast(da, db);
                let mut g = Graph::new("cmp");
                let x = g.input("a", s(da, dt));
                let y = g.input("b", s(db, dt));
                let c = g.add_node(Op::Compare(op), vec![x, y], s(&out, D::Bool));
                g.set_outputs(vec![c]);
                let va = round_to(&a, dt);
                let vb: Vec<f32> = round_to(&[0.0, f32::NAN, 2.0][..numel(db)], dt);
                let want: Vec<f32> = (0..numel(&out))
                    .map(|i| {
                        let l = va[bidx(&out, i, da)];
                        let r = vb[bidx(&out, i, db)];
                        rust_cmp(op, l, r) as u8 as f32
                    })
                    .collect();
                let feeds = [feed("a", va), feed("b", vb)];
                for mode in rlx_plugin_tests::parity::modes_for(&g) {
                    let outs = rlx_plugin_tests::parity::run_mlx(&g, &feeds, mode).unwrap();
                    assert_eq!(outs[0].dtype, rlx_plugin_api::DType::Bool);
                    assert_eq!(outs[0].shape, out);
                    assert_eq!(
                        outs[0].to_f32_vec().unwrap(),
                        want,
                        "{op:?} {dt:?} {da:?}x{db:?} [{}]",
                        mode.name()
                    );
                }
            }
        }
    }
}

// ── Where ──────────────────────────────────────────────────────────────

fn where_graph(c: (&[usize], D), t: &[usize], e: &[usize], d: D) -> Graph {
    let out = bcast(&bcast(c.0, t), e);
    let mut g = Graph::new("where");
    let ci = g.input("c", s(c.0, c.1));
    let ti = g.input("t", s(t, d));
    let ei = g.input("e", s(e, d));
    let o = g.add_node(Op::Where, vec![ci, ti, ei], s(&out, d));
    g.set_outputs(vec![o]);
    g
}

fn where_values(n: usize, d: D, seed: u64) -> Vec<f32> {
    match d {
        D::I32 | D::I64 => ints(n, -1000, 1000, seed),
        D::Bool => ints(n, 0, 1, seed),
        _ => uni(n, d, -1.0, 1.0, seed),
    }
}

/// Condition values: zeros, ones and other nonzero values (all truthy in
/// rlx's f32 mask).
fn cond_values(n: usize, d: D, seed: u64) -> Vec<f32> {
    let v = ints(n, -2, 2, seed);
    match d {
        D::Bool => v.iter().map(|x| (*x != 0.0) as u8 as f32).collect(),
        _ => round_to(&v.iter().map(|x| x * 0.75).collect::<Vec<_>>(), d),
    }
}

#[test]
fn where_matches_the_cpu_for_same_shape_and_scalar_operands() {
    // rlx-cpu's Where handles same-shape operands and one-element ones.
    let dims: [&[usize]; 4] = [&[7], &[3, 5], &[2, 3, 4], &[2, 1, 3, 5]];
    for (j, d) in dims.iter().enumerate() {
        for cd in [D::Bool, D::F32] {
            for (i, vd) in [D::F32, D::F16, D::BF16, D::I32, D::I64]
                .into_iter()
                .enumerate()
            {
                let configs: [(&[usize], &[usize], &[usize]); 4] =
                    [(d, d, d), (&[1], d, d), (d, &[1], d), (d, d, &[1])];
                // Every configuration for f32 values; one (rotating) for the
                // other value dtypes.
                for m in subset(4, vd == D::F32, 1, i + j) {
                    let (ci, ti, ei) = configs[m];
                    let g = where_graph((ci, cd), ti, ei, vd);
                    let seed = 20_000 + j as u64 * 7;
                    let feeds = [
                        feed("c", cond_values(numel(ci), cd, seed)),
                        feed("t", where_values(numel(ti), vd, seed + 1)),
                        feed("e", where_values(numel(ei), vd, seed + 2)),
                    ];
                    parity(
                        &format!("Where cond {cd:?}{ci:?} {vd:?} {ti:?} {ei:?}"),
                        &g,
                        &feeds,
                        tol(vd),
                    );
                }
            }
        }
    }
}

#[test]
fn where_broadcasts_all_three_operands() {
    // Independent reference (plain-Rust select with numpy broadcasting):
    // rlx-cpu's Where does not broadcast partial operands.
    let cases: [(&[usize], &[usize], &[usize]); 4] = [
        (&[2, 1], &[3], &[2, 3]),
        (&[4, 1, 5], &[1, 3, 1], &[1]),
        (&[5], &[3, 1], &[1, 5]),
        (&[2, 1, 3, 1], &[1, 4, 1, 5], &[2, 4, 3, 5]),
    ];
    for (k, (c, t, e)) in cases.iter().enumerate() {
        for cd in [D::Bool, D::F32] {
            for vd in [D::F32, D::F16, D::BF16, D::I32, D::I64, D::Bool] {
                let g = where_graph((c, cd), t, e, vd);
                let out = bcast(&bcast(c, t), e);
                let seed = 30_000 + k as u64 * 5;
                let (vc, vt, ve) = (
                    cond_values(numel(c), cd, seed),
                    where_values(numel(t), vd, seed + 1),
                    where_values(numel(e), vd, seed + 2),
                );
                let want: Vec<f32> = (0..numel(&out))
                    .map(|i| {
                        if vc[bidx(&out, i, c)] != 0.0 {
                            vt[bidx(&out, i, t)]
                        } else {
                            ve[bidx(&out, i, e)]
                        }
                    })
                    .collect();
                let feeds = [feed("c", vc), feed("t", vt), feed("e", ve)];
                check_against(
                    &format!("Where {cd:?}{c:?} {vd:?}{t:?} {e:?}"),
                    &g,
                    &feeds,
                    &[want],
                    EXACT,
                );
            }
        }
    }
}

// ── Cast ───────────────────────────────────────────────────────────────

const CAST_DTYPES: [D; 11] = [
    D::F32,
    D::F16,
    D::BF16,
    D::F64,
    D::I8,
    D::I16,
    D::I32,
    D::I64,
    D::U8,
    D::U32,
    D::Bool,
];

fn is_float(d: D) -> bool {
    matches!(d, D::F32 | D::F16 | D::BF16 | D::F64)
}

/// Values covering truncation toward zero, every integer range's edges,
/// out-of-range values, NaN and infinities.
const CAST_VALUES: [f32; 24] = [
    -300.7,
    -129.5,
    -128.9,
    -1.7,
    -0.5,
    -0.0,
    0.0,
    0.4,
    1.0,
    2.5,
    127.9,
    128.0,
    255.9,
    256.0,
    40000.5,
    70000.0,
    3e9,
    -3e9,
    5e9,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    -32768.5,
    65535.0,
];

/// rlx's cast of the value the harness writes into `from` for `v0` (Rust
/// `as` into `from`), as rlx-cpu's generic cast kernel does it (Rust `as`
/// again), read back as f32.
fn rust_cast(v0: f32, from: D, to: D) -> f32 {
    enum V {
        F(f64),
        I(i64),
    }
    // The exact source element.
    let src = match from {
        D::F32 | D::F16 | D::BF16 | D::F64 => V::F(round_to(&[v0], from)[0] as f64),
        D::I8 => V::I(v0 as i8 as i64),
        D::I16 => V::I(v0 as i16 as i64),
        D::I32 => V::I(v0 as i32 as i64),
        D::I64 => V::I(v0 as i64),
        D::U8 => V::I(v0 as u8 as i64),
        D::U32 => V::I(v0 as u32 as i64),
        D::Bool => V::I((v0 != 0.0) as i64),
        _ => unreachable!(),
    };
    match (src, to) {
        (V::F(w), D::Bool) => (w != 0.0) as u8 as f32,
        (V::I(i), D::Bool) => (i != 0) as u8 as f32,
        // One rounding into the float target.
        (V::F(w), D::F64) => w as f32,
        (V::I(i), D::F64) => i as f64 as f32,
        (V::F(w), t) if is_float(t) => round_to(&[w as f32], t)[0],
        (V::I(i), t) if is_float(t) => match t {
            D::F32 => i as f32,
            D::F16 => half::f16::from_f64(i as f64).to_f32(),
            _ => half::bf16::from_f64(i as f64).to_f32(),
        },
        // Float -> integer: truncating, saturating, NaN -> 0.
        (V::F(w), t) => match t {
            D::I8 => w as i8 as f32,
            D::I16 => w as i16 as f32,
            D::I32 => w as i32 as f32,
            D::I64 => w as i64 as f32,
            D::U8 => w as u8 as f32,
            D::U32 => w as u32 as f32,
            _ => unreachable!(),
        },
        // Integer -> integer wraps.
        (V::I(i), t) => match t {
            D::I8 => i as i8 as f32,
            D::I16 => i as i16 as f32,
            D::I32 => i as i32 as f32,
            D::I64 => i as f32,
            D::U8 => i as u8 as f32,
            D::U32 => i as u32 as f32,
            _ => unreachable!(),
        },
    }
}

#[test]
fn cast_matrix_follows_rust_as() {
    // Independent reference for every pair: see the module docs.
    let dims: [&[usize]; 3] = [&[24], &[4, 6], &[2, 3, 2, 2]];
    for (k, from) in CAST_DTYPES.iter().enumerate() {
        for to in CAST_DTYPES {
            let d = dims[k % 3];
            let mut g = Graph::new("cast");
            let x = g.input("x", s(d, *from));
            let y = g.add_node(Op::Cast { to }, vec![x], s(d, to));
            g.set_outputs(vec![y]);
            // The harness writes each value into `from` with Rust `as`.
            let vx = round_to(&CAST_VALUES, *from);
            let want: Vec<f32> = CAST_VALUES
                .iter()
                .map(|v| rust_cast(*v, *from, to))
                .collect();
            check_against(
                &format!("Cast {from:?} -> {to:?}"),
                &g,
                &[feed("x", vx)],
                &[want],
                EXACT,
            );
        }
    }
}

#[test]
fn cast_matches_the_cpu_where_it_reads_back() {
    // Pairs whose result the CPU backend can read back; 1-byte/2-byte
    // results go through a second cast to f32. f32 -> f16/bf16: the CPU
    // leaves its output unrounded, so those compare at the target dtype's
    // tolerance.
    let direct: [(D, D); 17] = [
        (D::F32, D::I32),
        (D::F32, D::I64),
        (D::F32, D::U32),
        (D::F32, D::F64),
        (D::F32, D::F16),
        (D::F32, D::BF16),
        (D::I32, D::F32),
        (D::I32, D::I64),
        (D::I64, D::F32),
        (D::I64, D::I32),
        (D::U8, D::F32),
        (D::U8, D::I32),
        (D::Bool, D::F32),
        (D::Bool, D::I32),
        (D::F16, D::F32),
        (D::BF16, D::F32),
        (D::BF16, D::F16),
    ];
    let chained: [(D, D); 6] = [
        (D::F32, D::U8),
        (D::F32, D::I8),
        (D::F32, D::I16),
        (D::F32, D::Bool),
        (D::I32, D::Bool),
        (D::I64, D::Bool),
    ];
    let d: &[usize] = &[4, 6];
    for (from, to) in direct {
        let mut g = Graph::new("cast");
        let x = g.input("x", s(d, from));
        let y = g.add_node(Op::Cast { to }, vec![x], s(d, to));
        g.set_outputs(vec![y]);
        let mut vx = round_to(&CAST_VALUES, from);
        if matches!(to, D::F16 | D::BF16) {
            // The CPU's unrounded f32 of an out-of-range value is not inf.
            vx.iter_mut().for_each(|v| {
                if v.abs() > 6e4 && v.is_finite() {
                    *v = 1.0
                }
            });
        }
        parity(
            &format!("Cast {from:?} -> {to:?}"),
            &g,
            &[feed("x", vx)],
            tol(to),
        );
    }
    for (from, to) in chained {
        let mut g = Graph::new("cast2");
        let x = g.input("x", s(d, from));
        let y = g.add_node(Op::Cast { to }, vec![x], s(d, to));
        let z = g.add_node(Op::Cast { to: D::F32 }, vec![y], s(d, D::F32));
        g.set_outputs(vec![z]);
        parity(
            &format!("Cast {from:?} -> {to:?} -> F32"),
            &g,
            &[feed("x", round_to(&CAST_VALUES, from))],
            EXACT,
        );
    }
}

// ── Errors ─────────────────────────────────────────────────────────────

#[test]
fn an_unlowered_variant_fails_at_compile_naming_the_node() {
    let p = mlx();
    // An activation over integer input (declared f32) is not lowered.
    let mut g = Graph::new("bad_act");
    let x = g.input("x", s(&[4], D::I32));
    let y = g.add_node(Op::Activation(Activation::Exp), vec![x], s(&[4], D::F32));
    g.set_outputs(vec![y]);
    for mode in rlx_plugin_tests::parity::modes_for(&g) {
        let e = p
            .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), mode)
            .err()
            .expect("Exp over i32 is not lowered");
        assert!(
            e.message.contains("node %1")
                && e.message.contains("Exp")
                && e.message.contains("not lowered"),
            "{e}"
        );
        assert_eq!(e.code, rlx_plugin_api::StatusCode::Unsupported, "{e}");
    }
    // A Binary on a dtype it does not compute (u8).
    let mut g = Graph::new("bad_bin");
    let a = g.input("a", s(&[4], D::U8));
    let b = g.input("b", s(&[4], D::U8));
    let o = g.binary(BinaryOp::Add, a, b, s(&[4], D::U8));
    g.set_outputs(vec![o]);
    let e = p
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("u8 Binary is not lowered");
    assert!(
        e.message.contains("node %2") && e.message.contains("Binary"),
        "{e}"
    );
}

/// Erf-GELU in f32 on the CPU runs the plugin's own vector kernel (an MLX
/// primitive using rlx-cpu's A&S 7.1.26 erf). Checked here against an
/// independent f64 reference, `x/2 (1 + erf(x/sqrt 2))` with libm's erf, on
/// a tensor long enough for the thread split and with a length that leaves
/// a scalar tail, over [-12, 12] (saturated tails included). Tolerance: the
/// approximation's 1.5e-7 on erf is at most 0.75e-7·|x| on GELU, plus f32
/// rounding: 1e-6 abs + 1e-6 rel.
#[test]
fn gelu_kernel_matches_an_f64_erf_reference() {
    let n = 300_007;
    let xs: Vec<f32> = (0..n)
        .map(|i| -12.0 + 24.0 * i as f32 / (n - 1) as f32)
        .collect();
    let want: Vec<f32> = xs
        .iter()
        .map(|&x| {
            let x = x as f64;
            (0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))) as f32
        })
        .collect();
    let mut g = Graph::new("gelu");
    let x = g.input("x", s(&[n], D::F32));
    let y = g.activation(Activation::Gelu, x, s(&[n], D::F32));
    g.set_outputs(vec![y]);
    check_against(
        "gelu f32 vs f64 erf",
        &g,
        &[feed("x", xs)],
        &[want],
        Tol {
            abs: 1e-6,
            rel: 1e-6,
        },
    );
}

/// A product and a sum are two roundings wherever the graph says so: rlx
/// writes an FMA node when it means one, so no mode may fuse `a * b + c`
/// on its own (MLX's generated CUDA kernels did, through NVRTC's default
/// `--fmad=true`: `plugin-mlx/src/contraction.rs`). Reference: the same
/// f32 arithmetic in Rust, which never contracts; exact. The inputs are
/// chosen so that a fused result differs on many elements (checked), so
/// the test fails where a mode contracts.
#[test]
fn a_product_then_a_sum_round_twice_in_every_mode() {
    let n = 4099;
    let [a, b, c, d] = [11u64, 12, 13, 14].map(|seed| uni(n, D::F32, -1.0, 1.0, seed));
    let sh = s(&[n], D::F32);
    let mut g = Graph::new("mul_add");
    let [xa, xb, xc, xd] = ["a", "b", "c", "d"].map(|name| g.input(name, sh.clone()));
    let ab = g.binary(BinaryOp::Mul, xa, xb, sh.clone());
    let y1 = g.binary(BinaryOp::Add, ab, xc, sh.clone());
    let cd = g.binary(BinaryOp::Mul, xc, xd, sh.clone());
    let y2 = g.binary(BinaryOp::Sub, ab, cd, sh.clone());
    g.set_outputs(vec![y1, y2]);
    let i = 0..n;
    let want1: Vec<f32> = i.clone().map(|i| a[i] * b[i] + c[i]).collect();
    let want2: Vec<f32> = i.clone().map(|i| a[i] * b[i] - c[i] * d[i]).collect();
    let fused = i
        .filter(|&i| a[i].mul_add(b[i], c[i]).to_bits() != want1[i].to_bits())
        .count();
    assert!(
        fused > n / 10,
        "only {fused} of {n} inputs tell a fused a*b+c apart"
    );
    let feeds = [("a", a), ("b", b), ("c", c), ("d", d)].map(|(name, v)| feed(name, v));
    check_against_every_mode("a*b+c, a*b-c*d", &g, &feeds, &[want1, want2], EXACT);
}

/// rlx's Fma node rounds `a * b + c` once, in every mode: the shim's
/// kernel (`std::fma`), on the CPU stream of a GPU graph too. Reference:
/// Rust's `f32::mul_add` (one rounding); exact. The inputs are the ones
/// above, on which a multiply then an add differs on many elements
/// (checked), so the test fails where Fma rounds twice. The second output
/// broadcasts a one-element addend.
#[test]
fn fma_rounds_once_in_every_mode() {
    let n = 4099;
    let [a, b, c] = [11u64, 12, 13].map(|seed| uni(n, D::F32, -1.0, 1.0, seed));
    let k = vec![0.3f32];
    let sh = s(&[n], D::F32);
    let mut g = Graph::new("fma");
    let [xa, xb, xc] = ["a", "b", "c"].map(|name| g.input(name, sh.clone()));
    let xk = g.input("k", s(&[1], D::F32));
    let y1 = g.add_node(Op::Fma, vec![xa, xb, xc], sh.clone());
    let y2 = g.add_node(Op::Fma, vec![xa, xb, xk], sh.clone());
    g.set_outputs(vec![y1, y2]);
    let want1: Vec<f32> = (0..n).map(|i| a[i].mul_add(b[i], c[i])).collect();
    let want2: Vec<f32> = (0..n).map(|i| a[i].mul_add(b[i], k[0])).collect();
    for (want, addend) in [(&want1, &c[..]), (&want2, &[k[0]; 4099][..])] {
        let twice = (0..n)
            .filter(|&i| (a[i] * b[i] + addend[i]).to_bits() != want[i].to_bits())
            .count();
        assert!(
            twice > n / 20,
            "only {twice} of {n} inputs tell a*b+c rounded twice apart"
        );
    }
    let feeds = [("a", a), ("b", b), ("c", c), ("k", k)].map(|(name, v)| feed(name, v));
    check_against_every_mode(
        "fma(a, b, c), fma(a, b, k)",
        &g,
        &feeds,
        &[want1, want2],
        EXACT,
    );
}
