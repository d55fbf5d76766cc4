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

use crate::engine::{param_names, param_value, Counters, Engine, Model, StepOut};
use crate::graph::{self, LOGITS, NEXT_TOKEN};
use crate::{Error, Result};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{compile_on_plugin, with_mode, PluginGraph};
use rlx_runtime::{Device, ExecutableGraph};
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
    counters: Counters,
}

fn guarded<R>(what: &str, f: impl FnOnce() -> R) -> Result<R> {
    rlx_plugin_host::guard::catch_quiet(f).map_err(|e| Error(format!("{what}: {e}")))
}

impl PluginEngine {
    /// The plugin registered for `device` (`rlx_plugin_host::install`).
    pub fn new(model: Arc<Model>, device: Device, mode: Mode, client: Client) -> PluginEngine {
        PluginEngine {
            model,
            device,
            mode,
            client,
            cap: 0,
            rope: (Vec::new(), Vec::new()),
            prefills: Vec::new(),
            decode: None,
            counters: Counters::default(),
        }
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

    /// The decode executable's caches (held) fed from its own outputs after
    /// each run.
    fn feed_caches(&self, exe: &mut PluginGraph) -> Result<()> {
        for l in 0..self.model.config.num_layers {
            for (i, name) in [graph::k_cache(l), graph::v_cache(l)].iter().enumerate() {
                if !exe.set_gpu_handle_feed(name, 2 + 2 * l + i) {
                    return Err(Error(format!(
                        "the plugin cannot feed {name} from its output (no executable state)"
                    )));
                }
            }
        }
        Ok(())
    }

    fn step_out(outs: &[Vec<f32>], logits: bool) -> Result<StepOut> {
        let token = outs
            .first()
            .and_then(|t| t.first())
            .ok_or_else(|| Error("the step returned no token".into()))?;
        Ok(StepOut {
            token: *token as u32,
            logits: logits.then(|| outs[1].clone()),
        })
    }

    /// A new decode executable that takes the weights and the caches over
    /// from the last one: the rebuild client's step.
    fn rebuild(&mut self) -> Result<()> {
        let g = graph::decode(&self.model.config, &self.model.weights, self.cap);
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
        // The caches, with their feeds, in one call.
        exe.take_states_from(&old).map_err(Error)?;
        self.decode = Some(exe);
        Ok(())
    }
}

impl Engine for PluginEngine {
    fn prepare(&mut self, cap: usize, rows: usize) -> Result<()> {
        if self.cap != cap {
            self.cap = cap;
            self.rope = crate::rope::tables(&self.model.config, cap);
            self.prefills.clear();
            let g = graph::decode(&self.model.config, &self.model.weights, cap);
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
        let exe = match self.prefills.iter_mut().find(|(l, _)| *l == len) {
            Some((_, exe)) => exe,
            None => return Err(Error(format!("no prefill of {len} rows was prepared"))),
        };
        let last = [last as f32];
        // The caches stay on the device: only the token (and the logits
        // when asked) come back; the decode executable takes the caches
        // over from this run's outputs.
        let want: &[usize] = if logits {
            &[NEXT_TOKEN, LOGITS]
        } else {
            &[NEXT_TOKEN]
        };
        let outs = guarded("prefill", || {
            exe.run_read_outputs(&[("x", x), ("last", &last)], Some(want))
        })?;
        let out = Self::step_out(&outs, logits)?;
        let exe = &self
            .prefills
            .iter()
            .find(|(l, _)| *l == len)
            .expect("run above")
            .1;
        let decode = self.decode.as_mut().expect("prepare comes first");
        for l in 0..self.model.config.num_layers {
            for name in [graph::k_cache(l), graph::v_cache(l)] {
                decode.hold_from(&name, Some(exe), &name).map_err(Error)?;
            }
        }
        let mut decode = self.decode.take().expect("prepare comes first");
        let fed = self.feed_caches(&mut decode);
        self.decode = Some(decode);
        fed?;
        Ok(out)
    }

    fn decode(&mut self, x: &[f32], pos: usize, logits: bool) -> Result<StepOut> {
        if self.client == Client::Rebuild {
            self.rebuild()?;
        }
        let exe = self.decode.as_mut().expect("prepare comes first");
        let pos = [pos as f32];
        let want: &[usize] = if logits {
            &[NEXT_TOKEN, LOGITS]
        } else {
            &[NEXT_TOKEN]
        };
        let outs = guarded("decode", || {
            exe.run_read_outputs(&[("x", x), ("pos", &pos)], Some(want))
        })?;
        self.counters.decode_steps += 1;
        self.counters.decode_bytes_in += ((x.len() + 1) * 4) as u64;
        self.counters.decode_bytes_out += (outs.iter().map(Vec::len).sum::<usize>() * 4) as u64;
        Self::step_out(&outs, logits)
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
