//! An [`Engine`] on a backend plugin's own executables: the weights bound
//! once and shared between the prefill and decode executables, the KV
//! caches held as the decode executable's state (each run's updated caches
//! replace it on the device), and only the token (or the logits, when
//! sampling needs them) read back.
//!
//! Two clients of the plugin, for what the backend must do well either way:
//! [`Client::Reuse`] compiles its decode graph once and runs it every step;
//! [`Client::Rebuild`] builds the decode graph from scratch every step and
//! compiles it again, as rlx's own LM crates do, taking the weights and the
//! caches over from the previous step's executable. The backend is to
//! recognise the graph it already compiled, so that the two cost the same.
//!
//! Where the embedding can be gathered on the device (dense, or packed in 4 or
//! 8 bits) the decode graph takes the token itself, held as state and fed from
//! each step's arg max: greedy steps then chain on the device and are submitted
//! ahead of their results, the host reading each token while the next step
//! computes.

use crate::engine::{guarded, param_value, step_out, Counters, Engine, Model, StepOut};
use crate::graph::{self, LOGITS, NEXT_TOKEN, OUTPUT_NAMES, TOKEN};
use crate::{Error, Result};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{compile_on_plugin, with_mode, PluginGraph};
use rlx_plugin_host::dist::split::param_names;
use rlx_runtime::{Device, ExecutableGraph};
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// One decode executable for the whole generation.
    Reuse,
    /// A decode graph built and compiled every step.
    Rebuild,
}

impl Client {
    pub fn parse(s: &str) -> Result<Client> {
        match s {
            "reuse" => Ok(Client::Reuse),
            "rebuild" => Ok(Client::Rebuild),
            _ => Err(Error(format!("unknown client {s:?} (reuse, rebuild)"))),
        }
    }
}

pub struct PluginEngine {
    model: Arc<Model>,
    device: Device,
    mode: Mode,
    client: Client,
    cap: usize,
    rope: (Vec<f32>, Vec<f32>),
    prefills: Vec<(usize, PluginGraph)>,
    decode: Option<PluginGraph>,
    /// The caches' input (and output) names, in output order.
    cache_names: Vec<String>,
    /// The decode graph takes the token (see the module docs), else the
    /// token's embedding row.
    token_on_device: bool,
    /// Rebuild client: earlier decode executables with a step submitted and
    /// not yet waited for, oldest first.
    retired: VecDeque<PluginGraph>,
    counters: Counters,
}

/// The outputs a step reads back, in this order: the token, and the
/// logits when asked (the caches stay on the device).
fn wanted(logits: bool) -> &'static [usize] {
    if logits {
        &[NEXT_TOKEN, LOGITS]
    } else {
        &[NEXT_TOKEN]
    }
}

/// The decode executable's states, each with the output that replaces it
/// after every run (and that the prefill's run fills first, by the same
/// name): the caches, and the token where it stays on the device.
fn states(cache_names: &[String], token_on_device: bool) -> impl Iterator<Item = (&str, usize)> {
    let caches = cache_names.iter().enumerate();
    let token = token_on_device.then_some((TOKEN, NEXT_TOKEN));
    caches.map(|(i, n)| (n.as_str(), 2 + i)).chain(token)
}

/// A step's outputs as [`wanted`] read them.
fn read_step(outs: &[Vec<f32>], logits: bool) -> Result<StepOut> {
    let token = outs
        .first()
        .ok_or_else(|| Error("the step returned no token".into()))?;
    step_out(token, logits.then(|| outs[1].as_slice()))
}

impl PluginEngine {
    /// The plugin registered for `device` (`rlx_plugin_host::install`).
    pub fn new(model: Arc<Model>, device: Device, mode: Mode, client: Client) -> PluginEngine {
        let cache_names = graph::cache_names(model.config.num_layers);
        PluginEngine {
            model,
            device,
            mode,
            client,
            cap: 0,
            rope: (Vec::new(), Vec::new()),
            prefills: Vec::new(),
            decode: None,
            cache_names,
            token_on_device: false,
            retired: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// The decode graph for caches of `self.cap` rows, with the token on
    /// the device where the embedding allows.
    fn decode_graph(&mut self) -> rlx_ir::Graph {
        let (c, w) = (&self.model.config, &self.model.weights);
        match graph::decode_on_device(c, w, self.cap) {
            Some(g) => {
                self.token_on_device = true;
                g
            }
            None => {
                self.token_on_device = false;
                graph::decode(c, w, self.cap)
            }
        }
    }

    /// Wait for (and drop) every step still submitted: what an error or a
    /// stop left in flight. Their failures are not this generation's: a
    /// step after a failed one fails too, and was reported with it.
    fn drain(&mut self) {
        let exes = self.retired.iter_mut().chain(self.decode.as_mut());
        for exe in exes {
            while exe.pending_runs() > 0 {
                let _dropped = exe.wait_outputs(&[]);
            }
        }
        self.retired.clear();
    }

    fn compile(&mut self, g: &rlx_ir::Graph) -> Result<PluginGraph> {
        let device = self.device;
        let exe = with_mode(self.mode, || compile_on_plugin(device, g)).map_err(Error)?;
        if exe.reused() {
            self.counters.reused += 1;
        } else {
            self.counters.compiles += 1;
        }
        Ok(exe)
    }

    /// Bind every param of `exe` (a graph `g` compiled) from the model.
    fn bind_params(&self, g: &rlx_ir::Graph, exe: &mut PluginGraph) -> Result<()> {
        for n in param_names(g) {
            let (bytes, dtype) = param_value(&self.model, &self.rope, &n)?;
            guarded(&format!("bind {n}"), || {
                exe.set_param_typed(&n, &bytes, dtype)
            })?;
        }
        Ok(())
    }

    /// A new decode executable that takes the weights and the caches over
    /// from the last one: the rebuild client's step.
    fn rebuild(&mut self) -> Result<()> {
        let g = self.decode_graph();
        let mut exe = self.compile(&g)?;
        let old = self
            .decode
            .take()
            .expect("a decode executable to take over from");
        if !exe.share_params_from(&old) {
            return Err(Error(
                "the plugin cannot share params between executables".into(),
            ));
        }
        // The caches and the token, with their feeds, in one call.
        let taken = exe.take_states_from(&old).map_err(Error);
        if old.pending_runs() > 0 {
            self.retired.push_back(old);
        }
        self.decode = Some(exe);
        taken
    }

    /// Before a step: a new executable for the rebuild client.
    fn next_step(&mut self) -> Result<&mut PluginGraph> {
        if self.client == Client::Rebuild {
            self.rebuild()?;
        }
        Ok(self.decode.as_mut().expect("prepare comes first"))
    }
}

impl Engine for PluginEngine {
    fn prepare(&mut self, cap: usize, rows: usize) -> Result<()> {
        if self.cap != cap {
            self.cap = cap;
            self.rope = crate::rope::tables(&self.model.config, cap);
            self.prefills.clear();
            self.drain();
            let g = self.decode_graph();
            let mut exe = self.compile(&g)?;
            self.bind_params(&g, &mut exe)?;
            self.decode = Some(exe);
        }
        if !self.prefills.iter().any(|(l, _)| *l == rows) {
            let g = graph::prefill(&self.model.config, &self.model.weights, rows, cap);
            let mut exe = self.compile(&g)?;
            let decode = self
                .decode
                .as_ref()
                .expect("the decode executable is compiled");
            if !exe.share_params_from(decode) {
                self.bind_params(&g, &mut exe)?;
            }
            self.prefills.push((rows, exe));
        }
        Ok(())
    }

    fn prefill(&mut self, x: &[f32], len: usize, last: usize, logits: bool) -> Result<StepOut> {
        self.drain();
        let Some((_, exe)) = self.prefills.iter_mut().find(|(l, _)| *l == len) else {
            return Err(Error(format!("no prefill of {len} rows was prepared")));
        };
        let last = [last as f32];
        // Only the token (and the logits when asked) come back; the decode
        // executable takes the caches (and the token) over from this run's
        // outputs on the device.
        let outs = guarded("prefill", || {
            exe.run_read_outputs(&[("x", x), ("last", &last)], Some(wanted(logits)))
        })?;
        let out = read_step(&outs, logits)?;
        let exe: &PluginGraph = exe;
        let decode = self.decode.as_mut().expect("prepare comes first");
        for (state, out) in states(&self.cache_names, self.token_on_device) {
            let value = if out == NEXT_TOKEN {
                OUTPUT_NAMES[NEXT_TOKEN]
            } else {
                state
            };
            decode.hold_from(state, Some(exe), value).map_err(Error)?;
            if !decode.set_gpu_handle_feed(state, out) {
                return Err(Error(format!(
                    "the plugin cannot feed {state} from its output (no executable state)"
                )));
            }
        }
        Ok(out)
    }

    fn decode(&mut self, token: u32, pos: usize, logits: bool) -> Result<StepOut> {
        let on_device = self.token_on_device;
        let mut row = Vec::new();
        if !on_device {
            row = vec![0f32; self.model.config.hidden_size];
            self.model.weights.embedding_row(token as usize, &mut row);
        }
        let exe = self.next_step()?;
        let pos = [pos as f32];
        // The token of a sampled step is the host's choice: held as the
        // state the graph reads, or sent as its embedding row.
        if on_device && !exe.bind_gpu_handle(TOKEN, &[token as f32]) {
            return Err(Error(format!("the plugin could not hold {TOKEN}")));
        }
        let inputs: &[(&str, &[f32])] = if on_device {
            &[("pos", &pos)]
        } else {
            &[("x", &row), ("pos", &pos)]
        };
        let outs = guarded("decode", || {
            exe.run_read_outputs(inputs, Some(wanted(logits)))
        })?;
        self.counters.decode_steps += 1;
        self.counters.decode_bytes_in += ((row.len().max(1) + 1) * 4) as u64;
        self.counters.decode_bytes_out += (outs.iter().map(Vec::len).sum::<usize>() * 4) as u64;
        read_step(&outs, logits)
    }

    fn chains_greedy(&self) -> bool {
        self.token_on_device && self.decode.as_ref().is_some_and(|d| d.submits())
    }

    fn submit_greedy(&mut self, pos: usize) -> Result<()> {
        if !self.token_on_device {
            return Err(Error(
                "this model's decode graph takes the token's embedding row from the host".into(),
            ));
        }
        let exe = self.next_step()?;
        exe.submit_run(&[("pos", &[pos as f32])]).map_err(Error)?;
        self.counters.decode_steps += 1;
        self.counters.decode_bytes_in += 4;
        Ok(())
    }

    fn wait_greedy(&mut self) -> Result<u32> {
        let exe = match self.retired.front_mut() {
            Some(old) => old,
            None => self.decode.as_mut().expect("prepare comes first"),
        };
        let outs = exe.wait_outputs(&[NEXT_TOKEN]).map_err(Error)?;
        if self.retired.front().is_some_and(|o| o.pending_runs() == 0) {
            self.retired.pop_front();
        }
        let token = outs
            .get(NEXT_TOKEN)
            .and_then(|o| o.as_ref())
            .and_then(|t| t.first())
            .ok_or_else(|| Error("the step returned no token".into()))?;
        self.counters.decode_bytes_out += 4;
        Ok(*token as u32)
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn peak_bytes(&self) -> Option<u64> {
        self.decode.as_ref()?.memory_usage().map(|m| m.peak_bytes)
    }

    fn name(&self) -> String {
        format!("{} ({})", self.device, self.mode.name())
    }
}
