//! Model builders used by the demo, the `run` subcommand's tests and the
//! parity tests. Every builder is deterministic: the same config gives the
//! same graph (node for node), and constants (RoPE tables) are computed,
//! not random. Weights are graph params; callers bind them.
//!
//! Layouts (rlx-ir conventions, as rlx-cpu implements them):
//! - `Op::Gather { axis: 0 }`: `table [V, D]`, `indices [1, S]` (f32 holding
//!   integers in `[0, V)`) → `[1, S, D]`.
//! - `Op::RmsNorm { axis: -1, eps }`: inputs `x, gamma [D], beta [D]`;
//!   `x / rms(x) * gamma + beta` over the last axis.
//! - `Op::Rope { head_dim, n_rot = head_dim, style: NeoX }`: `x [1, S, H*Dh]`,
//!   `cos, sin [S, Dh/2]` (row `s` holds position `s`); rotate-half pairs
//!   `(i, i + Dh/2)` within each head.
//! - `Op::Attention { num_heads: H, head_dim: Dh, mask_kind: Causal }`: Q, K,
//!   V and the output are `[1, S, H, Dh]` (heads at axis 2, the dominant
//!   layout; backends tell it from `[B, H, S, Dh]` by which axis equals `H`,
//!   so the builder requires `S != H`); scale `1/sqrt(Dh)`; query `i`
//!   attends to keys `0..=i`.
//! - `MatMul` of `[1, S, K]` by a 2-D weight `[K, N]` (batch broadcast).

use rlx_ir::infer::GraphExt;
use rlx_ir::op::{MaskKind, Op};
use rlx_ir::{DType, Graph, NodeId, Shape};

/// What a model input holds.
#[derive(Clone, Debug, PartialEq)]
pub enum InputKind {
    /// Real-valued data.
    Dense,
    /// Integer token ids in `[0, vocab)`, carried in the input's dtype
    /// (f32 here: rlx's Gather reads f32 or i64 indices).
    TokenIds { vocab: usize },
}

/// One model input.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub kind: InputKind,
}

/// A built model: the graph and a description of its inputs.
pub struct Model {
    pub graph: Graph,
    pub inputs: Vec<InputSpec>,
    /// One line saying what it is.
    pub description: String,
}

impl Model {
    /// The params the graph declares: (name, shape), in graph order.
    pub fn params(&self) -> Vec<(String, Vec<usize>)> {
        self.graph
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                Op::Param { name } => Some((name.clone(), static_dims(&n.shape))),
                _ => None,
            })
            .collect()
    }
}

fn static_dims(s: &Shape) -> Vec<usize> {
    s.dims().iter().map(|d| d.unwrap_static()).collect()
}

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

/// An f32 constant tensor.
fn constant(g: &mut Graph, data: &[f32], dims: &[usize]) -> NodeId {
    assert_eq!(data.len(), dims.iter().product::<usize>());
    let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    g.add_node(Op::Constant { data: bytes }, vec![], f32s(dims))
}

/// The mean softmax cross-entropy of `logits [n, classes]` against the
/// class indices `labels [n]` (f32), as a `[1]` loss: what the training
/// graphs of the benchmark and the tests minimise.
pub fn mean_softmax_cross_entropy(
    g: &mut Graph,
    logits: NodeId,
    labels: NodeId,
    n: usize,
) -> NodeId {
    let ce = g.add_node(
        Op::SoftmaxCrossEntropyWithLogits,
        vec![logits, labels],
        f32s(&[n]),
    );
    g.add_node(
        Op::Reduce {
            op: rlx_ir::op::ReduceOp::Mean,
            axes: vec![0],
            keep_dim: true,
        },
        vec![ce],
        f32s(&[1]),
    )
}

// ---------------------------------------------------------------------
// A small graph the fixture plugin can run.

/// `relu(x @ w) + b`: `x [m, k]` input, `w [k, n]` and `b [m, n]` params,
/// one output `y [m, n]`. Only Input/Param/MatMul(2-D)/Activation(Relu)/
/// Binary(Add, same shapes) — what the fixture test plugin lowers.
pub fn matmul_relu_add(m: usize, k: usize, n: usize) -> Model {
    let mut g = Graph::new("matmul_relu_add");
    let x = g.input("x", f32s(&[m, k]));
    let w = g.param("w", f32s(&[k, n]));
    let b = g.param("b", f32s(&[m, n]));
    let mm = g.mm(x, w);
    let r = g.relu(mm);
    let y = g.add(r, b);
    g.set_named_outputs([("y", y)]);
    Model {
        graph: g,
        inputs: vec![InputSpec {
            name: "x".into(),
            shape: vec![m, k],
            dtype: DType::F32,
            kind: InputKind::Dense,
        }],
        description: format!("relu(x @ w) + b, x [{m}, {k}], w [{k}, {n}]"),
    }
}

// ---------------------------------------------------------------------
// MLP

/// Sizes of [`mlp`].
#[derive(Clone, Debug)]
pub struct MlpConfig {
    pub batch: usize,
    pub d_in: usize,
    pub d_hidden: usize,
    pub d_out: usize,
}

impl Default for MlpConfig {
    fn default() -> Self {
        MlpConfig {
            batch: 4,
            d_in: 32,
            d_hidden: 64,
            d_out: 16,
        }
    }
}

/// A 2-layer ReLU MLP `relu(x @ w1 + b1) @ w2 + b2` named `name`: input
/// `x [batch, d_in]`, params `w1 [d_in, hidden]`, `b1 [hidden]`, `w2
/// [hidden, d_out]`, `b2 [d_out]` (in that order, returned with the
/// graph), no outputs set; the output node `[batch, d_out]`.
pub fn relu_mlp(
    name: &str,
    batch: usize,
    d_in: usize,
    hidden: usize,
    d_out: usize,
) -> (Graph, NodeId, Vec<NodeId>) {
    let mut g = Graph::new(name);
    let x = g.input("x", f32s(&[batch, d_in]));
    let w1 = g.param("w1", f32s(&[d_in, hidden]));
    let b1 = g.param("b1", f32s(&[hidden]));
    let w2 = g.param("w2", f32s(&[hidden, d_out]));
    let b2 = g.param("b2", f32s(&[d_out]));
    let h = g.mm(x, w1);
    let h = g.add(h, b1);
    let h = g.relu(h);
    let y = g.mm(h, w2);
    let y = g.add(y, b2);
    (g, y, vec![w1, b1, w2, b2])
}

/// A 2-layer MLP: `y = gelu(x @ w1 + b1) @ w2 + b2` (exact erf GELU).
/// Input `x [batch, d_in]`; params `w1 [d_in, d_hidden]`, `b1 [d_hidden]`,
/// `w2 [d_hidden, d_out]`, `b2 [d_out]`; output `y [batch, d_out]`.
pub fn mlp(cfg: &MlpConfig) -> Model {
    let mut g = Graph::new("mlp");
    let x = g.input("x", f32s(&[cfg.batch, cfg.d_in]));
    let w1 = g.param("w1", f32s(&[cfg.d_in, cfg.d_hidden]));
    let b1 = g.param("b1", f32s(&[cfg.d_hidden]));
    let w2 = g.param("w2", f32s(&[cfg.d_hidden, cfg.d_out]));
    let b2 = g.param("b2", f32s(&[cfg.d_out]));
    let h = g.mm(x, w1);
    let h = g.add(h, b1);
    let h = g.gelu(h);
    let y = g.mm(h, w2);
    let y = g.add(y, b2);
    g.set_named_outputs([("y", y)]);
    Model {
        graph: g,
        inputs: vec![InputSpec {
            name: "x".into(),
            shape: vec![cfg.batch, cfg.d_in],
            dtype: DType::F32,
            kind: InputKind::Dense,
        }],
        description: format!(
            "2-layer MLP ({} -> {} -> {}, gelu), batch {}",
            cfg.d_in, cfg.d_hidden, cfg.d_out, cfg.batch
        ),
    }
}

// ---------------------------------------------------------------------
// Decoder transformer

/// Sizes of [`transformer`].
#[derive(Clone, Debug)]
pub struct TransformerConfig {
    pub seq: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub d_ffn: usize,
    pub vocab: usize,
    pub n_layers: usize,
    pub rope_theta: f32,
    pub eps: f32,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        TransformerConfig {
            seq: 8,
            d_model: 64,
            n_heads: 4,
            d_ffn: 128,
            vocab: 128,
            n_layers: 1,
            rope_theta: 10000.0,
            eps: 1e-5,
        }
    }
}

impl TransformerConfig {
    /// A decoder of a real small model's size at sequence `seq`: d_model
    /// 512, 8 layers of 8 heads, SwiGLU ffn 1408, vocab 4096 (the default's
    /// layer shape scaled up; `seq` 1 is a decode step, 128 a prompt).
    pub fn decoder(seq: usize) -> TransformerConfig {
        TransformerConfig {
            seq,
            d_model: 512,
            n_heads: 8,
            d_ffn: 1408,
            vocab: 4096,
            n_layers: 8,
            ..TransformerConfig::default()
        }
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }
}

/// NeoX RoPE tables: `cos[s][i] = cos(s * theta^(-2i/Dh))`, `[seq, Dh/2]`.
pub fn rope_tables(seq: usize, head_dim: usize, theta: f32) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(seq * half);
    let mut sin = Vec::with_capacity(seq * half);
    for s in 0..seq {
        for i in 0..half {
            let inv_freq = (theta as f64).powf(-(2.0 * i as f64) / head_dim as f64);
            let angle = s as f64 * inv_freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// A small decoder-only transformer (pre-norm, `n_layers` blocks):
///
/// ```text
/// tokens [1, S] (f32 ids in [0, vocab))
///   h = Gather(tok_emb [vocab, D], tokens)                  [1, S, D]
///   per layer l:
///     a = RmsNorm(h; l.attn_norm.{gamma,beta})
///     q = Rope(a @ l.wq), k = Rope(a @ l.wk), v = a @ l.wv  [1, S, D]
///     o = Attention(q, k, v as [1, S, H, Dh]; causal)       [1, S, H, Dh]
///     h = h + reshape(o, [1, S, D]) @ l.wo
///     m = RmsNorm(h; l.mlp_norm.{gamma,beta})
///     h = h + (silu(m @ l.w_gate) * (m @ l.w_up)) @ l.w_down
///   logits = RmsNorm(h; final_norm.{gamma,beta}) @ lm_head  [1, S, vocab]
/// ```
///
/// The output is named `logits`. RoPE cos/sin are constants of the graph.
pub fn transformer(cfg: &TransformerConfig) -> Model {
    assert!(
        cfg.d_model.is_multiple_of(cfg.n_heads),
        "d_model must divide by n_heads"
    );
    assert!(
        cfg.head_dim().is_multiple_of(2),
        "RoPE needs an even head_dim"
    );
    assert!(
        cfg.seq != cfg.n_heads,
        "seq must differ from n_heads: attention tells [B,S,H,D] from [B,H,S,D] by which axis equals n_heads"
    );
    let (s, d, h, dh, f, v) = (
        cfg.seq,
        cfg.d_model,
        cfg.n_heads,
        cfg.head_dim(),
        cfg.d_ffn,
        cfg.vocab,
    );
    let mut g = Graph::new("decoder_transformer");
    let tokens = g.input("tokens", f32s(&[1, s]));
    let emb = g.param("tok_emb", f32s(&[v, d]));
    let (cos, sin) = rope_tables(s, dh, cfg.rope_theta);
    let cos = constant(&mut g, &cos, &[s, dh / 2]);
    let sin = constant(&mut g, &sin, &[s, dh / 2]);

    let norm = |g: &mut Graph, x: NodeId, prefix: &str| {
        let gamma = g.param(format!("{prefix}.gamma"), f32s(&[d]));
        let beta = g.param(format!("{prefix}.beta"), f32s(&[d]));
        g.rms_norm(x, gamma, beta, cfg.eps)
    };

    let mut x = g.gather_(emb, tokens, 0); // [1, S, D]
    for l in 0..cfg.n_layers {
        let p = format!("l{l}");
        // Attention block.
        let a = norm(&mut g, x, &format!("{p}.attn_norm"));
        let wq = g.param(format!("{p}.wq"), f32s(&[d, d]));
        let wk = g.param(format!("{p}.wk"), f32s(&[d, d]));
        let wv = g.param(format!("{p}.wv"), f32s(&[d, d]));
        let wo = g.param(format!("{p}.wo"), f32s(&[d, d]));
        let q = g.mm(a, wq);
        let k = g.mm(a, wk);
        let vv = g.mm(a, wv);
        let q = g.rope(q, cos, sin, dh);
        let k = g.rope(k, cos, sin, dh);
        let heads = vec![1, s as i64, h as i64, dh as i64];
        let q = g.reshape_(q, heads.clone());
        let k = g.reshape_(k, heads.clone());
        let vv = g.reshape_(vv, heads);
        let o = g.attention_kind(q, k, vv, h, dh, MaskKind::Causal, f32s(&[1, s, h, dh]));
        let o = g.reshape_(o, vec![1, s as i64, d as i64]);
        let o = g.mm(o, wo);
        x = g.add(x, o);
        // SwiGLU MLP block.
        let m = norm(&mut g, x, &format!("{p}.mlp_norm"));
        let w_gate = g.param(format!("{p}.w_gate"), f32s(&[d, f]));
        let w_up = g.param(format!("{p}.w_up"), f32s(&[d, f]));
        let w_down = g.param(format!("{p}.w_down"), f32s(&[f, d]));
        let gate = g.mm(m, w_gate);
        let gate = g.silu(gate);
        let up = g.mm(m, w_up);
        let hidden = g.mul(gate, up);
        let down = g.mm(hidden, w_down);
        x = g.add(x, down);
    }
    let x = norm(&mut g, x, "final_norm");
    let lm_head = g.param("lm_head", f32s(&[d, v]));
    let logits = g.mm(x, lm_head);
    g.set_named_outputs([("logits", logits)]);
    Model {
        graph: g,
        inputs: vec![InputSpec {
            name: "tokens".into(),
            shape: vec![1, s],
            dtype: DType::F32,
            kind: InputKind::TokenIds { vocab: v },
        }],
        description: format!(
            "decoder transformer: {} layer(s), seq {s}, d_model {d}, {h} heads x {dh}, ffn {f} (SwiGLU), vocab {v}, RoPE, causal attention, RmsNorm",
            cfg.n_layers
        ),
    }
}
