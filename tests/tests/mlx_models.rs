//! Whole-model parity: small graphs built with rlx-ir's builders, run on
//! the MLX plugin in every mode (lazy, eager, compiled) against
//! rlx-runtime's CPU backend (which may fuse ops internally: its answer is
//! still rlx's).
//!
//! Tolerances are the harness's per-dtype ones (f32 1e-5, f16 2e-3, bf16
//! 1.6e-2, abs and rel) even for the whole block: the worst element measured
//! at about 1% of the f32 bound and 20% of the f16/bf16 bounds (the CPU
//! reference runs low-precision graphs in f32; MLX rounds intermediates to
//! the dtype).

use rlx_ir::op::{Activation, BinaryOp, MaskKind, RopeStyle};
use rlx_ir::{DType as IrDType, Graph, NodeId, Op, Shape};
use rlx_plugin_tests::parity::{
    check_against_every_mode, random_feeds, random_values, round_to, run_cpu, Feed, Tol,
};

const DTYPES: [IrDType; 3] = [IrDType::F32, IrDType::F16, IrDType::BF16];

fn s(dims: &[usize], d: IrDType) -> Shape {
    Shape::new(dims, d)
}

/// Replace a feed's values.
fn set(feeds: &mut [Feed], name: &str, values: Vec<f32>) {
    let f = feeds
        .iter_mut()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no feed {name}"));
    assert_eq!(f.values.len(), values.len(), "{name}");
    f.values = values;
}

/// Weights scaled to 1/sqrt(fan_in), as a trained layer keeps activations
/// of order 1 through the stack.
fn scale_weight(feeds: &mut [Feed], name: &str, fan_in: usize, dt: IrDType) {
    let f = feeds.iter_mut().find(|f| f.name == name).unwrap();
    let k = 1.0 / (fan_in as f32).sqrt();
    f.values = round_to(&f.values.iter().map(|v| v * k).collect::<Vec<_>>(), dt);
}

// ── (a) a 2-layer MLP ────────────────────────────────────────────────────

fn mlp(lead: &[usize], d_in: usize, d_hid: usize, d_out: usize, dt: IrDType) -> Graph {
    let mut g = Graph::new("mlp");
    let dims = |last: usize| {
        let mut v = lead.to_vec();
        v.push(last);
        v
    };
    let x = g.input("x", s(&dims(d_in), dt));
    let w1 = g.param("w1", s(&[d_in, d_hid], dt));
    let b1 = g.param("b1", s(&[d_hid], dt));
    let w2 = g.param("w2", s(&[d_hid, d_out], dt));
    let b2 = g.param("b2", s(&[d_out], dt));
    let h = g.matmul(x, w1, s(&dims(d_hid), dt));
    let h = g.binary(BinaryOp::Add, h, b1, s(&dims(d_hid), dt));
    let h = g.activation(Activation::Gelu, h, s(&dims(d_hid), dt));
    let y = g.matmul(h, w2, s(&dims(d_out), dt));
    let y = g.binary(BinaryOp::Add, y, b2, s(&dims(d_out), dt));
    g.set_outputs(vec![y]);
    g
}

#[test]
fn two_layer_mlp_parity() {
    let mut seed = 10;
    for dt in DTYPES {
        for (lead, d_in, d_hid, d_out) in [
            (&[3][..], 10, 16, 5),
            (&[2, 3][..], 7, 24, 3),
            (&[1][..], 1, 9, 1),
        ] {
            seed += 1;
            let g = mlp(lead, d_in, d_hid, d_out, dt);
            let mut feeds = random_feeds(&g, seed);
            scale_weight(&mut feeds, "w1", d_in, dt);
            scale_weight(&mut feeds, "w2", d_hid, dt);
            let reference = run_cpu(&g, &feeds);
            check_against_every_mode(
                &format!("mlp {lead:?}x{d_in}->{d_hid}->{d_out} {dt:?}"),
                &g,
                &feeds,
                &reference,
                Tol::for_dtype(dt),
            );
        }
    }
}

// ── (b) a transformer block ──────────────────────────────────────────────

/// Sizes of the block.
#[derive(Clone, Copy, Debug)]
struct Block {
    /// None: one sequence `[S, D]`; Some(b): a batch `[B, S, D]`.
    batch: Option<usize>,
    seq: usize,
    d_model: usize,
    heads: usize,
    ff: usize,
    vocab: usize,
    /// Start from token ids through an embedding Gather, or from an
    /// already-embedded input `x`.
    embed: bool,
    /// Use the fused forms (FusedResidualRmsNorm, FusedSwiGLU) for the
    /// second half of the block.
    fused: bool,
}

impl Block {
    fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }
    fn lead(&self) -> Vec<usize> {
        match self.batch {
            Some(b) => vec![b, self.seq],
            None => vec![self.seq],
        }
    }
    fn dims(&self, last: usize) -> Vec<usize> {
        let mut v = self.lead();
        v.push(last);
        v
    }
}

/// token ids → embedding Gather → RmsNorm → q/k/v projections → Rope on q
/// and k → causal attention → output projection → residual → RmsNorm →
/// SwiGLU MLP → residual → logits.
fn block_graph(c: Block, dt: IrDType) -> Graph {
    let mut g = Graph::new("block");
    let (d, ff, v) = (c.d_model, c.ff, c.vocab);
    let hd = c.head_dim();
    let sd = |last: usize| s(&c.dims(last), dt);
    let h0 = if c.embed {
        // Token ids are f32 holding integers (rlx's index convention).
        let ids = g.input("tokens", s(&c.lead(), IrDType::F32));
        let table = g.param("embed", s(&[v, d], dt));
        g.gather(table, ids, 0, sd(d))
    } else {
        g.input("x", sd(d))
    };
    let rms = |g: &mut Graph, x: NodeId, name: &str| -> NodeId {
        let gamma = g.param(format!("{name}.gamma"), s(&[d], dt));
        let beta = g.param(format!("{name}.beta"), s(&[d], dt));
        g.add_node(
            Op::RmsNorm {
                axis: -1,
                eps: 1e-5,
            },
            vec![x, gamma, beta],
            sd(d),
        )
    };
    let n1 = rms(&mut g, h0, "ln1");
    let proj = |g: &mut Graph, x: NodeId, name: &str, k: usize, n: usize| -> NodeId {
        let w = g.param(name.to_string(), s(&[k, n], dt));
        g.matmul(x, w, sd(n))
    };
    let q = proj(&mut g, n1, "wq", d, d);
    let k = proj(&mut g, n1, "wk", d, d);
    let vv = proj(&mut g, n1, "wv", d, d);
    let cos = g.param("rope.cos", s(&[c.seq, hd / 2], dt));
    let sin = g.param("rope.sin", s(&[c.seq, hd / 2], dt));
    let rope = |g: &mut Graph, x: NodeId| -> NodeId {
        g.add_node(
            Op::Rope {
                head_dim: hd,
                n_rot: hd,
                style: RopeStyle::NeoX,
            },
            vec![x, cos, sin],
            sd(d),
        )
    };
    let q = rope(&mut g, q);
    let k = rope(&mut g, k);
    let att = g.add_node(
        Op::Attention {
            num_heads: c.heads,
            head_dim: hd,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        vec![q, k, vv],
        sd(d),
    );
    let o = proj(&mut g, att, "wo", d, d);
    let h1 = g.binary(BinaryOp::Add, h0, o, sd(d));
    let down = if c.fused {
        let gamma = g.param("ln2.gamma", s(&[d], dt));
        let beta = g.param("ln2.beta", s(&[d], dt));
        let n2 = g.add_node(
            Op::FusedResidualRmsNorm {
                has_bias: false,
                eps: 1e-5,
            },
            vec![h0, o, gamma, beta],
            sd(d),
        );
        // One matmul against [up | gate], then FusedSwiGLU.
        let ug = proj(&mut g, n2, "w_up_gate", d, 2 * ff);
        let hidden = g.add_node(
            Op::FusedSwiGLU {
                cast_to: None,
                gate_first: false,
            },
            vec![ug],
            sd(ff),
        );
        proj(&mut g, hidden, "w_down", ff, d)
    } else {
        let n2 = rms(&mut g, h1, "ln2");
        let up = proj(&mut g, n2, "w_up", d, ff);
        let gate = proj(&mut g, n2, "w_gate", d, ff);
        let act = g.activation(Activation::Silu, gate, sd(ff));
        let hidden = g.binary(BinaryOp::Mul, up, act, sd(ff));
        proj(&mut g, hidden, "w_down", ff, d)
    };
    let h2 = g.binary(BinaryOp::Add, h1, down, sd(d));
    let logits = proj(&mut g, h2, "w_out", d, v);
    g.set_outputs(vec![logits]);
    g
}

/// Feeds for the block: token ids, real rope tables (theta 10000), norm
/// gains near 1, weights scaled by fan-in, the rest uniform in [-1, 1).
fn block_feeds(c: Block, g: &Graph, dt: IrDType, seed: u64) -> Vec<Feed> {
    let mut feeds = random_feeds(g, seed);
    let (d, ff, v) = (c.d_model, c.ff, c.vocab);
    let hd = c.head_dim();
    if c.embed {
        let n: usize = c.lead().iter().product();
        // Every id in range, repeats included, the last row of the table too.
        let ids = (0..n).map(|i| ((i * 7 + 3) % v) as f32).collect();
        set(&mut feeds, "tokens", ids);
    }
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in 0..c.seq {
        for i in 0..hd / 2 {
            let inv = 10000f32.powf(-(2.0 * i as f32) / hd as f32);
            cos.push((p as f32 * inv).cos());
            sin.push((p as f32 * inv).sin());
        }
    }
    set(&mut feeds, "rope.cos", round_to(&cos, dt));
    set(&mut feeds, "rope.sin", round_to(&sin, dt));
    for ln in ["ln1", "ln2"] {
        set(
            &mut feeds,
            &format!("{ln}.gamma"),
            random_values(d, dt, 0.5, 1.5, seed + 1),
        );
        let beta: Vec<f32> = random_values(d, dt, -0.1, 0.1, seed + 2);
        set(&mut feeds, &format!("{ln}.beta"), beta);
    }
    for (name, fan_in) in [
        ("wq", d),
        ("wk", d),
        ("wv", d),
        ("wo", d),
        ("w_up", d),
        ("w_gate", d),
        ("w_up_gate", d),
        ("w_down", ff),
        ("w_out", d),
    ] {
        if feeds.iter().any(|f| f.name == name) {
            scale_weight(&mut feeds, name, fan_in, dt);
        }
    }
    feeds
}

fn check_block(c: Block, dt: IrDType, seed: u64) {
    let g = block_graph(c, dt);
    let feeds = block_feeds(c, &g, dt, seed);
    let reference = run_cpu(&g, &feeds);
    check_against_every_mode(
        &format!("{c:?} {dt:?}"),
        &g,
        &feeds,
        &reference,
        Tol::for_dtype(dt),
    );
}

const BASE: Block = Block {
    batch: None,
    seq: 7,
    d_model: 16,
    heads: 2,
    ff: 24,
    vocab: 11,
    embed: false,
    fused: false,
};

#[test]
fn transformer_block_from_embedded_input_parity() {
    let mut seed = 100;
    for dt in DTYPES {
        for batch in [None, Some(2)] {
            for fused in [false, true] {
                seed += 1;
                check_block(
                    Block {
                        batch,
                        fused,
                        ..BASE
                    },
                    dt,
                    seed,
                );
            }
        }
    }
}

#[test]
fn transformer_block_from_token_ids_parity() {
    let mut seed = 200;
    for dt in DTYPES {
        for batch in [None, Some(2)] {
            for fused in [false, true] {
                seed += 1;
                check_block(
                    Block {
                        batch,
                        fused,
                        embed: true,
                        ..BASE
                    },
                    dt,
                    seed,
                );
            }
        }
    }
}

#[test]
fn transformer_block_odd_sizes_parity() {
    // One head of width 10, 5 tokens, a vocabulary of 13.
    check_block(
        Block {
            seq: 5,
            d_model: 10,
            heads: 1,
            ff: 7,
            vocab: 13,
            embed: true,
            ..BASE
        },
        IrDType::F32,
        300,
    );
    // Four heads of width 4 over a batch of 3.
    check_block(
        Block {
            batch: Some(3),
            seq: 6,
            d_model: 16,
            heads: 4,
            ff: 9,
            embed: true,
            fused: true,
            ..BASE
        },
        IrDType::F32,
        301,
    );
}
