//! A graph split between the plugin and the CPU backend, run as one
//! [`ExecutableGraph`]: partitions in order, each boundary tensor handed
//! from the partition that computes it to those that read it, in its own
//! dtype, through host memory.

use super::{boundary_name, subgraph, Plan, Side};
use rlx_ir::{DType, Graph, NodeId, Op};
use rlx_runtime::ExecutableGraph;
use std::collections::HashMap;

struct Part {
    exe: Box<dyn ExecutableGraph>,
    /// Boundary values it reads, and their input names (`%<id>`).
    reads: Vec<NodeId>,
    read_names: Vec<String>,
    /// Values it computes for later partitions or the graph, its outputs in order.
    writes: Vec<NodeId>,
    /// The graph inputs and params it has, by name.
    inputs: Vec<String>,
    params: Vec<String>,
}

pub struct SplitGraph {
    parts: Vec<Part>,
    outputs: Vec<NodeId>,
    /// Graph outputs that are inputs or params themselves, by node.
    leaf_outputs: HashMap<NodeId, String>,
    /// Params that are graph outputs, as last bound.
    param_values: HashMap<String, (Vec<u8>, DType)>,
    label: String,
}

fn leaf_names(g: &Graph) -> (Vec<String>, Vec<String>) {
    let (mut inputs, mut params) = (Vec::new(), Vec::new());
    for n in g.nodes() {
        match &n.op {
            Op::Input { name } => inputs.push(name.clone()),
            Op::Param { name } => params.push(name.clone()),
            _ => {}
        }
    }
    (inputs, params)
}

impl SplitGraph {
    /// Compile every partition of `plan`: the plugin's with `plugin`, the
    /// CPU's with `cpu`.
    pub fn compile(
        g: &Graph,
        plan: &Plan,
        mut plugin: impl FnMut(Graph) -> Box<dyn ExecutableGraph>,
        mut cpu: impl FnMut(Graph) -> Box<dyn ExecutableGraph>,
    ) -> SplitGraph {
        let parts = (0..plan.partitions.len())
            .map(|i| {
                let (sub, reads, writes) = subgraph(g, plan, i);
                let (inputs, params) = leaf_names(&sub);
                let side = plan.partitions[i].side;
                let read_names: Vec<String> = reads.iter().map(|r| boundary_name(*r)).collect();
                let inputs = inputs
                    .into_iter()
                    .filter(|n| !read_names.contains(n))
                    .collect();
                let exe = match side {
                    Side::Plugin => plugin(sub),
                    Side::Cpu => cpu(sub),
                };
                Part {
                    exe,
                    reads,
                    read_names,
                    writes,
                    inputs,
                    params,
                }
            })
            .collect();
        let leaf_outputs = g
            .outputs
            .iter()
            .filter_map(|id| match &g.node(*id).op {
                Op::Input { name } | Op::Param { name } => Some((*id, name.clone())),
                _ => None,
            })
            .collect();
        SplitGraph {
            parts,
            outputs: g.outputs.clone(),
            leaf_outputs,
            param_values: HashMap::new(),
            label: plan.label.clone(),
        }
    }

    fn bind(&mut self, name: &str, data: &[u8], dtype: DType) {
        for p in self
            .parts
            .iter_mut()
            .filter(|p| p.params.iter().any(|n| n == name))
        {
            p.exe.set_param_typed(name, data, dtype);
        }
        if self.leaf_outputs.values().any(|n| n == name) {
            self.param_values
                .insert(name.to_string(), (data.to_vec(), dtype));
        }
    }
}

impl ExecutableGraph for SplitGraph {
    fn capabilities(&self) -> rlx_runtime::ExecutableCapabilities {
        rlx_runtime::ExecutableCapabilities {
            typed_io: true,
            ..rlx_runtime::ExecutableCapabilities::NONE
        }
    }

    fn set_param(&mut self, name: &str, data: &[f32]) {
        let bytes = rlx_plugin_api::convert::f32_to_le(data);
        self.bind(name, &bytes, DType::F32);
    }

    fn set_param_typed(&mut self, name: &str, data: &[u8], dtype: DType) {
        self.bind(name, data, dtype);
    }

    fn run(&mut self, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
        let bytes: Vec<(&str, Vec<u8>)> = inputs
            .iter()
            .map(|(n, v)| (*n, rlx_plugin_api::convert::f32_to_le(v)))
            .collect();
        let typed: Vec<(&str, &[u8], DType)> = bytes
            .iter()
            .map(|(n, b)| (*n, b.as_slice(), DType::F32))
            .collect();
        self.run_typed(&typed)
            .into_iter()
            .map(|(b, dt)| rlx_runtime::backend::widen_bytes_to_f32(&b, dt))
            .collect()
    }

    fn run_typed(&mut self, inputs: &[(&str, &[u8], DType)]) -> Vec<(Vec<u8>, DType)> {
        let mut values: HashMap<NodeId, (Vec<u8>, DType)> = HashMap::new();
        for p in &mut self.parts {
            let mut feed: Vec<(&str, &[u8], DType)> = inputs
                .iter()
                .filter(|(n, ..)| p.inputs.iter().any(|m| m == n))
                .copied()
                .collect();
            for (id, name) in p.reads.iter().zip(&p.read_names) {
                let (b, dt) = values.get(id).unwrap_or_else(|| {
                    panic!(
                        "{} plugin: partition input {name} was not computed before it is read",
                        self.label
                    )
                });
                feed.push((name.as_str(), b.as_slice(), *dt));
            }
            let outs = p.exe.run_typed(&feed);
            if outs.len() != p.writes.len() {
                panic!(
                    "{} plugin: a partition returned {} outputs for {}",
                    self.label,
                    outs.len(),
                    p.writes.len()
                );
            }
            values.extend(p.writes.iter().copied().zip(outs));
        }
        self.outputs
            .iter()
            .enumerate()
            .map(|(i, id)| {
                // Moved out, not copied, unless the graph returns it again later.
                let again = self.outputs[i + 1..].contains(id);
                let computed = if again {
                    values.get(id).cloned()
                } else {
                    values.remove(id)
                };
                if let Some(v) = computed {
                    return v;
                }
                let name = &self.leaf_outputs[id];
                if let Some(v) = self.param_values.get(name) {
                    return v.clone();
                }
                let (_, b, dt) = inputs.iter().find(|(n, ..)| n == name).unwrap_or_else(|| {
                    panic!("{} plugin: input {name:?} was not given", self.label)
                });
                (b.to_vec(), *dt)
            })
            .collect()
    }
}
