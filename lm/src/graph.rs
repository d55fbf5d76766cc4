//! The two graphs a generation runs, for Llama and Qwen3 (batch 1):
//!
//! - **prefill** (`len` prompt rows, padded by the caller to a bucket):
//!   inputs `x [len, hidden]` (the prompt's embeddings) and `last [1]` (the
//!   row whose logits are wanted); outputs the logits and greedy token of
//!   that row and every layer's K and V caches, `[1, kv_heads, cap,
//!   head_dim]` (heads first, so that attention reads each head's rows
//!   contiguously), holding the prompt's rows (the rest zero);
//! - **decode** (one token at position `pos` of a cache of `cap` rows):
//!   inputs `x [1, hidden]` and `pos [1]`, and the caches `k_cache_{l}`,
//!   `v_cache_{l}`; the new token's K and V are written into them at row
//!   `pos` (`DynamicUpdateSlice`), attention reads rows `0 ..= pos` (a key
//!   mask computed from `pos` on the device), and the updated caches are
//!   outputs of the same names, so an executable that holds them as state
//!   feeds each run's into the next without a copy to the host.
//!
//! The decode graph is the same for every position: one compile serves a
//! whole generation. Token ids never enter a graph: the embedding rows are
//! looked up on the host (`Weights::embedding_row`), which keeps a packed
//! embedding packed. Linear layers are `MatMul` against the transposed
//! checkpoint weight, or `DequantMatMul` (MLX affine) on the packed one.
//!
//! Outputs, in order: `logits [1, vocab]`, `next_token [1]` (the arg max,
//! f32-encoded as rlx encodes indices), then `k_cache_0, v_cache_0, ...`.

use crate::config::ModelConfig;
use crate::weights::{layer_linears, layer_name, Tensor, Weights, EMBED, FINAL_NORM, LM_HEAD};
use rlx_ir::op::{Activation, BinaryOp, CmpOp, MaskKind, PadMode, RopeStyle};
use rlx_ir::{DType, Graph, NodeId, Op, QuantScheme, Shape};
use std::collections::HashMap;

/// Output positions shared by both graphs, and their names.
pub const LOGITS: usize = 0;
pub const NEXT_TOKEN: usize = 1;
pub const OUTPUT_NAMES: [&str; 2] = ["logits", "next_token"];

/// The output (and, in the decode graph, the state input) holding layer
/// `l`'s K or V cache.
pub fn k_cache(l: usize) -> String {
    format!("k_cache_{l}")
}
pub fn v_cache(l: usize) -> String {
    format!("v_cache_{l}")
}

/// Every cache's name in output order: cache `i` is output `2 + i` (layer
/// `i / 2`'s K, then its V).
pub fn cache_names(layers: usize) -> Vec<String> {
    (0..layers).flat_map(|l| [k_cache(l), v_cache(l)]).collect()
}

/// The rotary tables' params: `[cap, head_dim / 2]` each.
pub const ROPE_COS: &str = "rope_cos";
pub const ROPE_SIN: &str = "rope_sin";

/// Whether an Attention node over these Q and K sequence lengths could be
/// read in either of rlx's layouts (`[B, S, H, D]` and `[B, H, S, D]` are
/// told apart by which axis holds the head count): a prefill of exactly
/// `num_heads` rows. The prefill bucket avoids that length.
pub fn ambiguous_prefill(c: &ModelConfig, len: usize) -> bool {
    len == c.num_heads
}

struct Builder<'a> {
    g: Graph,
    c: &'a ModelConfig,
    w: &'a Weights,
    /// One zero vector per length (RmsNorm's beta input).
    zeros: HashMap<usize, NodeId>,
    /// One node per param (the tied embedding is read twice).
    params: HashMap<String, NodeId>,
}

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl<'a> Builder<'a> {
    fn new(name: &str, c: &'a ModelConfig, w: &'a Weights) -> Builder<'a> {
        Builder {
            g: Graph::new(name),
            c,
            w,
            zeros: HashMap::new(),
            params: HashMap::new(),
        }
    }

    fn param(&mut self, name: impl Into<String>, shape: Shape) -> NodeId {
        let name = name.into();
        if let Some(&id) = self.params.get(&name) {
            debug_assert_eq!(self.g.shape(id), &shape, "param {name} read at two shapes");
            return id;
        }
        let id = self.g.param(name.clone(), shape);
        self.params.insert(name, id);
        id
    }

    fn node(&mut self, op: Op, inputs: Vec<NodeId>, dims: &[usize]) -> NodeId {
        self.g.add_node(op, inputs, f32s(dims))
    }

    fn constant(&mut self, values: &[f32], dims: &[usize]) -> NodeId {
        self.node(
            Op::Constant {
                data: le_bytes(values),
            },
            vec![],
            dims,
        )
    }

    fn reshape(&mut self, x: NodeId, dims: &[usize]) -> NodeId {
        let new_shape = dims.iter().map(|&d| d as i64).collect();
        self.node(Op::Reshape { new_shape }, vec![x], dims)
    }

    fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId, dims: &[usize]) -> NodeId {
        self.node(Op::Binary(op), vec![a, b], dims)
    }

    /// RMSNorm over the last axis with the checkpoint's weight `name`.
    fn norm(&mut self, x: NodeId, name: &str, dims: &[usize]) -> NodeId {
        let n = *dims.last().unwrap();
        let gamma = self.param(name, f32s(&[n]));
        let beta = match self.zeros.get(&n) {
            Some(&z) => z,
            None => {
                let z = self.constant(&vec![0.0; n], &[n]);
                self.zeros.insert(n, z);
                z
            }
        };
        let eps = self.c.rms_norm_eps as f32;
        self.node(Op::RmsNorm { axis: -1, eps }, vec![x, gamma, beta], dims)
    }

    /// `x [rows, in] @ W^T` for the checkpoint's linear layer `name`
    /// (`[out, in]`).
    fn linear(&mut self, x: NodeId, name: &str, rows: usize) -> NodeId {
        match self.w.get(name) {
            Tensor::Dense { shape, .. } => {
                let (out, inp) = (shape[0], shape[1]);
                let w = self.param(name, f32s(&[out, inp]));
                let wt = self.node(Op::Transpose { perm: vec![1, 0] }, vec![w], &[inp, out]);
                self.node(Op::MatMul, vec![x, wt], &[rows, out])
            }
            Tensor::Packed(p) => {
                let base = name.trim_end_matches(".weight");
                let (out, groups) = (p.out_shape[0], p.n_groups());
                let w = self.param(name, Shape::new(&[p.w_q.len()], DType::U8));
                let s = self.param(format!("{base}.scales"), f32s(&[out, groups]));
                let b = self.param(format!("{base}.biases"), f32s(&[out, groups]));
                let scheme: QuantScheme = p.scheme;
                self.node(Op::DequantMatMul { scheme }, vec![x, w, s, b], &[rows, out])
            }
        }
    }

    /// Rotary embedding of `x [1, t, heads, hd]` with tables `[t, hd/2]`.
    fn rope(&mut self, x: NodeId, cos: NodeId, sin: NodeId, t: usize, heads: usize) -> NodeId {
        let hd = self.c.head_dim;
        let flat = self.reshape(x, &[1, t, heads * hd]);
        let style = if self.c.rope_traditional {
            RopeStyle::GptJ
        } else {
            RopeStyle::NeoX
        };
        let r = self.node(
            Op::Rope {
                head_dim: hd,
                n_rot: hd,
                style,
            },
            vec![flat, cos, sin],
            &[1, t, heads * hd],
        );
        self.reshape(r, &[1, t, heads, hd])
    }

    /// One decoder layer over `t` rows; `kv` turns this layer's rotated K
    /// and its V (`[1, t, kv_heads, hd]`) into the caches attention reads
    /// and the graph outputs, and returns them with the mask kind and
    /// mask input attention takes.
    fn layer(
        &mut self,
        l: usize,
        x: NodeId,
        t: usize,
        rope: (NodeId, NodeId),
        kv: &mut dyn FnMut(&mut Self, usize, NodeId, NodeId) -> Caches,
    ) -> NodeId {
        let c = self.c;
        let (h, nh, nkv, hd) = (c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim);
        let linears = layer_linears(c);
        let name = |i: usize| layer_name(l, linears[i].0);
        let n1 = self.norm(x, &layer_name(l, "input_layernorm.weight"), &[t, h]);
        let q = self.linear(n1, &name(0), t);
        let k = self.linear(n1, &name(1), t);
        let v = self.linear(n1, &name(2), t);
        let mut q = self.reshape(q, &[1, t, nh, hd]);
        let mut k = self.reshape(k, &[1, t, nkv, hd]);
        let v = self.reshape(v, &[1, t, nkv, hd]);
        if c.arch.qk_norm() {
            q = self.norm(
                q,
                &layer_name(l, "self_attn.q_norm.weight"),
                &[1, t, nh, hd],
            );
            k = self.norm(
                k,
                &layer_name(l, "self_attn.k_norm.weight"),
                &[1, t, nkv, hd],
            );
        }
        let q = self.rope(q, rope.0, rope.1, t, nh);
        let k = self.rope(k, rope.0, rope.1, t, nkv);
        let caches = kv(self, l, k, v);
        // One row's [1, 1, H, D] is its [1, H, 1, D] as it lies in memory:
        // the decode step attends in the caches' [B, H, S, D] layout.
        let (q, dims) = if caches.heads_first {
            (self.reshape(q, &[1, nh, t, hd]), [1, nh, t, hd])
        } else {
            (q, [1, t, nh, hd])
        };
        let mut inputs = vec![q, caches.k, caches.v];
        inputs.extend(caches.mask);
        let attn = self.node(
            Op::Attention {
                num_heads: nh,
                head_dim: hd,
                v_head_dim: None,
                mask_kind: caches.mask_kind,
                score_scale: None,
                attn_logit_softcap: None,
            },
            inputs,
            &dims,
        );
        let attn = self.reshape(attn, &[t, nh * hd]);
        let o = self.linear(attn, &name(3), t);
        let h1 = self.binary(BinaryOp::Add, x, o, &[t, h]);
        let n2 = self.norm(
            h1,
            &layer_name(l, "post_attention_layernorm.weight"),
            &[t, h],
        );
        let i = c.intermediate_size;
        let gate = self.linear(n2, &name(4), t);
        let up = self.linear(n2, &name(5), t);
        let gate = self.node(Op::Activation(Activation::Silu), vec![gate], &[t, i]);
        let ff = self.binary(BinaryOp::Mul, gate, up, &[t, i]);
        let down = self.linear(ff, &name(6), t);
        self.binary(BinaryOp::Add, h1, down, &[t, h])
    }

    /// Final norm, LM head (the tied embedding or `lm_head`) and arg max of
    /// one row `x [1, hidden]`.
    fn head(&mut self, x: NodeId) -> (NodeId, NodeId) {
        let h = self.c.hidden_size;
        let n = self.norm(x, FINAL_NORM, &[1, h]);
        let head = if self.c.tie_word_embeddings {
            EMBED
        } else {
            LM_HEAD
        };
        let logits = self.linear(n, head, 1);
        let next = self.node(
            Op::ArgMax {
                axis: 1,
                keep_dim: false,
            },
            vec![logits],
            &[1],
        );
        (logits, next)
    }

    /// Row `token` ([1], f32-encoded) of the embedding, `[1, hidden]`, on
    /// the device: a gather of the dense table, or of the packed rows, their
    /// scales and biases, dequantised (`scale * code + bias`, the codes
    /// unpacked with exact f32 arithmetic). None for a packed table of
    /// other than 4 or 8 bits.
    fn embedding(&mut self, token: NodeId) -> Option<NodeId> {
        let h = self.c.hidden_size;
        let gather = Op::Gather { axis: 0 };
        match self.w.get(EMBED) {
            Tensor::Dense { shape, .. } => {
                let table = self.param(EMBED, f32s(&[shape[0], h]));
                Some(self.node(gather, vec![table, token], &[1, h]))
            }
            Tensor::Packed(p) => {
                let QuantScheme::MlxAffine { bits, group_size } = p.scheme else {
                    return None;
                };
                if bits != 4 && bits != 8 {
                    return None;
                }
                let (v, gs) = (p.out_shape[0], group_size as usize);
                let (row, groups) = (h * bits as usize / 8, h / gs);
                let flat = self.param(EMBED, Shape::new(&[p.w_q.len()], DType::U8));
                let table = self.g.add_node(
                    Op::Reshape {
                        new_shape: vec![v as i64, row as i64],
                    },
                    vec![flat],
                    Shape::new(&[v, row], DType::U8),
                );
                let bytes = self.g.add_node(
                    gather.clone(),
                    vec![table, token],
                    Shape::new(&[1, row], DType::U8),
                );
                let bytes = self.node(Op::Cast { to: DType::F32 }, vec![bytes], &[1, row]);
                let codes = if bits == 8 {
                    bytes
                } else {
                    // Byte b holds codes 2b (low nibble) and 2b + 1.
                    let sixteen = self.constant(&[16.0], &[1]);
                    let q = self.binary(BinaryOp::Div, bytes, sixteen, &[1, row]);
                    let hi = self.node(Op::Activation(Activation::Floor), vec![q], &[1, row]);
                    let hi16 = self.binary(BinaryOp::Mul, hi, sixteen, &[1, row]);
                    let lo = self.binary(BinaryOp::Sub, bytes, hi16, &[1, row]);
                    let lo = self.reshape(lo, &[1, row, 1]);
                    let hi = self.reshape(hi, &[1, row, 1]);
                    let both = self.node(Op::Concat { axis: 2 }, vec![lo, hi], &[1, row, 2]);
                    self.reshape(both, &[1, h])
                };
                let codes = self.reshape(codes, &[1, groups, gs]);
                let part = |this: &mut Self, suffix: &str| {
                    let t = this.param(format!("model.embed_tokens.{suffix}"), f32s(&[v, groups]));
                    let r = this.node(gather.clone(), vec![t, token], &[1, groups]);
                    this.reshape(r, &[1, groups, 1])
                };
                let scale = part(self, "scales");
                let bias = part(self, "biases");
                let scaled = self.binary(BinaryOp::Mul, codes, scale, &[1, groups, gs]);
                let x = self.binary(BinaryOp::Add, scaled, bias, &[1, groups, gs]);
                Some(self.reshape(x, &[1, h]))
            }
        }
    }

    fn rope_params(&mut self, cap: usize) -> (NodeId, NodeId) {
        let half = self.c.head_dim / 2;
        (
            self.param(ROPE_COS, f32s(&[cap, half])),
            self.param(ROPE_SIN, f32s(&[cap, half])),
        )
    }

    fn finish(mut self, logits: NodeId, next: NodeId, caches: Vec<(NodeId, NodeId)>) -> Graph {
        let mut outs = vec![
            (OUTPUT_NAMES[LOGITS].to_string(), logits),
            (OUTPUT_NAMES[NEXT_TOKEN].to_string(), next),
        ];
        for (l, (k, v)) in caches.into_iter().enumerate() {
            outs.push((k_cache(l), k));
            outs.push((v_cache(l), v));
        }
        self.g.set_named_outputs(outs);
        self.g
    }
}

/// What attention reads in one layer.
struct Caches {
    k: NodeId,
    v: NodeId,
    /// K and V are `[1, kv_heads, S, D]` (else `[1, S, kv_heads, D]`).
    heads_first: bool,
    mask_kind: MaskKind,
    mask: Option<NodeId>,
}

/// The prefill graph: `len` rows (a bucket: the prompt padded at its end,
/// which causal attention keeps from touching the real rows) into caches
/// of `cap` rows.
pub fn prefill(c: &ModelConfig, w: &Weights, len: usize, cap: usize) -> Graph {
    assert!(len <= cap, "prefill of {len} rows into a cache of {cap}");
    let (h, nkv, hd) = (c.hidden_size, c.num_kv_heads, c.head_dim);
    let mut b = Builder::new(&format!("{}_prefill_{len}_{cap}", c.arch.name()), c, w);
    let x = b.g.input("x", f32s(&[len, h]));
    let last = b.g.input("last", f32s(&[1]));
    let (cos_all, sin_all) = b.rope_params(cap);
    let half = hd / 2;
    let narrow = Op::Narrow {
        axis: 0,
        start: 0,
        len,
    };
    let cos = b.node(narrow.clone(), vec![cos_all], &[len, half]);
    let sin = b.node(narrow, vec![sin_all], &[len, half]);
    let mut outs = Vec::new();
    let mut hidden = x;
    for l in 0..c.num_layers {
        hidden = b.layer(l, hidden, len, (cos, sin), &mut |b, _, k, v| {
            // The prompt's rows, heads first, at the top of zero caches of
            // `cap` rows.
            let cache = |b: &mut Builder, t: NodeId| {
                let t = b.node(
                    Op::Transpose {
                        perm: vec![0, 2, 1, 3],
                    },
                    vec![t],
                    &[1, nkv, len, hd],
                );
                b.node(
                    Op::Pad {
                        pads: vec![[0, 0], [0, 0], [0, cap - len], [0, 0]],
                        mode: PadMode::Constant(0.0),
                    },
                    vec![t],
                    &[1, nkv, cap, hd],
                )
            };
            let (kc, vc) = (cache(b, k), cache(b, v));
            outs.push((kc, vc));
            // Attention over the prompt's own rows, causal.
            Caches {
                k,
                v,
                heads_first: false,
                mask_kind: MaskKind::Causal,
                mask: None,
            }
        });
    }
    let row = b.node(Op::Gather { axis: 0 }, vec![hidden, last], &[1, h]);
    let (logits, next) = b.head(row);
    b.finish(logits, next, outs)
}

/// The decode graph: one token at position `pos` of caches of `cap` rows,
/// its embedding row given as `x`.
pub fn decode(c: &ModelConfig, w: &Weights, cap: usize) -> Graph {
    decode_with(c, w, cap, false).expect("the host-embedded decode graph always builds")
}

/// The state holding the decode step's token in [`decode_on_device`].
pub const TOKEN: &str = "token";

/// The decode graph with the token on the device: a `token [1]` input
/// (f32-encoded; held as state and fed from the step's `next_token`, so
/// greedy steps chain on the device and may be submitted before the last
/// token is read) whose embedding row the graph gathers itself. None where
/// the embedding is packed in other than 4 or 8 bits.
pub fn decode_on_device(c: &ModelConfig, w: &Weights, cap: usize) -> Option<Graph> {
    decode_with(c, w, cap, true)
}

fn decode_with(c: &ModelConfig, w: &Weights, cap: usize, on_device: bool) -> Option<Graph> {
    let (h, nkv, hd) = (c.hidden_size, c.num_kv_heads, c.head_dim);
    let name = if on_device { "decode_dev" } else { "decode" };
    let mut b = Builder::new(&format!("{}_{name}_{cap}", c.arch.name()), c, w);
    let x = if on_device {
        let token = b.g.input(TOKEN, f32s(&[1]));
        b.embedding(token)?
    } else {
        b.g.input("x", f32s(&[1, h]))
    };
    let pos = b.g.input("pos", f32s(&[1]));
    let (cos_all, sin_all) = b.rope_params(cap);
    let half = hd / 2;
    let cos = b.node(Op::Gather { axis: 0 }, vec![cos_all, pos], &[1, half]);
    let sin = b.node(Op::Gather { axis: 0 }, vec![sin_all, pos], &[1, half]);
    // Keys 0 ..= pos are live: an additive bias on the scores, 0 on a live
    // key and -1e9 past pos (the score rlx gives a masked key), built once
    // as [1, heads, 1, cap] for every layer. A key mask would mean the
    // same, but costs a backend a keep-mask and a guard for rows with
    // every key masked (which this step never has) in each layer.
    let iota: Vec<f32> = (0..cap).map(|i| i as f32).collect();
    let iota = b.constant(&iota, &[1, cap]);
    let live = b.g.add_node(
        Op::Compare(CmpOp::Le),
        vec![iota, pos],
        Shape::new(&[1, cap], DType::Bool),
    );
    let live = b.node(Op::Cast { to: DType::F32 }, vec![live], &[1, cap]);
    let one = b.constant(&[1.0], &[1]);
    let dead = b.binary(BinaryOp::Sub, live, one, &[1, cap]);
    let big = b.constant(&[1e9], &[1]);
    let bias = b.binary(BinaryOp::Mul, dead, big, &[1, cap]);
    let bias = b.reshape(bias, &[1, 1, 1, cap]);
    let heads = b.constant(&vec![1.0; c.num_heads], &[1, c.num_heads, 1, 1]);
    let mask = b.binary(BinaryOp::Mul, bias, heads, &[1, c.num_heads, 1, cap]);
    let mut states = Vec::new();
    for l in 0..c.num_layers {
        states.push((
            b.g.input(k_cache(l), f32s(&[1, nkv, cap, hd])),
            b.g.input(v_cache(l), f32s(&[1, nkv, cap, hd])),
        ));
    }
    let mut outs = Vec::new();
    let mut hidden = x;
    for l in 0..c.num_layers {
        hidden = b.layer(l, hidden, 1, (cos, sin), &mut |b, l, k, v| {
            let (kc, vc) = states[l];
            // The row's [1, 1, kv_heads, D] is [1, kv_heads, 1, D] in
            // memory; written at row `pos` of the heads-first cache.
            let write = |b: &mut Builder, cache: NodeId, row: NodeId| {
                let row = b.reshape(row, &[1, nkv, 1, hd]);
                b.node(
                    Op::DynamicUpdateSlice { axis: 2 },
                    vec![cache, row, pos],
                    &[1, nkv, cap, hd],
                )
            };
            let (kc, vc) = (write(b, kc, k), write(b, vc, v));
            outs.push((kc, vc));
            Caches {
                k: kc,
                v: vc,
                heads_first: true,
                mask_kind: MaskKind::Bias,
                mask: Some(mask),
            }
        });
    }
    let (logits, next) = b.head(hidden);
    Some(b.finish(logits, next, outs))
}
