//! Work that depends on params only, done once per param value instead of
//! once per run.
//!
//! rlx's optimiser rewrites graphs in ways that leave work on the weights
//! inside every run: a transformer's Q, K and V projections become one
//! matmul against `Concat(wq, wk, wv)`, which rebuilds a copy of the three
//! weights each run (24 MiB a decode step in an 8-layer d_model 512
//! decoder, a tenth of the step on the CPU). rlx-runtime's CPU backend
//! keeps such values in its arena; here they are *hoisted*: the nodes that
//! read only params (and constants), through pure ops, are evaluated once,
//! kept, and read by each run as if they were params. They are made again
//! when any param they read has a new value (a bind, a shared or
//! overwritten range, a run's param write: each gives the param a new
//! array, which is what is compared).
//!
//! Views of the weights are hoisted too (a linear layer's transposed
//! weight): a view costs no memory, but each is a node every run builds and
//! MLX evaluates, and a small model's decode step is mostly such overhead
//! (49 of a 6-layer Llama step's 381 nodes were weight transposes). What
//! a cone materialises counts against a memory budget: a hoisted value is a
//! second copy beside the params it came from (a bf16 model whose every
//! weight is cast to f32 would double or triple its memory).
//! `RLX_MLX_HOIST=0`, read once, turns it off.

use super::evaluate::{evaluate, evaluate_select, Env, Select};
use crate::lower::custom_scope::CustomScope;
use crate::lower::param_writes::ParamWrites;
use crate::lower::A;
use rlx_ir::{Graph, NodeId, OpKind};
use rlx_mlx_shim::{array, ArrayList};
use rlx_plugin_api::{PluginError, PluginResult};
use std::collections::HashMap;

/// Hoisted values may take this much memory beside the params, or a
/// quarter of the params' own bytes where that is more.
const BUDGET_BYTES: u64 = 64 << 20;

fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RLX_MLX_HOIST").map_or(true, |v| v != "0"))
}

/// Ops that are pure functions of their operands (no randomness, no state,
/// no writes), and so may be computed once for given params.
fn pure(kind: OpKind) -> bool {
    use OpKind::*;
    matches!(
        kind,
        Activation
            | Cast
            | Binary
            | Compare
            | Where
            | Fma
            | MatMul
            | Dequantize
            | Reshape
            | Transpose
            | Narrow
            | Concat
            | Expand
            | Reverse
            | Pad
            | Slice
            | Tile
            | Clamp
    )
}

/// Ops whose result MLX makes as a view of its operand: no memory to pay.
fn view(kind: OpKind) -> bool {
    use OpKind::*;
    matches!(kind, Reshape | Transpose | Narrow | Expand | Slice)
}

/// Which nodes of a graph are hoisted, and how each evaluation treats them.
pub(super) struct Hoisting {
    /// The hoisted nodes, in graph order (their values' order).
    pub(super) nodes: Vec<NodeId>,
    /// The params their values read.
    reads: Vec<NodeId>,
    /// Per node, for a run: read from the hoisted values.
    given: Vec<bool>,
    /// Per node, for a run: not built (only hoisted nodes need it).
    skip: Vec<bool>,
    /// Per node, for making the values: not built (not in their cone).
    prep_skip: Vec<bool>,
}

impl Hoisting {
    /// Whether a run builds node `id` (neither read from the hoisted values
    /// nor skipped).
    pub(super) fn built_in_run(&self, id: NodeId) -> bool {
        let i = id.0 as usize;
        !self.given.get(i).copied().unwrap_or(false) && !self.skip.get(i).copied().unwrap_or(false)
    }

    /// The hoisting of `graph`, or None where nothing is worth it.
    pub(super) fn plan(graph: &Graph) -> Option<Hoisting> {
        if !enabled() {
            return None;
        }
        let n = graph.len();
        // Per node: reads only params and constants through pure ops; and
        // whether that cone materialises anything.
        let mut fixed = vec![false; n];
        let mut costly = vec![false; n];
        let mut param_bytes = 0u64;
        for node in graph.nodes() {
            let i = node.id.0 as usize;
            match node.op.kind() {
                OpKind::Param => {
                    fixed[i] = true;
                    param_bytes += graph.shape(node.id).size_bytes().unwrap_or(0) as u64;
                }
                OpKind::Constant => fixed[i] = true,
                k if pure(k) && !node.inputs.is_empty() => {
                    fixed[i] = node.inputs.iter().all(|x| fixed[x.0 as usize]);
                    costly[i] =
                        fixed[i] && (!view(k) || node.inputs.iter().any(|x| costly[x.0 as usize]));
                }
                _ => {}
            }
        }
        // A fixed node read by one that is not (or an output) is where a
        // run would start: hoisted unless it is a leaf itself; what its
        // cone materialises is paid from the budget.
        let mut frontier = vec![false; n];
        for node in graph.nodes() {
            if fixed[node.id.0 as usize] {
                continue;
            }
            for x in &node.inputs {
                frontier[x.0 as usize] = true;
            }
        }
        for o in &graph.outputs {
            frontier[o.0 as usize] = true;
        }
        let budget = BUDGET_BYTES.max(param_bytes / 4);
        let mut spent = 0u64;
        let mut nodes = Vec::new();
        for node in graph.nodes() {
            let i = node.id.0 as usize;
            let leaf = matches!(node.op.kind(), OpKind::Param | OpKind::Constant);
            if !(frontier[i] && fixed[i]) || leaf {
                continue;
            }
            let bytes = if costly[i] {
                graph
                    .shape(node.id)
                    .size_bytes()
                    .unwrap_or(u64::MAX as usize) as u64
            } else {
                0
            };
            if spent.saturating_add(bytes) > budget {
                continue;
            }
            spent += bytes;
            nodes.push(node.id);
        }
        if nodes.is_empty() {
            return None;
        }
        let mut given = vec![false; n];
        for id in &nodes {
            given[id.0 as usize] = true;
        }
        // What the hoisted values need (their cone), and what a run needs
        // (everything reachable from the outputs without passing through a
        // hoisted node).
        let cone = reach(graph, &nodes, &vec![false; n]);
        let needed = reach(graph, &graph.outputs, &given);
        let reads = graph
            .nodes()
            .iter()
            .filter(|x| x.op.kind() == OpKind::Param && cone[x.id.0 as usize])
            .map(|x| x.id)
            .collect();
        Some(Hoisting {
            nodes,
            reads,
            skip: (0..n).map(|i| !needed[i]).collect(),
            prep_skip: (0..n).map(|i| !cone[i]).collect(),
            given,
        })
    }

    /// How a run's evaluation treats the graph: the hoisted nodes read as
    /// leaves, their cones not built.
    pub(super) fn select<'a>(&'a self, targets: &'a [NodeId]) -> Select<'a> {
        Select {
            given: &self.given,
            skip: &self.skip,
            targets,
        }
    }
}

/// A run's evaluation of `graph`: around the hoisted nodes where there
/// are some (they are read through `leaf`), else the whole graph.
pub(super) fn evaluate_run(
    hoisting: Option<&Hoisting>,
    graph: &Graph,
    env: &Env,
    leaf: &dyn Fn(NodeId) -> PluginResult<A>,
) -> PluginResult<Vec<A>> {
    match hoisting {
        Some(h) => evaluate_select(graph, env, leaf, &h.select(&graph.outputs)),
        None => evaluate(graph, env, leaf),
    }
}

/// Per node: reachable backwards from `from`, not passing through `stop`.
fn reach(graph: &Graph, from: &[NodeId], stop: &[bool]) -> Vec<bool> {
    let mut seen = vec![false; graph.len()];
    let mut todo: Vec<NodeId> = from.to_vec();
    while let Some(id) = todo.pop() {
        let i = id.0 as usize;
        if seen[i] {
            continue;
        }
        seen[i] = true;
        if stop[i] {
            continue;
        }
        todo.extend(graph.node(id).inputs.iter().copied());
    }
    seen
}

/// The hoisted values, and the param arrays they were made from.
#[derive(Default)]
pub(super) struct Hoisted {
    from: Vec<A>,
    values: Vec<A>,
}

impl Hoisted {
    /// A copy for a clone (arrays are immutable).
    pub(super) fn cloned(&self) -> Hoisted {
        Hoisted {
            from: self.from.iter().map(|a| a.clone_handle()).collect(),
            values: self.values.iter().map(|a| a.clone_handle()).collect(),
        }
    }

    /// The values for the params bound now: the kept ones while every param
    /// they read is the same array, else made again (and evaluated).
    pub(super) fn current(
        &mut self,
        plan: &Hoisting,
        graph: &Graph,
        bound: &HashMap<NodeId, A>,
        rng: rlx_ir::RngOptions,
        custom: &CustomScope,
    ) -> PluginResult<&[A]> {
        // Made once (a value per hoisted node) from the same param arrays.
        // Values that read no param are made on the first call and kept.
        let same = self.values.len() == plan.nodes.len()
            && self.from.len() == plan.reads.len()
            && plan
                .reads
                .iter()
                .zip(&self.from)
                .all(|(id, a)| array::array_id(&bound[id]) == array::array_id(a));
        if same {
            return Ok(&self.values);
        }
        // Dropped first: the old values' memory is free for the new.
        self.values.clear();
        self.from.clear();
        let writes = ParamWrites::default();
        let env = Env::lazy(rng, custom, &writes);
        let select = Select {
            given: &[],
            skip: &plan.prep_skip,
            targets: &plan.nodes,
        };
        let values = evaluate_select(graph, &env, &|id| Ok(bound[&id].clone_handle()), &select)?;
        array::eval_list(&ArrayList::from_arrays(values.iter().map(|a| &**a)))
            .map_err(|e| PluginError::internal(format!("weights prepared once: {e}")))?;
        self.from = plan
            .reads
            .iter()
            .map(|id| bound[id].clone_handle())
            .collect();
        self.values = values;
        Ok(&self.values)
    }
}
