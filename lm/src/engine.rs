//! Where a generation's graphs run. An [`Engine`] compiles the prefill and
//! decode graphs of one model, binds the weights once, and runs steps:
//! given a step's embedding rows it returns the greedy token, and the
//! logits when asked. Two engines:
//!
//! - [`HostEngine`]: any rlx-runtime device through `Session` (the CPU
//!   backend is the reference). The KV caches live on the host and go in
//!   and out of every decode step, as rlx-runtime's host paths move them.
//! - [`crate::plugin_engine::PluginEngine`]: a backend plugin's own
//!   executables, which keep the caches on the plugin's device.

use crate::config::ModelConfig;
use crate::graph::{self, LOGITS, NEXT_TOKEN, ROPE_COS, ROPE_SIN};
use crate::weights::{Tensor, Weights};
use crate::{Error, Result};
use rlx_ir::{DType, Graph};
use rlx_plugin_host::dist::split::param_names;
use rlx_runtime::{CompiledGraph, Device, Session};
use std::borrow::Cow;
use std::sync::Arc;

/// What one step returns.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOut {
    /// The arg max of the logits (computed where the step ran).
    pub token: u32,
    /// The logits, when the step was asked for them.
    pub logits: Option<Vec<f32>>,
}

/// Counts over an engine's life: what was compiled and what crossed
/// between the host and the backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Graphs compiled by the backend.
    pub compiles: u64,
    /// Graphs handed to the backend that it recognised as already compiled
    /// (no compile done).
    pub reused: u64,
    /// Bytes sent to the backend by decode steps (inputs, state binds).
    pub decode_bytes_in: u64,
    /// Bytes read back from it by decode steps.
    pub decode_bytes_out: u64,
    /// Decode steps run.
    pub decode_steps: u64,
}

/// The model an engine runs: its config, weights and rotary tables.
pub struct Model {
    pub config: ModelConfig,
    pub weights: Weights,
}

impl Model {
    pub fn load(dir: &std::path::Path) -> Result<Model> {
        let config = ModelConfig::from_dir(dir)?;
        let weights = Weights::load(dir, &config)?;
        Ok(Model { config, weights })
    }
}

pub trait Engine {
    /// Compile for caches of `cap` rows and prompts padded to `rows` rows
    /// (what is already compiled for these sizes is kept).
    fn prepare(&mut self, cap: usize, rows: usize) -> Result<()>;
    /// The prompt's embedding rows `x` (`len` rows, the prompt padded to a
    /// bucket), wanting row `last`'s token; fills the caches.
    fn prefill(&mut self, x: &[f32], len: usize, last: usize, logits: bool) -> Result<StepOut>;
    /// One step: `token` at position `pos`.
    fn decode(&mut self, token: u32, pos: usize, logits: bool) -> Result<StepOut>;
    /// Whether greedy steps chain on the backend ([`Engine::submit_greedy`]):
    /// each step's token is the next step's input where the step ran, so a
    /// step is started before the last one's token is read.
    fn chains_greedy(&self) -> bool {
        false
    }
    /// Start a greedy step at `pos` whose input is the token the last step
    /// (or the prefill) chose, without waiting for it.
    fn submit_greedy(&mut self, pos: usize) -> Result<()> {
        let _ = pos;
        Err(Error(format!(
            "{} runs its steps one at a time",
            self.name()
        )))
    }
    /// Wait for the oldest step started and not waited for: its token.
    fn wait_greedy(&mut self) -> Result<u32> {
        Err(Error(format!("{} has no step started", self.name())))
    }
    fn counters(&self) -> Counters;
    /// Peak bytes the backend held for this process, where it can tell.
    fn peak_bytes(&self) -> Option<u64>;
    /// A short name: `cpu`, `mlx (lazy)`.
    fn name(&self) -> String;
}

/// The value bound for param `name` of a graph of `model` with caches of
/// `cap` rows: its bytes and dtype.
pub fn param_value<'a>(
    model: &'a Model,
    rope: &'a (Vec<f32>, Vec<f32>),
    name: &str,
) -> Result<(Cow<'a, [u8]>, DType)> {
    let f32s = |v: &'a [f32]| (rlx_plugin_api::convert::f32_le_bytes(v), DType::F32);
    if name == ROPE_COS {
        return Ok(f32s(&rope.0));
    }
    if name == ROPE_SIN {
        return Ok(f32s(&rope.1));
    }
    for (suffix, part) in [(".scales", 1), (".biases", 2)] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some(Tensor::Packed(p)) = model.weights.tensors.get(&format!("{base}.weight")) {
                let bytes = if part == 1 { &p.scales } else { &p.biases };
                return Ok((Cow::Borrowed(bytes.as_slice()), DType::F32));
            }
        }
    }
    match model.weights.tensors.get(name) {
        Some(Tensor::Dense { data, .. }) => Ok(f32s(data)),
        Some(Tensor::Packed(p)) => Ok((Cow::Borrowed(p.w_q.as_slice()), DType::U8)),
        None => Err(Error(format!(
            "graph param {name:?} is not a weight of the model"
        ))),
    }
}

/// rlx-runtime's panics (how its `CompiledGraph` reports failures) as errors.
pub(crate) fn guarded<R>(what: &str, f: impl FnOnce() -> R) -> Result<R> {
    rlx_plugin_host::guard::catch_quiet(f).map_err(|e| Error(format!("{what}: {e}")))
}

/// A step's outputs: the greedy token's output, and the logits when asked.
pub(crate) fn step_out(token: &[f32], logits: Option<&[f32]>) -> Result<StepOut> {
    let token = token
        .first()
        .ok_or_else(|| Error("the step returned no token".into()))?;
    Ok(StepOut {
        token: *token as u32,
        logits: logits.map(<[f32]>::to_vec),
    })
}

fn f32_bytes(n: usize) -> u64 {
    (n * 4) as u64
}

/// The graphs of one capacity on an rlx-runtime device, caches on the host.
pub struct HostEngine {
    model: Arc<Model>,
    device: Device,
    cap: usize,
    rope: (Vec<f32>, Vec<f32>),
    prefills: Vec<(usize, CompiledGraph)>,
    decode: Option<CompiledGraph>,
    caches: Vec<Vec<f32>>,
    /// The caches' input (and output) names, in output order.
    cache_names: Vec<String>,
    counters: Counters,
}

impl HostEngine {
    pub fn new(model: Arc<Model>, device: Device) -> HostEngine {
        let cache_names = graph::cache_names(model.config.num_layers);
        HostEngine {
            model,
            device,
            cap: 0,
            rope: (Vec::new(), Vec::new()),
            prefills: Vec::new(),
            decode: None,
            caches: Vec::new(),
            cache_names,
            counters: Counters::default(),
        }
    }

    fn compile(&mut self, g: Graph) -> Result<CompiledGraph> {
        let names = param_names(&g);
        let device = self.device;
        let mut c = guarded("compile", || Session::new(device).compile(g))?;
        self.counters.compiles += 1;
        for n in names {
            let (bytes, dtype) = param_value(&self.model, &self.rope, &n)?;
            guarded(&format!("bind {n}"), || {
                c.set_param_typed(&n, &bytes, dtype)
            })?;
        }
        Ok(c)
    }

    fn step_out(outs: &[Vec<f32>], logits: bool) -> Result<StepOut> {
        step_out(&outs[NEXT_TOKEN], logits.then(|| outs[LOGITS].as_slice()))
    }
}

impl Engine for HostEngine {
    fn prepare(&mut self, cap: usize, rows: usize) -> Result<()> {
        if self.cap != cap {
            self.cap = cap;
            self.rope = crate::rope::tables(&self.model.config, cap);
            self.prefills.clear();
            let g = graph::decode(&self.model.config, &self.model.weights, cap);
            self.decode = Some(self.compile(g)?);
        }
        if !self.prefills.iter().any(|(l, _)| *l == rows) {
            let g = graph::prefill(&self.model.config, &self.model.weights, rows, cap);
            let c = self.compile(g)?;
            self.prefills.push((rows, c));
        }
        Ok(())
    }

    fn prefill(&mut self, x: &[f32], len: usize, last: usize, logits: bool) -> Result<StepOut> {
        let exe = match self.prefills.iter_mut().find(|(l, _)| *l == len) {
            Some((_, exe)) => exe,
            None => return Err(Error(format!("no prefill of {len} rows was prepared"))),
        };
        let last = [last as f32];
        let mut outs = guarded("prefill", || exe.run(&[("x", x), ("last", &last)]))?;
        let out = Self::step_out(&outs, logits)?;
        self.caches = outs.split_off(2);
        Ok(out)
    }

    fn decode(&mut self, token: u32, pos: usize, logits: bool) -> Result<StepOut> {
        let mut x = vec![0f32; self.model.config.hidden_size];
        self.model.weights.embedding_row(token as usize, &mut x);
        let x = x.as_slice();
        let exe = self.decode.as_mut().expect("prepare comes first");
        let pos = [pos as f32];
        let mut inputs: Vec<(&str, &[f32])> = vec![("x", x), ("pos", &pos)];
        inputs.extend(
            self.cache_names
                .iter()
                .map(String::as_str)
                .zip(self.caches.iter().map(Vec::as_slice)),
        );
        let sent: usize = inputs.iter().map(|(_, d)| d.len()).sum();
        let mut outs = guarded("decode", || exe.run(&inputs))?;
        let out = Self::step_out(&outs, logits)?;
        self.counters.decode_steps += 1;
        self.counters.decode_bytes_in += f32_bytes(sent);
        self.counters.decode_bytes_out += f32_bytes(outs.iter().map(Vec::len).sum());
        self.caches = outs.split_off(2);
        Ok(out)
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn peak_bytes(&self) -> Option<u64> {
        None
    }

    fn name(&self) -> String {
        self.device.to_string()
    }
}
