//! A tiny decoder-only transformer written as an `.rlxp` package whose
//! `generate` entry rlx-runtime's model API opens and generates with, on any
//! device (`{"device": "cpu"}`, `{"device": "mlx"}`, …).
//!
//! The package is laid out so rlx-runtime 0.2.19 takes its *resident* cache
//! path (`GraphLm::bind_resident`: the caches live in the executable through
//! `bind_gpu_handle` + `register_kv_row_feed`, each step copies its one new
//! row with `feed_kv_row`). That path needs `state_update: "replace"`, every
//! state of kind `rows` and one row width; so every cache here is
//! `f32[1, cap, d_model]` (K and V of each layer) and each step writes its
//! row in place at `position` (`DynamicUpdateSlice`), returning the whole
//! cache as the next step's input.
//!
//! Functions (every token input is f32 and cast in the graph, so a backend
//! is never handed integer inputs):
//! * `step_<cap>`, one per `decode_caps`: `input_ids f32[1]`, `position
//!   f32[1]`, the caches → `[logits [1, vocab], k_0, v_0, k_1, …]`. A context
//!   of `past` tokens runs the smallest with `cap > past`.
//! * `prefill_<seq>`, one per `prefill_seqs`: the prompt padded to `seq`
//!   (`input_ids f32[seq]`, `last f32[1]`) → the last position's logits and
//!   each cache's rows, in the step's output order.
//! * `check_<cap>` at the largest cap: `check_tokens` tokens from `position`
//!   in one run (speculative decoding, open option `speculative: true`).
//!
//! Weights are seeded (each tensor from `seed` and its name), so the same
//! config always writes the same model.

use std::ops::Range;
use std::path::{Path, PathBuf};

use rlx_ir::op::{Activation, BinaryOp, CmpOp};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};
use rlx_runtime::model::{Model, Tensor, TextCodec};
use serde_json::{json, Value};

/// What the builder and its helpers fail with.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The model's size and the functions written for it.
#[derive(Clone, Debug)]
pub struct DecoderConfig {
    pub vocab: usize,
    pub d_model: usize,
    pub heads: usize,
    pub layers: usize,
    /// The MLP's hidden width.
    pub ffn: usize,
    /// Cache rows of each decode function: contexts up to the largest.
    pub decode_caps: Vec<usize>,
    /// Prompt lengths of the prefill functions. A prompt longer than the
    /// largest is stepped in token by token.
    pub prefill_seqs: Vec<usize>,
    /// Tokens one check run takes: the last token and a draft of one fewer.
    pub check_tokens: usize,
    pub seed: u64,
}

impl Default for DecoderConfig {
    /// Small enough to compile and run in moments on a CPU; two decode
    /// functions so a context outgrows the first, and a prefill as long as
    /// the longest context so it can serve as a full-recompute reference.
    fn default() -> Self {
        Self {
            vocab: 48,
            d_model: 32,
            heads: 2,
            layers: 2,
            ffn: 64,
            decode_caps: vec![16, 64],
            prefill_seqs: vec![8, 64],
            check_tokens: 4,
            // Of seeds 0..40, the one whose greedy picks in
            // tests/model_generate_cpu.rs are furthest from a tie (top two
            // logits >= 1.4% of the largest apart), its runs still over
            // many tokens (a cache fault shows in the tokens too).
            seed: 24,
        }
    }
}

impl DecoderConfig {
    /// A benchmark-sized model: d_model 512, 8 layers, a 1024-token cache.
    pub fn benchmark() -> Self {
        Self {
            vocab: 256,
            d_model: 512,
            heads: 8,
            layers: 8,
            ffn: 2048,
            decode_caps: vec![256, 1024],
            prefill_seqs: vec![64, 256],
            ..Self::default()
        }
    }

    /// The longest context the decode functions hold.
    pub fn max_context(&self) -> usize {
        self.decode_caps.iter().copied().max().unwrap_or(0)
    }

    fn validate(&self) -> Result<(), Error> {
        let ok = self.vocab > 1
            && self.heads > 0
            && self.d_model.is_multiple_of(self.heads)
            && self.layers > 0
            && self.ffn > 0
            && self.check_tokens > 0
            && !self.decode_caps.is_empty()
            && !self.prefill_seqs.is_empty()
            && self
                .decode_caps
                .iter()
                .chain(&self.prefill_seqs)
                .all(|&n| n > 1);
        if ok {
            Ok(())
        } else {
            Err(format!("not a decoder this builder writes: {self:?}").into())
        }
    }

    /// Rows of the position table: every position a function reads.
    fn positions(&self) -> usize {
        let seq = self.prefill_seqs.iter().copied().max().unwrap_or(0);
        self.max_context().max(seq)
    }
}

/// A written package and what a caller needs to run it.
#[derive(Clone, Debug)]
pub struct DecoderPackage {
    pub path: PathBuf,
    pub config: DecoderConfig,
}

impl DecoderPackage {
    /// The token ids a prompt may hold (there are no stop ids).
    pub fn token_ids(&self) -> Range<u32> {
        0..self.config.vocab as u32
    }

    /// The most tokens generated after a `prompt_len`-token prompt: every
    /// token fed (the prompt, then each generated one but the last) needs a
    /// cache row. A speculative check also needs room for its whole run
    /// from the last position (`check_tokens` rows more).
    pub fn max_new_tokens(&self, prompt_len: usize, speculative: bool) -> usize {
        // A check's last run is at the context's last position and takes
        // `check_tokens` rows from there (rlx-runtime: `prompt + n - 1 + q`
        // rows, at most the check's cap).
        let spare = if speculative {
            self.config.check_tokens
        } else {
            0
        };
        (self.config.max_context() + 1).saturating_sub(prompt_len + spare)
    }
}

/// The cache inputs of every layer, in the entry's state order.
pub fn state_names(cfg: &DecoderConfig) -> Vec<String> {
    (0..cfg.layers)
        .flat_map(|l| [format!("past_k_{l}"), format!("past_v_{l}")])
        .collect()
}

/// Write the package as `dir/decoder.rlxp`.
pub fn write_decoder_package(dir: &Path, cfg: &DecoderConfig) -> Result<DecoderPackage, Error> {
    cfg.validate()?;
    let cap = cfg.max_context();
    let mut graphs: Vec<Graph> = cfg
        .decode_caps
        .iter()
        .map(|&c| step_graph(cfg, c))
        .collect();
    graphs.extend(cfg.prefill_seqs.iter().map(|&s| prefill_graph(cfg, s)));
    graphs.push(check_graph(cfg, cap));
    let states: Vec<Value> = state_names(cfg)
        .into_iter()
        .enumerate()
        .map(|(i, name)| json!([name, i + 1]))
        .collect();
    let model = json!({
        "name": "tiny-decoder",
        "version": "0.1.0",
        "family": "tiny-decoder",
        "task": "text-generation",
        "entries": {"generate": {
            "functions": cfg.decode_caps.iter().map(|c| format!("step_{c}")).collect::<Vec<_>>(),
            "tokenizer": "sidecar:tokenizer.json",
            "vocab_size": cfg.vocab,
            "inputs": {"input_ids": "token", "position": "position"},
            "state": states,
            // Each cache output is the next step's cache (its new row
            // written at `position`): kind `rows`, the resident path's.
            "state_update": "replace",
            "logits": 0,
            "prefill": {
                "functions": cfg.prefill_seqs.iter().map(|s| format!("prefill_{s}")).collect::<Vec<_>>(),
                "inputs": {"input_ids": "tokens", "last": "last"},
                "logits": 0,
                "state": (1..=2 * cfg.layers).collect::<Vec<_>>(),
            },
            // `tokens`, not `token`: a `token` feed would make the runtime
            // read the check's q ids as a batch of q and size its cache q
            // times too short.
            "check": {
                "function": format!("check_{cap}"),
                "tokens": cfg.check_tokens,
                "inputs": {"input_ids": "tokens", "position": "position"},
                "logits": 0,
            },
        }},
    });
    std::fs::create_dir_all(dir)?;
    let path = dir.join("decoder.rlxp");
    let tokenizer = json!({"kind": "ids", "vocab": cfg.vocab})
        .to_string()
        .into_bytes();
    rlx_runtime::model::rlxp::save_module_with_sidecars(
        &path,
        &graphs,
        &weights(cfg),
        &model,
        &[("tokenizer.json", "application/json", tokenizer)],
    )?;
    Ok(DecoderPackage {
        path,
        config: cfg.clone(),
    })
}

// ── weights ──────────────────────────────────────────────────

/// splitmix64: a stable stream (a `rand` upgrade must not change the model).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `n` values uniform in `[-bound, bound)`, from `seed` and `name` (so a
/// tensor does not change when others are added).
fn uniform(seed: u64, name: &str, n: usize, bound: f32) -> Vec<f32> {
    let mut s = name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..n)
        .map(|_| {
            let u = (splitmix(&mut s) >> 40) as f32 / (1u64 << 24) as f32;
            (2.0 * u - 1.0) * bound
        })
        .collect()
}

/// Every param of every function, seeded.
pub fn weights(cfg: &DecoderConfig) -> Vec<Tensor> {
    let (d, f, v) = (cfg.d_model, cfg.ffn, cfg.vocab);
    // Uniform of variance 1/fan_in keeps the activations' scale; the head
    // is 4x that so the top logits are well apart (greedy picks that do not
    // flip on rounding when another backend is compared).
    let fan = |n: usize| (3.0 / n as f32).sqrt();
    let mut out = Vec::new();
    let mut push = |name: String, dims: Vec<usize>, bound: f32, offset: f32| {
        let n = dims.iter().product();
        let vals: Vec<f32> = uniform(cfg.seed, &name, n, bound)
            .into_iter()
            .map(|x| x + offset)
            .collect();
        out.push(Tensor::f32(name, dims, &vals));
    };
    push("embed".into(), vec![v, d], 1.0, 0.0);
    push("pos_embed".into(), vec![cfg.positions(), d], 0.5, 0.0);
    for l in 0..cfg.layers {
        push(format!("l{l}.attn_norm"), vec![d], 0.1, 1.0);
        for w in ["wq", "wk", "wv", "wo"] {
            push(format!("l{l}.{w}"), vec![d, d], fan(d), 0.0);
        }
        push(format!("l{l}.mlp_norm"), vec![d], 0.1, 1.0);
        push(format!("l{l}.w1"), vec![d, f], fan(d), 0.0);
        push(format!("l{l}.w2"), vec![f, d], fan(f), 0.0);
    }
    push("final_norm".into(), vec![d], 0.1, 1.0);
    push("lm_head".into(), vec![d, v], 4.0 * fan(d), 0.0);
    out
}

// ── graphs ───────────────────────────────────────────────────

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

/// Where a layer's keys come from: its own rows (a prompt), or a cache of
/// `cap` rows its new rows are written into at `pos`.
#[derive(Clone, Copy)]
enum Keys {
    Own,
    Cache { cap: usize, pos: NodeId },
}

/// A graph under construction, with shape-inferring helpers for the few
/// ops a decoder needs.
struct Net<'c> {
    g: Graph,
    c: &'c DecoderConfig,
    /// Each cache output, in state order.
    caches: Vec<NodeId>,
    /// `(cache input, output index)`: the graph's variables.
    vars: Vec<(NodeId, usize)>,
}

impl<'c> Net<'c> {
    fn new(name: String, c: &'c DecoderConfig) -> Self {
        Self {
            g: Graph::new(name),
            c,
            caches: Vec::new(),
            vars: Vec::new(),
        }
    }

    fn dims(&self, x: NodeId) -> Vec<usize> {
        let s = &self.g.node(x).shape;
        s.dims().iter().map(|d| d.unwrap_static()).collect()
    }

    fn konst(&mut self, values: &[f32], dims: &[usize]) -> NodeId {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.g.add_node(Op::Constant { data }, vec![], f32s(dims))
    }

    /// `a op b`, `b` the same shape or one element.
    fn bin(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        let dims = self.dims(a);
        self.g.binary(op, a, b, f32s(&dims))
    }

    fn mm(&mut self, a: NodeId, b: NodeId) -> NodeId {
        let mut dims = self.dims(a);
        *dims.last_mut().unwrap() = *self.dims(b).last().unwrap();
        self.g.matmul(a, b, f32s(&dims))
    }

    fn reshape(&mut self, x: NodeId, dims: &[usize]) -> NodeId {
        let spec = dims.iter().map(|&d| d as i64).collect();
        self.g.reshape(x, spec, f32s(dims))
    }

    fn transpose(&mut self, x: NodeId, perm: &[usize]) -> NodeId {
        let from = self.dims(x);
        let dims: Vec<usize> = perm.iter().map(|&p| from[p]).collect();
        let op = Op::Transpose {
            perm: perm.to_vec(),
        };
        self.g.add_node(op, vec![x], f32s(&dims))
    }

    fn expand(&mut self, x: NodeId, dims: &[usize]) -> NodeId {
        let target_shape = dims.iter().map(|&d| d as i64).collect();
        self.g
            .add_node(Op::Expand { target_shape }, vec![x], f32s(dims))
    }

    /// Rows `index` (f32 ids, cast here) of param `table`.
    fn rows(&mut self, table: NodeId, index: NodeId) -> NodeId {
        let n = self.dims(index)[0];
        let width = self.dims(table)[1];
        let ids = Shape::new(&[n], DType::I64);
        let ids = self
            .g
            .add_node(Op::Cast { to: DType::I64 }, vec![index], ids);
        self.g.gather(table, ids, 0, f32s(&[n, width]))
    }

    fn param(&mut self, name: &str, dims: &[usize]) -> NodeId {
        self.g.param(name, f32s(dims))
    }

    fn rms(&mut self, x: NodeId, gain: &str) -> NodeId {
        let d = self.c.d_model;
        let gain = self.param(gain, &[d]);
        // rlx-ir's RmsNorm takes x, gamma and beta (rlx's fusions index all
        // three): no shift here.
        let beta = self.konst(&vec![0.0; d], &[d]);
        let dims = self.dims(x);
        let op = Op::RmsNorm {
            axis: -1,
            eps: 1e-5,
        };
        self.g.add_node(op, vec![x, gain, beta], f32s(&dims))
    }

    /// The additive attention bias `[heads, t, n]`: 0 where key `j <=
    /// qpos[i]`, -1e9 elsewhere (the future, and cache rows not yet
    /// written or left by an earlier sequence).
    fn bias(&mut self, qpos: NodeId, n: usize) -> NodeId {
        let t = self.dims(qpos)[0];
        let iota: Vec<f32> = (0..n).map(|j| j as f32).collect();
        let keys = self.konst(&iota, &[1, n]);
        let keys = self.expand(keys, &[t, n]);
        let q = self.reshape(qpos, &[t, 1]);
        let q = self.expand(q, &[t, n]);
        let seen = Shape::new(&[t, n], DType::Bool);
        let seen = self.g.add_node(Op::Compare(CmpOp::Le), vec![keys, q], seen);
        let seen = self
            .g
            .add_node(Op::Cast { to: DType::F32 }, vec![seen], f32s(&[t, n]));
        let one = self.konst(&[1.0], &[1]);
        let big = self.konst(&[1e9], &[1]);
        let off = self.bin(BinaryOp::Sub, seen, one);
        let bias = self.bin(BinaryOp::Mul, off, big);
        let bias = self.reshape(bias, &[1, t, n]);
        self.expand(bias, &[self.c.heads, t, n])
    }

    /// One pre-norm block over `x [t, d]` at positions `qpos [t]`.
    fn layer(&mut self, l: usize, x: NodeId, qpos: NodeId, keys: Keys) -> NodeId {
        let (d, h) = (self.c.d_model, self.c.heads);
        let (t, hd) = (self.dims(x)[0], d / h);
        let a = self.rms(x, &format!("l{l}.attn_norm"));
        let proj = |net: &mut Self, w: &str| {
            let w = net.param(&format!("l{l}.{w}"), &[d, d]);
            net.mm(a, w)
        };
        let (q, k, v) = (proj(self, "wq"), proj(self, "wk"), proj(self, "wv"));
        let (k_all, v_all, n) = match keys {
            Keys::Own => {
                for row in [k, v] {
                    let out = self.reshape(row, &[1, t, d]);
                    self.caches.push(out);
                }
                (k, v, t)
            }
            Keys::Cache { cap, pos } => {
                let mut written = [k, v];
                for (i, kv) in ["k", "v"].into_iter().enumerate() {
                    let cache = self.g.input(format!("past_{kv}_{l}"), f32s(&[1, cap, d]));
                    let rows = self.reshape(written[i], &[1, t, d]);
                    // In place at `position`; only the written cache is
                    // read after (the op's output aliases its operand).
                    let op = Op::DynamicUpdateSlice { axis: 1 };
                    let next = self
                        .g
                        .add_node(op, vec![cache, rows, pos], f32s(&[1, cap, d]));
                    self.caches.push(next);
                    self.vars.push((cache, self.caches.len()));
                    written[i] = self.reshape(next, &[cap, d]);
                }
                (written[0], written[1], cap)
            }
        };
        // [rows, d] → [h, rows, hd].
        let split = |net: &mut Self, x: NodeId, rows: usize| {
            let x = net.reshape(x, &[rows, h, hd]);
            net.transpose(x, &[1, 0, 2])
        };
        let q = split(self, q, t);
        let k_t = self.reshape(k_all, &[n, h, hd]);
        let k_t = self.transpose(k_t, &[1, 2, 0]);
        let v = split(self, v_all, n);
        let scores = self.mm(q, k_t);
        let scale = self.konst(&[1.0 / (hd as f32).sqrt()], &[1]);
        let scores = self.bin(BinaryOp::Mul, scores, scale);
        let bias = self.bias(qpos, n);
        let scores = self.bin(BinaryOp::Add, scores, bias);
        let p = self.g.softmax(scores, 2, f32s(&[h, t, n]));
        let o = self.mm(p, v);
        let o = self.transpose(o, &[1, 0, 2]);
        let o = self.reshape(o, &[t, d]);
        let wo = self.param(&format!("l{l}.wo"), &[d, d]);
        let o = self.mm(o, wo);
        let x = self.bin(BinaryOp::Add, x, o);
        let m = self.rms(x, &format!("l{l}.mlp_norm"));
        let w1 = self.param(&format!("l{l}.w1"), &[d, self.c.ffn]);
        let w2 = self.param(&format!("l{l}.w2"), &[self.c.ffn, d]);
        let u = self.mm(m, w1);
        let u_dims = self.dims(u);
        let u = self.g.activation(Activation::Gelu, u, f32s(&u_dims));
        let u = self.mm(u, w2);
        self.bin(BinaryOp::Add, x, u)
    }

    /// Token and position embeddings, then every block: hidden `[t, d]`.
    fn trunk(&mut self, ids: NodeId, qpos: NodeId, keys: Keys) -> NodeId {
        let (v, d) = (self.c.vocab, self.c.d_model);
        let embed = self.param("embed", &[v, d]);
        let pos_embed = self.param("pos_embed", &[self.c.positions(), d]);
        let tok = self.rows(embed, ids);
        let at = self.rows(pos_embed, qpos);
        let mut x = self.bin(BinaryOp::Add, tok, at);
        for l in 0..self.c.layers {
            x = self.layer(l, x, qpos, keys);
        }
        x
    }

    /// Logits `[t, vocab]` of hidden `[t, d]`.
    fn head(&mut self, x: NodeId) -> NodeId {
        let x = self.rms(x, "final_norm");
        let w = self.param("lm_head", &[self.c.d_model, self.c.vocab]);
        self.mm(x, w)
    }

    fn finish(mut self, logits: NodeId) -> Graph {
        let mut outputs = vec![logits];
        outputs.extend(&self.caches);
        self.g.set_outputs(outputs);
        // The check's caches are its variables (`check_of` reads them so);
        // the step declares them too, which changes nothing for it.
        self.g.set_vars(self.vars);
        self.g
    }
}

/// The decode step at a `cap`-row cache: one token at `position`.
pub fn step_graph(cfg: &DecoderConfig, cap: usize) -> Graph {
    let mut net = Net::new(format!("step_{cap}"), cfg);
    let ids = net.g.input("input_ids", f32s(&[1]));
    let pos = net.g.input("position", f32s(&[1]));
    let x = net.trunk(ids, pos, Keys::Cache { cap, pos });
    let logits = net.head(x);
    net.finish(logits)
}

/// The check at a `cap`-row cache: `check_tokens` tokens from `position`,
/// each one's logits.
pub fn check_graph(cfg: &DecoderConfig, cap: usize) -> Graph {
    let q = cfg.check_tokens;
    let mut net = Net::new(format!("check_{cap}"), cfg);
    let ids = net.g.input("input_ids", f32s(&[q]));
    let pos = net.g.input("position", f32s(&[1]));
    let offsets: Vec<f32> = (0..q).map(|i| i as f32).collect();
    let offsets = net.konst(&offsets, &[q]);
    let qpos = net.bin(BinaryOp::Add, offsets, pos);
    let x = net.trunk(ids, qpos, Keys::Cache { cap, pos });
    let logits = net.head(x);
    net.finish(logits)
}

/// The prompt function at `seq` tokens: the logits at `last`, and every
/// position's K / V rows (padding rows too; the runtime keeps the prompt's).
pub fn prefill_graph(cfg: &DecoderConfig, seq: usize) -> Graph {
    let mut net = Net::new(format!("prefill_{seq}"), cfg);
    let ids = net.g.input("input_ids", f32s(&[seq]));
    let last = net.g.input("last", f32s(&[1]));
    let iota: Vec<f32> = (0..seq).map(|i| i as f32).collect();
    let qpos = net.konst(&iota, &[seq]);
    let x = net.trunk(ids, qpos, Keys::Own);
    // Causal: the padding after the prompt changes no earlier row.
    let d = cfg.d_model;
    let at = Shape::new(&[1], DType::I64);
    let at = net.g.add_node(Op::Cast { to: DType::I64 }, vec![last], at);
    let row = net.g.gather(x, at, 0, f32s(&[1, d]));
    let logits = net.head(row);
    net.finish(logits)
}

// ── tokenizer and generation helpers ─────────────────────────

/// `anyhow::Error`, named through rlx-runtime's own `TokenizerLoader`
/// signature: `TextCodec`'s methods return `anyhow::Result`, and this crate
/// has no `anyhow` dependency of its own.
pub trait ErrorOf {
    type Error;
}

impl<T, E> ErrorOf for fn(&[u8], &Value) -> Result<T, E> {
    type Error = E;
}

type AnyError = <rlx_runtime::model::TokenizerLoader as ErrorOf>::Error;

/// Token ids as text: `"3 17 5"`. The package's tokenizer is a stand-in
/// (rlx-runtime has no tokenizer of its own, and a `generate` entry must
/// name one); tests pass ids, not text.
pub struct IdCodec;

impl TextCodec for IdCodec {
    fn encode(&self, text: &str) -> Result<Vec<u32>, AnyError> {
        text.split_whitespace()
            .map(|w| w.parse::<u32>().map_err(Into::into))
            .collect()
    }
    fn decode(&self, ids: &[u32]) -> Result<String, AnyError> {
        let words: Vec<String> = ids.iter().map(u32::to_string).collect();
        Ok(words.join(" "))
    }
}

/// Install [`IdCodec`] as the process's tokenizer loader: needed before
/// opening the package (the loader is global to the process).
pub fn install_id_tokenizer() {
    rlx_runtime::model::set_tokenizer_loader(|_bytes, _chat| Ok(Box::new(IdCodec)));
}

/// Open the package with `options` (`{"device": "cpu"}`, plus e.g.
/// `"speculative": true`).
pub fn open(pkg: &DecoderPackage, options: Value) -> Result<Box<dyn Model>, Error> {
    install_id_tokenizer();
    let path = pkg.path.to_str().ok_or("package path is not UTF-8")?;
    Ok(rlx_runtime::model::open_source(path, options)?)
}

/// Greedy generation through the model API: `run` with `input_ids` and
/// `max_tokens` (greedy by default; speculative when opened so).
pub fn generate(
    model: &mut dyn Model,
    prompt: &[u32],
    max_tokens: usize,
) -> Result<Vec<u32>, Error> {
    let data = prompt
        .iter()
        .flat_map(|&t| (t as i32).to_le_bytes())
        .collect();
    let ids = Tensor::new("input_ids", DType::I32, vec![prompt.len()], data);
    let out = model.run(&[ids], &json!({"max_tokens": max_tokens}))?;
    let tokens = out.first().ok_or("generation returned no tokens")?;
    Ok(rlx_runtime::model::ids_of(tokens)?)
}

/// The index of the largest logit (the first of equals, as rlx's greedy).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}
