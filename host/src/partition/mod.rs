//! Where each node of a graph runs when the plugin cannot take all of it:
//! the plugin's claims (op kind and dtype), the split into partitions, and
//! the explanation a user reads (`rlx-host run --explain`).
//!
//! A node runs on the plugin when the plugin claims its kind for its output
//! dtype (the rule the plugin itself applies at compile), else on
//! rlx-runtime's CPU backend. Partitions are the largest groups the order
//! allows: each node gets a stage, the largest stage among its inputs, plus
//! one where an input comes from the other side. All nodes of one (stage,
//! side) form one partition, so a run alternates sides as few times as the
//! data dependencies force. Inputs and params are bound in every partition
//! that reads them. A constant is copied into each partition that reads it,
//! so it never becomes a boundary tensor.

mod split;

pub use split::SplitGraph;

use rlx_ir::{DType, Graph, NodeId, Op, OpKind};
use rlx_plugin_loader::LoadedPlugin;
use std::collections::HashMap;
use std::fmt;

/// What a plugin takes: for each op kind, the output dtypes; a custom op
/// by its name (the plugin's registry, or rlx-cpu's kernel through the
/// host-kernel bridge: `crate::cpu_bridge`).
#[derive(Clone, Default)]
pub struct Claims {
    pub label: String,
    kinds: HashMap<OpKind, Vec<DType>>,
    /// Asked about each custom op's name; None claims every name.
    plugin: Option<std::sync::Arc<LoadedPlugin>>,
}

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claims")
            .field("label", &self.label)
            .field("kinds", &self.kinds)
            .finish_non_exhaustive()
    }
}

impl Claims {
    pub fn of(plugin: &std::sync::Arc<LoadedPlugin>) -> Claims {
        let mut kinds: HashMap<OpKind, Vec<DType>> = HashMap::new();
        for o in plugin.supported_ops() {
            if let Some(k) = crate::abi_names::op_kind(&o.op_kind) {
                let e = kinds.entry(k).or_default();
                e.extend(o.dtypes.iter().map(|d| crate::abi_names::ir_dtype(*d)));
            }
        }
        Claims {
            label: plugin.descriptor().name.clone(),
            kinds,
            plugin: Some(plugin.clone()),
        }
    }

    /// `Ok` when the plugin takes the node `op` with output `dtype`, else
    /// why not. A custom op is taken by its kind and then by its name.
    pub fn judge(&self, op: &Op, dtype: DType) -> Result<(), String> {
        self.judge_kind(op.kind(), dtype)?;
        let Some(p) = &self.plugin else {
            return Ok(());
        };
        let names = match op {
            Op::Custom { name, .. } => vec![name.clone()],
            // A loop or branch takes its body whole: every custom op in it.
            _ => op
                .subgraphs()
                .into_iter()
                .flat_map(|b| crate::cpu_bridge::custom_ops(b).into_iter().map(|(n, _)| n))
                .collect(),
        };
        match names.iter().find(|n| !crate::cpu_bridge::runs(p, n)) {
            Some(name) => Err(format!(
                "{} has no kernel for custom op {name} (neither its own nor rlx-cpu's)",
                self.label
            )),
            None => Ok(()),
        }
    }

    /// `Ok` when the plugin claims `kind` for `dtype`, else why not.
    pub fn judge_kind(&self, kind: OpKind, dtype: DType) -> Result<(), String> {
        match self.kinds.get(&kind) {
            None => Err(format!("{} does not claim {kind:?}", self.label)),
            Some(d) if d.contains(&dtype) => Ok(()),
            Some(d) => Err(format!(
                "{} claims {kind:?} for {}",
                self.label,
                d.iter().map(dtype_name).collect::<Vec<_>>().join(", ")
            )),
        }
    }
}

fn dtype_name(d: &DType) -> String {
    format!("{d:?}").to_lowercase()
}

/// Whether a graph may be split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Nodes the plugin does not take run on rlx-runtime's CPU backend.
    #[default]
    Cpu,
    /// The graph runs on the plugin whole or not at all: the first node it
    /// does not take is the error.
    Never,
}

/// Which executor runs a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Plugin,
    Cpu,
}

/// One node's placement.
#[derive(Clone, Debug)]
pub struct Placement {
    pub node: NodeId,
    pub kind: OpKind,
    pub dtype: DType,
    /// `None` for inputs, params and constants, which are not placed.
    pub side: Option<Side>,
    /// Why it is on the CPU (empty on the plugin).
    pub why: String,
    /// Its partition, in run order.
    pub partition: Option<usize>,
}

/// A partition: its side and nodes, in graph order.
#[derive(Clone, Debug)]
pub struct Partition {
    pub side: Side,
    pub nodes: Vec<NodeId>,
}

/// Where every node of a graph runs.
#[derive(Clone, Debug)]
pub struct Plan {
    pub label: String,
    pub placements: Vec<Placement>,
    pub partitions: Vec<Partition>,
    /// Values one partition produces and a later one reads.
    pub boundary: Vec<NodeId>,
    pub boundary_bytes: u64,
}

fn is_leaf(op: &Op) -> bool {
    matches!(op, Op::Input { .. } | Op::Param { .. })
}

/// A constant no partition computes: copied where it is read. A constant
/// that is itself a graph output is placed like any node.
fn is_copied(g: &Graph, id: NodeId) -> bool {
    matches!(g.node(id).op, Op::Constant { .. }) && !g.outputs.contains(&id)
}

impl Plan {
    pub fn new(g: &Graph, claims: &Claims) -> Plan {
        let mut placements = Vec::with_capacity(g.len());
        let mut stage: HashMap<NodeId, (usize, Side)> = HashMap::new();
        for n in g.nodes() {
            let dtype = g.shape(n.id).dtype();
            let kind = n.op.kind();
            if is_leaf(&n.op) || is_copied(g, n.id) {
                placements.push(Placement {
                    node: n.id,
                    kind,
                    dtype,
                    side: None,
                    why: String::new(),
                    partition: None,
                });
                continue;
            }
            let (side, why) = match claims.judge(&n.op, dtype) {
                Ok(()) => (Side::Plugin, String::new()),
                Err(why) => (Side::Cpu, why),
            };
            let s = n
                .inputs
                .iter()
                .filter_map(|i| stage.get(i))
                .map(|(s, from)| s + usize::from(*from != side))
                .max()
                .unwrap_or(0);
            stage.insert(n.id, (s, side));
            placements.push(Placement {
                node: n.id,
                kind,
                dtype,
                side: Some(side),
                why,
                partition: None,
            });
        }
        // Partitions in run order: by stage, the CPU's first within one.
        let mut keys: Vec<(usize, Side)> = stage.values().copied().collect();
        keys.sort_by_key(|(s, side)| (*s, *side == Side::Plugin));
        keys.dedup();
        let index: HashMap<(usize, Side), usize> =
            keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
        let mut partitions: Vec<Partition> = keys
            .iter()
            .map(|(_, side)| Partition {
                side: *side,
                nodes: Vec::new(),
            })
            .collect();
        for p in &mut placements {
            if let Some(k) = stage.get(&p.node) {
                let i = index[k];
                p.partition = Some(i);
                partitions[i].nodes.push(p.node);
            }
        }
        let part_of = |id: NodeId| placements[id.0 as usize].partition;
        let mut boundary = Vec::new();
        for n in g.nodes() {
            let Some(here) = part_of(n.id) else { continue };
            for &i in &n.inputs {
                if let Some(there) = part_of(i) {
                    if there != here && !boundary.contains(&i) {
                        boundary.push(i);
                    }
                }
            }
        }
        boundary.sort();
        let boundary_bytes = boundary
            .iter()
            .map(|id| {
                let s = g.shape(*id);
                (s.num_elements().unwrap_or(0) * s.dtype().size_bytes()) as u64
            })
            .sum();
        Plan {
            label: claims.label.clone(),
            placements,
            partitions,
            boundary,
            boundary_bytes,
        }
    }

    /// `{"nodes": [{"node", "op", "dtype", "on", "partition", "why"}],
    /// "partitions": [{"on", "nodes"}], "boundary_tensors", "boundary_bytes"}`;
    /// `on` is the plugin's name, `cpu`, or null for inputs, params and
    /// copied constants.
    pub fn to_json(&self) -> serde_json::Value {
        let side = |s: Side| match s {
            Side::Plugin => self.label.clone(),
            Side::Cpu => "cpu".to_string(),
        };
        serde_json::json!({
            "nodes": self.placements.iter().map(|p| serde_json::json!({
                "node": p.node.0,
                "op": format!("{:?}", p.kind),
                "dtype": dtype_name(&p.dtype),
                "on": p.side.map(side),
                "partition": p.partition,
                "why": (!p.why.is_empty()).then(|| p.why.clone()),
            })).collect::<Vec<_>>(),
            "partitions": self.partitions.iter().map(|p| serde_json::json!({
                "on": side(p.side),
                "nodes": p.nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "boundary_tensors": self.boundary.len(),
            "boundary_bytes": self.boundary_bytes,
        })
    }

    /// Does the plugin take every node?
    pub fn is_whole(&self) -> bool {
        // One side means one stage: a plugin-only plan has at most one partition.
        self.partitions.iter().all(|p| p.side == Side::Plugin)
    }
}

impl fmt::Display for Plan {
    /// One line per node (`%12 Lstm f64 -> cpu: mlx claims Lstm for f32,
    /// f16, bf16`), then the partitions and the bytes crossing per run.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.placements {
            let head = format!("%{} {:?} {}", p.node.0, p.kind, dtype_name(&p.dtype));
            match (p.side, p.partition) {
                (Some(Side::Plugin), Some(i)) => {
                    writeln!(f, "{head} -> {} [partition {i}]", self.label)?
                }
                (Some(Side::Cpu), Some(i)) => {
                    writeln!(f, "{head} -> cpu [partition {i}]: {}", p.why)?
                }
                _ if matches!(p.kind, OpKind::Constant) => {
                    writeln!(f, "{head} -> copied into each partition that reads it")?
                }
                _ => writeln!(f, "{head} -> bound where read")?,
            }
        }
        let on = |s: Side| self.partitions.iter().filter(|p| p.side == s).count();
        writeln!(
            f,
            "{} partition(s): {} on {}, {} on cpu; {} boundary tensor(s), {} bytes per run",
            self.partitions.len(),
            on(Side::Plugin),
            self.label,
            on(Side::Cpu),
            self.boundary.len(),
            self.boundary_bytes
        )
    }
}

/// The name a boundary value has as an input of the partition reading it.
pub fn boundary_name(id: NodeId) -> String {
    format!("%{}", id.0)
}

/// The subgraph of partition `i`: its nodes; the inputs, params and
/// constants they read; an input per boundary value read; and as outputs
/// what later partitions or the graph's outputs need, in node order.
pub fn subgraph(g: &Graph, plan: &Plan, i: usize) -> (Graph, Vec<NodeId>, Vec<NodeId>) {
    let part = &plan.partitions[i];
    let mut sub = Graph::new(format!("{}#part{i}", g.name));
    let mut remap: HashMap<NodeId, NodeId> = HashMap::new();
    let mut reads = Vec::new();
    for &id in &part.nodes {
        let n = g.node(id);
        let mut ins = Vec::with_capacity(n.inputs.len());
        for &x in &n.inputs {
            if let Some(&m) = remap.get(&x) {
                ins.push(m);
                continue;
            }
            let src = g.node(x);
            let m = if is_leaf(&src.op) || is_copied(g, x) {
                sub.append_node(src.op.clone(), vec![], src.shape.clone(), src.name.clone())
            } else {
                let name = boundary_name(x);
                reads.push(x);
                sub.append_node(
                    Op::Input { name: name.clone() },
                    vec![],
                    g.shape(x).clone(),
                    Some(name),
                )
            };
            remap.insert(x, m);
            ins.push(m);
        }
        let m = sub.append_node(n.op.clone(), ins, n.shape.clone(), n.name.clone());
        remap.insert(id, m);
    }
    let writes: Vec<NodeId> = part
        .nodes
        .iter()
        .copied()
        .filter(|id| plan.boundary.contains(id) || g.outputs.contains(id))
        .collect();
    sub.set_outputs(writes.iter().map(|id| remap[id]).collect());
    (sub, reads, writes)
}
