//! A shipped stage compiled on this worker: what `rlx_runtime::dist`'s
//! `recv_stage` does, with its failures as errors. rlx's version panics
//! when the compile fails, binds an empty tensor for a weight it cannot
//! resolve, and falls back to the CPU silently when the directed device is
//! missing; a worker serving a coordinator must instead answer with the
//! reason, so the coordinator can report it.

use crate::guard;
use rlx_ir::{DType, Dim, Graph, Op};
use rlx_runtime::dist::{StageSpec, WeightCache};
use rlx_runtime::CompiledGraph;
use rlx_runtime::{Device, Session};

/// A compiled stage, ready to run activations.
pub struct Stage {
    pub device: Device,
    input: String,
    input_len: usize,
    exe: CompiledGraph,
}

fn static_dim(d: Dim) -> Option<usize> {
    match d {
        Dim::Static(n) => Some(n),
        Dim::Dynamic(_) => None,
    }
}

/// The element count of `name`'s input in `g`, when static.
fn input_len(g: &Graph, name: &str) -> Result<usize, String> {
    let node = g
        .nodes()
        .iter()
        .find(|n| matches!(&n.op, Op::Input { name: n2 } if n2 == name))
        .ok_or_else(|| format!("the stage's graph has no input named {name:?}"))?;
    node.shape
        .dims()
        .iter()
        .map(|d| static_dim(*d))
        .product::<Option<usize>>()
        .ok_or_else(|| format!("the stage's input {name:?} has a dynamic shape"))
}

/// The params `g` declares: name and element count.
fn params(g: &Graph) -> Vec<(String, Option<usize>)> {
    g.nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Param { name } => Some((
                name.clone(),
                n.shape.dims().iter().map(|d| static_dim(*d)).product(),
            )),
            _ => None,
        })
        .collect()
}

impl Stage {
    /// Compile `spec` on `device` and bind its weights, each resolved on
    /// this machine from its URI (`rlx_runtime::dist::WeightCache`'s
    /// schemes: safetensors, GGUF, raw f32 files, .rlxp).
    pub fn build(spec: StageSpec, device: Device) -> Result<Stage, String> {
        let input_len = input_len(&spec.graph, &spec.input)?;
        let declared = params(&spec.graph);
        for (name, _) in &declared {
            if !spec.weights.iter().any(|w| &w.name == name) {
                return Err(format!(
                    "the stage's param {name:?} has no weight in its spec"
                ));
            }
        }
        for w in &spec.weights {
            if !declared.iter().any(|(n, _)| n == &w.name) {
                return Err(format!(
                    "weight {:?}: the stage's graph has no such param",
                    w.name
                ));
            }
        }
        let graph = spec.graph;
        let mut exe = guard::catch(&format!("compiling the stage on {device}"), || {
            Session::new(device).compile(graph)
        })?;
        // One weight at a time, resolved, bound and dropped: the host never
        // holds the whole stage's weights at once.
        let mut cache = WeightCache::new();
        for w in &spec.weights {
            let what = |e: String| format!("weight {:?} ({}): {e}", w.name, w.uri);
            if w.packed {
                let bytes = cache.bytes(&w.uri).map_err(what)?;
                guard::catch(&format!("binding weight {:?}", w.name), || {
                    exe.set_param_typed(&w.name, &bytes, DType::U8)
                })?;
                continue;
            }
            let vals = cache.f32(&w.uri).map_err(what)?;
            let want = declared
                .iter()
                .find(|(n, _)| n == &w.name)
                .and_then(|p| p.1);
            if let Some(n) = want.filter(|n| *n != vals.len()) {
                return Err(what(format!("{} values for a param of {n}", vals.len())));
            }
            guard::catch(&format!("binding weight {:?}", w.name), || {
                exe.set_param(&w.name, &vals)
            })?;
        }
        Ok(Stage {
            device,
            input: spec.input,
            input_len,
            exe,
        })
    }

    /// Run one activation; the stage's (first) output.
    pub fn run(&mut self, x: &[f32]) -> Result<Vec<f32>, String> {
        if x.len() != self.input_len {
            return Err(format!(
                "activation of {} values for the stage's input {:?} of {}",
                x.len(),
                self.input,
                self.input_len
            ));
        }
        let input = self.input.as_str();
        let exe = &mut self.exe;
        let outs = guard::catch("running the stage", || exe.run(&[(input, x)]))?;
        outs.into_iter()
            .next()
            .ok_or_else(|| "the stage's graph has no output".to_string())
    }
}
