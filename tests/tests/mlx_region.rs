//! Fused regions on the MLX plugin: ElementwiseRegion (every chain step
//! kind, scalar inputs, flat-modulus broadcasting, the ResizeNearest2x
//! prologue), TransformRegion and BatchElementwiseRegion, against rlx-cpu.
//!
//! The reference. By default rlx-runtime's CPU pipeline *unfuses* every
//! ElementwiseRegion back into ordinary ops before running it (numpy
//! broadcasting, standalone op formulas, a rounding per op for halves),
//! which is not the region's own semantics. So the reference here compiles
//! the graph with `keep_elementwise_regions`, which makes rlx-cpu execute the
//! region in its native interpreter (`region_eval_elem`): flat `gid %
//! modulus` reads, the region formulas (tanh-approximate Gelu), f32
//! throughout. `cpu_reference_is_the_native_interpreter` proves the
//! reference really takes that path, against a plain-Rust reference.
//!
//! The native interpreter cannot run the ResizeNearest2x prologue (it
//! compiles that region to a no-op, i.e. zeros), so prologue regions are
//! checked against the default pipeline (which decomposes them into
//! ResizeNearest2x + ops) on inputs where numpy broadcasting and the flat
//! modulus agree, and against a plain-Rust reference.

use rlx_ir::op::{
    Activation, BinaryOp, ChainOperand as O, ChainStep as S, CmpOp, RegionPrologue, TransformStep,
};
use rlx_ir::{DType as IrDType, Graph, NodeId, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{
    check_against, leaves, mlx, random_values, run_cpu, run_mlx, Feed, Tol, ALL_ACTIVATIONS,
};

// ── helpers ────────────────────────────────────────────────────────────

fn sh(dims: &[usize], d: IrDType) -> Shape {
    Shape::new(dims, d)
}

/// rlx-cpu with regions kept: its native region interpreter runs them.
fn run_cpu_native(g: &Graph, feeds: &[Feed]) -> Vec<Vec<f32>> {
    let ls = leaves(g);
    let mut opts = rlx_runtime::CompileOptions::new();
    opts.fusion_opts.keep_elementwise_regions = true;
    opts.fusion_opts.unfuse_elementwise_regions = false;
    let mut compiled =
        rlx_runtime::Session::new(rlx_runtime::Device::Cpu).compile_with(g.clone(), &opts);
    let mut inputs: Vec<(&str, &[f32])> = Vec::new();
    for f in feeds {
        let l = ls
            .iter()
            .find(|l| l.name == f.name)
            .expect("feed names a leaf");
        if l.is_param {
            compiled.set_param(&f.name, &f.values);
        } else {
            inputs.push((f.name.as_str(), &f.values));
        }
    }
    compiled.run(&inputs)
}

/// Feeds for every leaf, leaf `i` uniform in `ranges[i]` (the last range
/// repeats), rounded to its dtype.
fn feeds_in(g: &Graph, ranges: &[(f32, f32)], seed: u64) -> Vec<Feed> {
    leaves(g)
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let (lo, hi) = ranges[i.min(ranges.len() - 1)];
            Feed {
                name: l.name.clone(),
                values: random_values(
                    l.dims.iter().product(),
                    l.dtype,
                    lo,
                    hi,
                    seed.wrapping_add(i as u64 * 7919),
                ),
            }
        })
        .collect()
}

struct Region {
    chain: Vec<S>,
    scalar_mask: u32,
    modulus: Vec<u32>,
    prologue: RegionPrologue,
    prologue_input: u32,
}

impl Region {
    fn new(chain: Vec<S>) -> Region {
        Region {
            chain,
            scalar_mask: 0,
            modulus: vec![],
            prologue: RegionPrologue::None,
            prologue_input: 0,
        }
    }
    fn modulus(mut self, m: &[u32]) -> Region {
        self.modulus = m.to_vec();
        self
    }
    fn scalars(mut self, mask: u32) -> Region {
        self.scalar_mask = mask;
        self
    }
    fn prologue(mut self, input: u32) -> Region {
        self.prologue = RegionPrologue::ResizeNearest2x;
        self.prologue_input = input;
        self
    }
    fn moduli(&self) -> [u32; 16] {
        let mut m = [0u32; 16];
        m[..self.modulus.len()].copy_from_slice(&self.modulus);
        m
    }
    fn op(&self, num_inputs: usize) -> Op {
        Op::ElementwiseRegion {
            chain: self.chain.clone(),
            num_inputs: num_inputs as u32,
            scalar_input_mask: self.scalar_mask,
            input_modulus: self.moduli(),
            prologue: self.prologue,
            prologue_input: self.prologue_input,
        }
    }
}

/// A graph of one ElementwiseRegion over inputs `x0, x1, ...` of the given
/// shapes (all of dtype `dt`), output `out` of dtype `dt`.
fn region_graph(r: &Region, ins: &[&[usize]], out: &[usize], dt: IrDType) -> Graph {
    let mut g = Graph::new("region");
    let ids: Vec<NodeId> = ins
        .iter()
        .enumerate()
        .map(|(i, d)| g.input(format!("x{i}"), sh(d, dt)))
        .collect();
    let y = g.add_node(r.op(ins.len()), ids, sh(out, dt));
    g.set_outputs(vec![y]);
    g
}

/// Check the plugin (all modes) against rlx-cpu's native region
/// interpreter on `feeds`.
fn check_native(what: &str, g: &Graph, feeds: &[Feed], tol: Tol) {
    let reference = run_cpu_native(g, feeds);
    check_against(what, g, feeds, &reference, tol);
}

const F32: Tol = Tol {
    abs: 1e-5,
    rel: 1e-5,
};

fn tol(dt: IrDType) -> Tol {
    Tol::for_dtype(dt)
}

fn compile_error(g: &Graph) -> String {
    let text = rlx_ir::rlxmodel::to_text(g).expect("graph to text");
    match mlx().compile(&text, Mode::Lazy) {
        Ok(_) => panic!("compiling {} should fail", g.name),
        Err(e) => e.message,
    }
}

// ── the reference itself ───────────────────────────────────────────────

/// The region semantics, in plain Rust, for one chain
/// `gelu(x0) + x1` with x1 read at `gid % m`.
fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + (0.797_884_6f32 * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn cpu_reference_is_the_native_interpreter() {
    // out [1, 4, 6]; x1 is [1, 4, 1] with modulus 4: the region reads
    // x1[gid % 4], which varies along the last axis, where numpy
    // broadcasting would read x1[c]. Gelu inside a region is the tanh form.
    let (c, t) = (4usize, 6usize);
    let r = Region::new(vec![
        S::Activation(Activation::Gelu, O::Input(0)),
        S::Binary(BinaryOp::Add, O::Step(0), O::Input(1)),
    ])
    .modulus(&[0, c as u32]);
    let g = region_graph(&r, &[&[1, c, t], &[1, c, 1]], &[1, c, t], IrDType::F32);
    let feeds = feeds_in(&g, &[(-3.0, 3.0)], 5);
    let (x0, x1) = (&feeds[0].values, &feeds[1].values);
    let want: Vec<f32> = (0..c * t)
        .map(|gid| gelu_tanh(x0[gid]) + x1[gid % c])
        .collect();
    let native = run_cpu_native(&g, &feeds);
    rlx_plugin_tests::parity::assert_close("cpu native vs plain Rust", &native[0], &want, F32);
    // The default pipeline unfuses (numpy broadcast, erf Gelu): different.
    let unfused = run_cpu(&g, &feeds);
    let differs = unfused[0]
        .iter()
        .zip(&want)
        .any(|(a, b)| (a - b).abs() > 1e-3);
    assert!(
        differs,
        "the unfused CPU path should differ from the region semantics"
    );
    check_against("gelu + flat-modulus bias", &g, &feeds, &[want], F32);
}

// ── chain steps ────────────────────────────────────────────────────────

/// A sensible input range for each activation.
fn act_range(a: Activation) -> (f32, f32) {
    match a {
        Activation::Log | Activation::Sqrt | Activation::Rsqrt => (0.05, 4.0),
        Activation::Recip => (0.1, 3.0),
        Activation::Tan => (-1.2, 1.2),
        _ => (-4.0, 4.0),
    }
}

#[test]
fn every_activation_step() {
    let shapes: &[&[usize]] = &[&[7], &[3, 5], &[2, 3, 11], &[2, 3, 5, 7]];
    for (k, &a) in ALL_ACTIVATIONS.iter().enumerate() {
        for (j, &s) in shapes.iter().enumerate() {
            // act(x0) * x1 + x1: the activation feeds later steps.
            let r = Region::new(vec![
                S::Activation(a, O::Input(0)),
                S::Binary(BinaryOp::Mul, O::Step(0), O::Input(1)),
                S::Binary(BinaryOp::Add, O::Step(1), O::Input(1)),
            ]);
            let g = region_graph(&r, &[s, s], s, IrDType::F32);
            let feeds = feeds_in(&g, &[act_range(a), (0.5, 2.0)], 100 + (k * 10 + j) as u64);
            check_native(&format!("{a:?} {s:?}"), &g, &feeds, F32);
        }
    }
}

/// An op and the input ranges of its two operands.
type BinaryCase = (BinaryOp, (f32, f32), (f32, f32));

#[test]
fn every_binary_step() {
    use BinaryOp::*;
    let cases: &[BinaryCase] = &[
        (Add, (-1.0, 1.0), (-1.0, 1.0)),
        (Sub, (-1.0, 1.0), (-1.0, 1.0)),
        (Mul, (-1.0, 1.0), (-1.0, 1.0)),
        (Div, (-1.0, 1.0), (0.2, 2.0)),
        (Max, (-1.0, 1.0), (-1.0, 1.0)),
        (Min, (-1.0, 1.0), (-1.0, 1.0)),
        (Pow, (0.1, 3.0), (-2.0, 2.0)),
        (Mod, (-10.0, 10.0), (0.5, 3.0)),
        (Mod, (-10.0, 10.0), (-3.0, -0.5)),
        (Atan2, (-1.0, 1.0), (-1.0, 1.0)),
        (BitAnd, (-100.0, 100.0), (-100.0, 100.0)),
        (BitOr, (-100.0, 100.0), (-100.0, 100.0)),
        (BitXor, (-100.0, 100.0), (-100.0, 100.0)),
        (Shl, (-100.0, 100.0), (-3.0, 70.0)),
        (Shr, (-1000.0, 1000.0), (-3.0, 70.0)),
    ];
    let shapes: &[&[usize]] = &[&[13], &[4, 9], &[3, 1, 7]];
    for (k, (op, ra, rb)) in cases.iter().enumerate() {
        for (j, &s) in shapes.iter().enumerate() {
            // (x0 op x1) then a step reading the result and an input.
            let r = Region::new(vec![
                S::Binary(*op, O::Input(0), O::Input(1)),
                S::Binary(BinaryOp::Sub, O::Step(0), O::Input(0)),
            ]);
            let g = region_graph(&r, &[s, s], s, IrDType::F32);
            let feeds = feeds_in(&g, &[*ra, *rb], 300 + (k * 10 + j) as u64);
            check_native(&format!("{op:?} {s:?}"), &g, &feeds, F32);
        }
    }
}

#[test]
fn compare_where_and_cast_steps() {
    let s: &[usize] = &[5, 7];
    for (k, op) in [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ]
    .into_iter()
    .enumerate()
    {
        // where(round(x0) cmp round(x1), x0, x1 * 2) + (round(x0) cmp round(x1)):
        // rounding makes equal pairs common, so Eq/Le/Ge see ties.
        let r = Region::new(vec![
            S::Activation(Activation::Round, O::Input(0)),
            S::Activation(Activation::Round, O::Input(1)),
            S::Compare(op, O::Step(0), O::Step(1)),
            S::Binary(BinaryOp::Add, O::Input(1), O::Input(1)),
            S::Where(O::Step(2), O::Input(0), O::Step(3)),
            S::Binary(BinaryOp::Add, O::Step(4), O::Step(2)),
        ]);
        let g = region_graph(&r, &[s, s], s, IrDType::F32);
        let feeds = feeds_in(&g, &[(-2.0, 2.0)], 500 + k as u64);
        check_native(&format!("Compare {op:?} + Where"), &g, &feeds, F32);
    }

    // Where on a float condition: nonzero is true (here x0 is often 0).
    let r = Region::new(vec![
        S::Activation(Activation::Relu, O::Input(0)),
        S::Where(O::Step(0), O::Input(1), O::Input(2)),
    ]);
    let g = region_graph(&r, &[s, s, s], s, IrDType::F32);
    let feeds = feeds_in(&g, &[(-1.0, 1.0)], 510);
    check_native("Where on a float condition", &g, &feeds, F32);

    // Cast steps change the value, not the f32 lane.
    for (k, to) in [
        IrDType::F32,
        IrDType::F16,
        IrDType::BF16,
        IrDType::I8,
        IrDType::I16,
        IrDType::I32,
        IrDType::I64,
        IrDType::U8,
        IrDType::U32,
        IrDType::Bool,
    ]
    .into_iter()
    .enumerate()
    {
        // x0 + cast(x0 * x1): x1 spans wide ranges so int casts saturate.
        // (The region's IR dtype is its last step's left operand's: x0.)
        let r = Region::new(vec![
            S::Binary(BinaryOp::Mul, O::Input(0), O::Input(1)),
            S::Cast(to, O::Step(0)),
            S::Binary(BinaryOp::Add, O::Input(0), O::Step(1)),
        ]);
        for (j, &(lo, hi)) in [
            (-3.0f32, 3.0f32),
            (-400.0, 400.0),
            (-1e5, 1e5),
            (-1e10, 1e10),
        ]
        .iter()
        .enumerate()
        {
            let g = region_graph(&r, &[s, s], s, IrDType::F32);
            let feeds = feeds_in(&g, &[(-1.0, 1.0), (lo, hi)], 520 + (k * 10 + j) as u64);
            check_native(&format!("Cast {to:?} range {lo}..{hi}"), &g, &feeds, F32);
        }
    }
}

#[test]
fn long_chain_with_shared_steps() {
    // A 12-step chain where steps are read several times.
    let r = Region::new(vec![
        S::Binary(BinaryOp::Mul, O::Input(0), O::Input(1)), // 0
        S::Binary(BinaryOp::Add, O::Step(0), O::Input(2)),  // 1
        S::Activation(Activation::Silu, O::Step(1)),        // 2
        S::Activation(Activation::Tanh, O::Step(0)),        // 3
        S::Binary(BinaryOp::Max, O::Step(2), O::Step(3)),   // 4
        S::Compare(CmpOp::Gt, O::Step(4), O::Input(2)),     // 5
        S::Activation(Activation::Exp, O::Step(3)),         // 6
        S::Where(O::Step(5), O::Step(6), O::Step(4)),       // 7
        S::Binary(BinaryOp::Div, O::Step(7), O::Step(6)),   // 8
        S::Activation(Activation::Sigmoid, O::Step(8)),     // 9
        S::Binary(BinaryOp::Min, O::Step(9), O::Step(1)),   // 10
        S::Binary(BinaryOp::Sub, O::Step(10), O::Step(4)),  // 11
    ]);
    for (j, s) in [&[1usize][..], &[17], &[3, 8, 5]].into_iter().enumerate() {
        let g = region_graph(&r, &[s, s, s], s, IrDType::F32);
        let feeds = feeds_in(&g, &[(-2.0, 2.0)], 600 + j as u64);
        check_native(&format!("long chain {s:?}"), &g, &feeds, F32);
    }
}

// ── scalar inputs and flat-modulus broadcasting ────────────────────────

#[test]
fn scalar_inputs() {
    // (x0 - s1) * s2, the scalars [1]-shaped with their mask bits set.
    let r = Region::new(vec![
        S::Binary(BinaryOp::Sub, O::Input(0), O::Input(1)),
        S::Binary(BinaryOp::Mul, O::Step(0), O::Input(2)),
    ])
    .scalars(0b110)
    .modulus(&[0, 1, 1]);
    for (j, s) in [&[1usize][..], &[7], &[3, 5], &[2, 3, 4], &[2, 3, 5, 7]]
        .into_iter()
        .enumerate()
    {
        let g = region_graph(&r, &[s, &[1], &[1]], s, IrDType::F32);
        let feeds = feeds_in(&g, &[(-1.0, 1.0)], 700 + j as u64);
        check_native(&format!("scalars onto {s:?}"), &g, &feeds, F32);
    }
    // A scalar-mask input with more elements reads element 0.
    let g = region_graph(&r, &[&[4, 6], &[3], &[2, 2]], &[4, 6], IrDType::F32);
    let feeds = feeds_in(&g, &[(-1.0, 1.0)], 710);
    check_native("scalar mask on multi-element inputs", &g, &feeds, F32);
    // Steps that read only scalars, broadcast when they meet x0.
    let r = Region::new(vec![
        S::Activation(Activation::Exp, O::Input(1)),
        S::Binary(BinaryOp::Mul, O::Input(2), O::Step(0)),
        S::Binary(BinaryOp::Add, O::Input(0), O::Step(1)),
    ])
    .scalars(0b110)
    .modulus(&[0, 1, 1]);
    let g = region_graph(&r, &[&[3, 5], &[1], &[1]], &[3, 5], IrDType::F32);
    let feeds = feeds_in(&g, &[(-1.0, 1.0)], 711);
    check_native("scalar-only steps", &g, &feeds, F32);
}

#[test]
fn modulus_broadcasting() {
    // (out dims, input-1 dims, modulus of input 1)
    let cases: &[(&[usize], &[usize], u32)] = &[
        // Trailing broadcasts (numpy and the flat rule agree).
        (&[3, 5], &[5], 5),
        (&[2, 3, 7], &[3, 7], 21),
        (&[2, 3, 5, 7], &[7], 7),
        (&[2, 3, 5, 7], &[1, 5, 7], 35),
        (&[4, 1, 6], &[1, 6], 6),
        // Not trailing: the flat rule tiles `gid % m` across the output.
        (&[1, 4, 6], &[1, 4, 1], 4),
        (&[2, 3, 5], &[2, 1, 1], 2),
        (&[3, 7, 2], &[3, 1, 1], 3),
        (&[2, 5, 9], &[5, 1], 5),
        // Moduli that do not divide the output, or exceed it.
        (&[10], &[4], 4),
        (&[3, 7], &[5], 5),
        (&[2, 3], &[6], 60),
        // An input larger than its period: only the first m elements are read.
        (&[3, 5], &[3, 5], 5),
        (&[6, 4], &[30], 7),
    ];
    for (j, (out, in1, m)) in cases.iter().enumerate() {
        // x0 * 2 + x1, then relu, with x1 read at gid % m.
        let r = Region::new(vec![
            S::Binary(BinaryOp::Add, O::Input(0), O::Input(0)),
            S::Binary(BinaryOp::Add, O::Step(0), O::Input(1)),
            S::Activation(Activation::Relu, O::Step(1)),
            S::Binary(BinaryOp::Mul, O::Step(2), O::Input(1)),
        ])
        .modulus(&[0, *m]);
        let g = region_graph(&r, &[out, in1], out, IrDType::F32);
        let feeds = feeds_in(&g, &[(-1.0, 1.0)], 800 + j as u64);
        // Independent check of the flat rule, in plain Rust.
        let (x0, x1) = (&feeds[0].values, &feeds[1].values);
        let len: usize = out.iter().product();
        let want: Vec<f32> = (0..len)
            .map(|gid| {
                let b = x1[if (*m as usize) < len {
                    gid % *m as usize
                } else {
                    gid
                }];
                ((x0[gid] + x0[gid]) + b).max(0.0) * b
            })
            .collect();
        let native = run_cpu_native(&g, &feeds);
        rlx_plugin_tests::parity::assert_close(
            &format!("cpu native {out:?} <- {in1:?} % {m}"),
            &native[0],
            &want,
            F32,
        );
        check_against(
            &format!("{out:?} <- {in1:?} % {m}"),
            &g,
            &feeds,
            &native,
            F32,
        );
    }
    // Several broadcast inputs in one region, including an operand that is
    // broadcast before it meets a full-size one (activation of a bias).
    let r = Region::new(vec![
        S::Activation(Activation::Tanh, O::Input(1)),
        S::Binary(BinaryOp::Mul, O::Step(0), O::Input(2)),
        S::Binary(BinaryOp::Add, O::Input(0), O::Step(1)),
        S::Binary(BinaryOp::Div, O::Step(2), O::Input(3)),
    ])
    .scalars(0b1000)
    .modulus(&[0, 6, 3, 1]);
    let g = region_graph(
        &r,
        &[&[2, 3, 6], &[6], &[3, 1], &[1]],
        &[2, 3, 6],
        IrDType::F32,
    );
    let feeds = feeds_in(
        &g,
        &[(-1.0, 1.0), (-1.0, 1.0), (-1.0, 1.0), (0.5, 2.0)],
        850,
    );
    check_native("mixed broadcasts", &g, &feeds, F32);
}

// ── half precision ─────────────────────────────────────────────────────

#[test]
fn half_precision_regions() {
    for dt in [IrDType::F16, IrDType::BF16] {
        // The chain runs in f32 and rounds once at the end, on both sides.
        let r = Region::new(vec![
            S::Binary(BinaryOp::Mul, O::Input(0), O::Input(1)),
            S::Activation(Activation::Gelu, O::Step(0)),
            S::Binary(BinaryOp::Add, O::Step(1), O::Input(2)),
            S::Activation(Activation::Sigmoid, O::Step(2)),
            S::Binary(BinaryOp::Sub, O::Step(3), O::Input(0)),
        ])
        .scalars(0b100)
        .modulus(&[0, 5, 1]);
        for (j, s) in [&[5usize][..], &[3, 5], &[2, 7, 5], &[2, 3, 1, 5]]
            .into_iter()
            .enumerate()
        {
            let g = region_graph(&r, &[s, &[5], &[1]], s, dt);
            let feeds = feeds_in(&g, &[(-2.0, 2.0)], 900 + j as u64);
            check_native(&format!("{dt:?} chain {s:?}"), &g, &feeds, tol(dt));
        }
        // Flat modulus in a half dtype, and a mid-chain Cast to the other
        // half dtype.
        let other = if dt == IrDType::F16 {
            IrDType::BF16
        } else {
            IrDType::F16
        };
        let r = Region::new(vec![
            S::Binary(BinaryOp::Mul, O::Input(0), O::Input(1)),
            S::Cast(other, O::Step(0)),
            S::Binary(BinaryOp::Add, O::Input(0), O::Step(1)),
        ])
        .modulus(&[0, 3]);
        let g = region_graph(&r, &[&[1, 3, 7], &[1, 3, 1]], &[1, 3, 7], dt);
        // x1 is read at gid % 3 over [1, 3, 7] (flat tiling, not per channel).
        let feeds = feeds_in(&g, &[(-3.0, 3.0)], 950);
        check_native(&format!("{dt:?} flat modulus + cast"), &g, &feeds, tol(dt));
    }
    // Half inputs into an f32 result (the final Cast types the region f32):
    // no rounding but the inputs'.
    let mut g = Graph::new("mixed");
    let a = g.input("a", sh(&[4, 6], IrDType::F16));
    let b = g.input("b", sh(&[6], IrDType::BF16));
    let r = Region::new(vec![
        S::Binary(BinaryOp::Mul, O::Input(0), O::Input(1)),
        S::Activation(Activation::Exp, O::Step(0)),
        S::Cast(IrDType::F32, O::Step(1)),
    ])
    .modulus(&[0, 6]);
    let y = g.add_node(r.op(2), vec![a, b], sh(&[4, 6], IrDType::F32));
    g.set_outputs(vec![y]);
    let feeds = feeds_in(&g, &[(-1.0, 1.0)], 960);
    check_native("f16 x bf16 -> f32", &g, &feeds, F32);
}

// ── the ResizeNearest2x prologue ───────────────────────────────────────

/// out[n, c, y, x] = v[n, c, y / 2, x / 2] for NCHW `dims` of `v`.
fn resize2x_ref(v: &[f32], dims: [usize; 4]) -> Vec<f32> {
    let [n, c, h, w] = dims;
    let mut out = Vec::with_capacity(n * c * h * w * 4);
    for ni in 0..n {
        for ci in 0..c {
            for y in 0..2 * h {
                for x in 0..2 * w {
                    out.push(v[((ni * c + ci) * h + y / 2) * w + x / 2]);
                }
            }
        }
    }
    out
}

#[test]
fn resize_prologue() {
    for (j, (n, c, h, w)) in [(1usize, 3usize, 4usize, 5usize), (2, 2, 3, 3), (1, 1, 1, 1)]
        .into_iter()
        .enumerate()
    {
        let out = [n, c, 2 * h, 2 * w];
        // relu(up(x0)) * x1 + x2, x2 a trailing [2w] bias.
        let r = Region::new(vec![
            S::Activation(Activation::Relu, O::Input(0)),
            S::Binary(BinaryOp::Mul, O::Step(0), O::Input(1)),
            S::Binary(BinaryOp::Add, O::Step(1), O::Input(2)),
        ])
        .modulus(&[0, 0, 2 * w as u32])
        .prologue(0);
        let g = region_graph(&r, &[&[n, c, h, w], &out, &[2 * w]], &out, IrDType::F32);
        let feeds = feeds_in(&g, &[(-1.0, 1.0)], 1000 + j as u64);
        // Plain-Rust reference of the region with its prologue.
        let up = resize2x_ref(&feeds[0].values, [n, c, h, w]);
        let (x1, x2) = (&feeds[1].values, &feeds[2].values);
        let want: Vec<f32> = (0..up.len())
            .map(|gid| up[gid].max(0.0) * x1[gid] + x2[gid % (2 * w)])
            .collect();
        // rlx-cpu's default pipeline decomposes the prologue into
        // ResizeNearest2x + the chain; it must agree with the plain reference.
        let cpu = run_cpu(&g, &feeds);
        rlx_plugin_tests::parity::assert_close(
            &format!("cpu resize prologue {out:?}"),
            &cpu[0],
            &want,
            F32,
        );
        check_against(&format!("resize prologue {out:?}"), &g, &feeds, &cpu, F32);
    }
    // f16: the upsample is exact, the chain rounds once.
    let r = Region::new(vec![
        S::Activation(Activation::Sigmoid, O::Input(0)),
        S::Binary(BinaryOp::Mul, O::Step(0), O::Input(1)),
    ])
    .prologue(0);
    let dt = IrDType::F16;
    let g = region_graph(&r, &[&[1, 2, 3, 3], &[1, 2, 6, 6]], &[1, 2, 6, 6], dt);
    let feeds = feeds_in(&g, &[(-2.0, 2.0)], 1010);
    let up = resize2x_ref(&feeds[0].values, [1, 2, 3, 3]);
    let want: Vec<f32> = up
        .iter()
        .zip(&feeds[1].values)
        .map(|(u, b)| 1.0 / (1.0 + (-u).exp()) * b)
        .collect();
    let want = rlx_plugin_tests::parity::round_to(&want, dt);
    check_against("f16 resize prologue", &g, &feeds, &[want], tol(dt));
}

// ── TransformRegion ────────────────────────────────────────────────────

#[test]
fn transform_region() {
    for dt in [IrDType::F32, IrDType::F16, IrDType::BF16] {
        for (j, (dims, steps)) in [
            ([1usize, 3usize, 4usize, 5usize], 1usize),
            ([2, 2, 3, 3], 2),
            ([1, 1, 1, 7], 3),
            ([3, 5, 2, 1], 0),
        ]
        .into_iter()
        .enumerate()
        {
            let scale = 1usize << steps;
            let out = [dims[0], dims[1], dims[2] * scale, dims[3] * scale];
            let mut g = Graph::new("transform");
            let x = g.input("x", sh(&dims, dt));
            let ops = (0..steps)
                .map(|k| {
                    // rlx writes Input(0) for every step; Step(k-1) means the same.
                    TransformStep::ResizeNearest2x(if k % 2 == 0 {
                        O::Input(0)
                    } else {
                        O::Step(k as u32 - 1)
                    })
                })
                .collect();
            let y = g.add_node(
                Op::TransformRegion {
                    steps: ops,
                    num_inputs: 1,
                },
                vec![x],
                sh(&out, dt),
            );
            g.set_outputs(vec![y]);
            let feeds = feeds_in(&g, &[(-1.0, 1.0)], 1100 + j as u64);
            let mut want = feeds[0].values.clone();
            let mut d = dims;
            for _ in 0..steps {
                want = resize2x_ref(&want, d);
                d = [d[0], d[1], d[2] * 2, d[3] * 2];
            }
            // Pure data movement: exact.
            let exact = Tol { abs: 0.0, rel: 0.0 };
            // rlx-cpu decomposes it into ResizeNearest2x steps.
            let cpu = run_cpu(&g, &feeds);
            rlx_plugin_tests::parity::assert_close(
                &format!("cpu transform {dt:?} {dims:?} x{steps}"),
                &cpu[0],
                &want,
                exact,
            );
            check_against(
                &format!("transform {dt:?} {dims:?} x{steps}"),
                &g,
                &feeds,
                &[want],
                exact,
            );
        }
    }
}

// ── BatchElementwiseRegion ─────────────────────────────────────────────

fn batch_op(chain: Vec<S>, b: usize, mask: u32, m0: u32, prologue: RegionPrologue) -> Op {
    let mut input_modulus = [0u32; 16];
    input_modulus[0] = m0;
    Op::BatchElementwiseRegion {
        chain,
        num_batch_inputs: b as u32,
        scalar_input_mask: mask,
        input_modulus,
        prologue,
        prologue_input: 0,
    }
}

#[test]
fn batch_region() {
    let chain = vec![
        S::Activation(Activation::Silu, O::Input(0)),
        S::Binary(BinaryOp::Mul, O::Step(0), O::Input(0)),
        S::Activation(Activation::Tanh, O::Step(1)),
    ];
    for dt in [IrDType::F32, IrDType::F16, IrDType::BF16] {
        for (j, (b, c, h, w)) in [(3usize, 2usize, 3usize, 5usize), (1, 1, 1, 1), (2, 3, 7, 1)]
            .into_iter()
            .enumerate()
        {
            let mut g = Graph::new("batch");
            let ins: Vec<NodeId> = (0..b)
                .map(|i| g.input(format!("x{i}"), sh(&[1, c, h, w], dt)))
                .collect();
            let y = g.add_node(
                batch_op(chain.clone(), b, 0, 0, RegionPrologue::None),
                ins,
                sh(&[b, c, h, w], dt),
            );
            g.set_outputs(vec![y]);
            let feeds = feeds_in(&g, &[(-2.0, 2.0)], 1200 + j as u64);
            check_native(
                &format!("batch {dt:?} {b}x[{c},{h},{w}]"),
                &g,
                &feeds,
                tol(dt),
            );
        }
    }
    // The flat rule on each slice: modulus c reads the first c elements of
    // the [1, c, h, w] slice input, tiled. (rlx's verifier requires the slice
    // input to have the slice's shape, so this is the only way a batch
    // region broadcasts.)
    let (b, c, h, w) = (2usize, 3usize, 2usize, 5usize);
    let mut g = Graph::new("batch_mod");
    let ins: Vec<NodeId> = (0..b)
        .map(|i| g.input(format!("x{i}"), sh(&[1, c, h, w], IrDType::F32)))
        .collect();
    let y = g.add_node(
        batch_op(chain.clone(), b, 0, c as u32, RegionPrologue::None),
        ins,
        sh(&[b, c, h, w], IrDType::F32),
    );
    g.set_outputs(vec![y]);
    let feeds = feeds_in(&g, &[(-2.0, 2.0)], 1250);
    check_native("batch with modulus", &g, &feeds, F32);
    // And with the scalar bit: every slice reads its element 0.
    let mut g = Graph::new("batch_scalar");
    let ins: Vec<NodeId> = (0..b)
        .map(|i| g.input(format!("x{i}"), sh(&[1, c, h, w], IrDType::F32)))
        .collect();
    let y = g.add_node(
        batch_op(chain.clone(), b, 1, 1, RegionPrologue::None),
        ins,
        sh(&[b, c, h, w], IrDType::F32),
    );
    g.set_outputs(vec![y]);
    let feeds = feeds_in(&g, &[(-2.0, 2.0)], 1251);
    check_native("batch with the scalar bit", &g, &feeds, F32);

    // With the ResizeNearest2x prologue on every slice.
    for (j, (b, c, h, w)) in [(2usize, 2usize, 3usize, 4usize), (3, 1, 1, 3)]
        .into_iter()
        .enumerate()
    {
        let mut g = Graph::new("batch_resize");
        let ins: Vec<NodeId> = (0..b)
            .map(|i| g.input(format!("x{i}"), sh(&[1, c, h, w], IrDType::F32)))
            .collect();
        let y = g.add_node(
            batch_op(chain.clone(), b, 0, 0, RegionPrologue::ResizeNearest2x),
            ins,
            sh(&[b, c, 2 * h, 2 * w], IrDType::F32),
        );
        g.set_outputs(vec![y]);
        let feeds = feeds_in(&g, &[(-2.0, 2.0)], 1260 + j as u64);
        // Plain-Rust reference: resize each slice, apply the chain, concat.
        let mut want = Vec::new();
        for f in &feeds {
            for u in resize2x_ref(&f.values, [1, c, h, w]) {
                let s = u / (1.0 + (-u).exp());
                want.push((s * u).tanh());
            }
        }
        let native = run_cpu_native(&g, &feeds);
        rlx_plugin_tests::parity::assert_close(
            &format!("cpu batch resize {b}x[{c},{h},{w}]"),
            &native[0],
            &want,
            F32,
        );
        check_against(
            &format!("batch resize {b}x[{c},{h},{w}]"),
            &g,
            &feeds,
            &native,
            F32,
        );
    }
}

// ── variants that are not lowered ──────────────────────────────────────

#[test]
fn unsupported_variants_fail_at_compile_naming_the_node() {
    let f = IrDType::F32;
    let relu = || vec![S::Activation(Activation::Relu, O::Input(0))];
    let expect = |g: &Graph, node: &str, kind: &str| {
        let e = compile_error(g);
        assert!(
            e.contains(node) && e.contains(kind) && e.contains("not supported"),
            "{}: {e}",
            g.name
        );
    };

    // An empty chain.
    let g = region_graph(&Region::new(vec![]), &[&[4]], &[4], f);
    expect(&g, "node %1", "ElementwiseRegion");

    // A step reading a later step.
    let r = Region::new(vec![
        S::Binary(BinaryOp::Add, O::Input(0), O::Step(1)),
        S::Activation(Activation::Relu, O::Step(0)),
    ]);
    let g = region_graph(&r, &[&[4]], &[4], f);
    expect(&g, "node %1", "ElementwiseRegion");

    // The prologue on an input other than 0.
    let r = Region::new(vec![S::Binary(BinaryOp::Add, O::Input(0), O::Input(1))]).prologue(1);
    let g = region_graph(&r, &[&[1, 1, 4, 4], &[1, 1, 2, 2]], &[1, 1, 4, 4], f);
    expect(&g, "node %2", "ElementwiseRegion");

    // An input too small for what the output reads (modulus 0, fewer
    // elements than the output): rlx-cpu would read out of bounds.
    let g = region_graph(&Region::new(relu()), &[&[3]], &[6], f);
    expect(&g, "node %1", "ElementwiseRegion");

    // More inputs than rlx's 16 input moduli.
    let shapes: Vec<&[usize]> = vec![&[4]; 17];
    let g = region_graph(&Region::new(relu()), &shapes, &[4], f);
    expect(&g, "node %17", "ElementwiseRegion");

    // A bool input (rlx-cpu reads its bytes as f32 lanes: no reference).
    let mut g = Graph::new("bool_input");
    let x = g.input("x", sh(&[4], IrDType::Bool));
    let y = g.add_node(Region::new(relu()).op(1), vec![x], sh(&[4], f));
    g.set_outputs(vec![y]);
    expect(&g, "node %1", "ElementwiseRegion");

    // A TransformRegion step reading something other than the running value.
    let mut g = Graph::new("transform_branch");
    let x = g.input("x", sh(&[1, 1, 2, 2], f));
    let y = g.add_node(
        Op::TransformRegion {
            steps: vec![
                TransformStep::ResizeNearest2x(O::Input(0)),
                TransformStep::ResizeNearest2x(O::Step(5)),
            ],
            num_inputs: 1,
        },
        vec![x],
        sh(&[1, 1, 8, 8], f),
    );
    g.set_outputs(vec![y]);
    expect(&g, "node %1", "TransformRegion");

    // A BatchElementwiseRegion whose output is not [B, C, H, W].
    let mut g = Graph::new("batch_rank3");
    let a = g.input("a", sh(&[1, 2, 3], f));
    let b = g.input("b", sh(&[1, 2, 3], f));
    let y = g.add_node(
        batch_op(relu(), 2, 0, 0, RegionPrologue::None),
        vec![a, b],
        sh(&[2, 2, 3], f),
    );
    g.set_outputs(vec![y]);
    expect(&g, "node %2", "BatchElementwiseRegion");

    // And the runtime path reports the same error without crashing.
    let g = region_graph(&Region::new(vec![]), &[&[4]], &[4], f);
    let feeds = feeds_in(&g, &[(-1.0, 1.0)], 1);
    for mode in [Mode::Eager, Mode::Compiled] {
        let e = run_mlx(&g, &feeds, mode).expect_err("empty chain fails");
        assert!(e.message.contains("not supported"), "{e}");
    }
}

// ── integer inputs ─────────────────────────────────────────────────────

#[test]
fn i32_and_u32_inputs() {
    // rlx-cpu keeps I32/U32 tensors as integers and casts them to f32 around
    // the region; an integer condition is true when nonzero.
    for (k, dt) in [IrDType::I32, IrDType::U32].into_iter().enumerate() {
        let mut g = Graph::new("int_inputs");
        let c = g.input("c", sh(&[2, 5], dt));
        let a = g.input("a", sh(&[2, 5], IrDType::F32));
        let b = g.input("b", sh(&[5], IrDType::F32));
        let r = Region::new(vec![
            S::Where(O::Input(0), O::Input(1), O::Input(2)),
            S::Binary(BinaryOp::Add, O::Step(0), O::Input(0)),
        ])
        .modulus(&[0, 0, 5]);
        let y = g.add_node(r.op(3), vec![c, a, b], sh(&[2, 5], IrDType::F32));
        g.set_outputs(vec![y]);
        let mut feeds = feeds_in(&g, &[(-1.0, 1.0)], 1300 + k as u64);
        feeds[0].values = vec![1., 0., 3., 0., 1., 7., 0., 0., 2., 100_000.];
        // Independent reference.
        let (cv, av, bv) = (&feeds[0].values, &feeds[1].values, &feeds[2].values);
        let want: Vec<f32> = (0..10)
            .map(|i| if cv[i] != 0.0 { av[i] } else { bv[i % 5] } + cv[i])
            .collect();
        let native = run_cpu_native(&g, &feeds);
        rlx_plugin_tests::parity::assert_close(
            &format!("cpu {dt:?} inputs"),
            &native[0],
            &want,
            F32,
        );
        check_against(&format!("{dt:?} inputs"), &g, &feeds, &native, F32);
    }
}
