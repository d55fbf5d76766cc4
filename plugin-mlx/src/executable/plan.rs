//! Compiled mode on the CPU where `mx::compile` would fuse nothing: the
//! graph's evaluation on the calling thread recorded once (shim
//! `inline_plan`) and run on each call's arguments. A compiled call
//! otherwise rebuilds the traced graph through hash maps (MLX's
//! `compile_replace`) and the evaluation walks it again to find what to
//! run: together about a tenth of the demo transformer's 26 µs run.
//!
//! Recorded from the graph built on zeros, with the compiled function's
//! arguments (inputs, params, hoisted values) as its leaves, when every op
//! is one the shim runs itself, the compiled function fused none of them
//! (its trace on the same zeros holds no `Compiled` kernel: a fused chain
//! is one pass over memory where the plan would make several) and nothing
//! is written back into a param; otherwise compiled mode calls the
//! compiled function.

use super::evaluate::{zeros_like, Env, ParamWrites};
use super::hoist::{self, Hoisting};
use crate::custom::CustomScope;
use rlx_ir::{Graph, NodeId};
use rlx_mlx_shim::array::{self, InlinePlan};
use rlx_mlx_shim::{ArrayList, Compiled, UniquePtr};
use rlx_plugin_api::{PluginError, PluginResult};
use std::collections::HashMap;

pub(super) struct Plan(UniquePtr<InlinePlan>);

impl Plan {
    /// The plan of `graph` with leaves `leaves` (the compiled function's
    /// arguments, in order), or None where there is none (see above).
    pub(super) fn record(
        graph: &Graph,
        rng: rlx_ir::RngOptions,
        custom: &CustomScope,
        leaves: &[NodeId],
        hoisting: Option<&Hoisting>,
        compiled: &Compiled,
    ) -> Option<Plan> {
        if array::thread_device_is_gpu() || !array::eval_inline_enabled() {
            return None;
        }
        let zeros = leaves
            .iter()
            .map(|id| zeros_like(graph, *id))
            .collect::<PluginResult<Vec<_>>>()
            .ok()?;
        let args = ArrayList::from_arrays(zeros.iter().map(|z| &**z));
        if fuses(compiled, &args) {
            return None;
        }
        let slot: HashMap<NodeId, usize> =
            leaves.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let writes = ParamWrites::default();
        let env = Env::lazy(rng, custom, &writes);
        let outs = hoist::evaluate_run(hoisting, graph, &env, &|id| {
            Ok(zeros[slot[&id]].clone_handle())
        })
        .ok()?;
        if !writes.take_for(graph).is_empty() {
            return None;
        }
        let plan = array::inline_plan(&args, &ArrayList::from_arrays(outs.iter().map(|o| &**o)));
        match plan {
            Ok(p) => {
                log::debug!(
                    "graph {:?}: compiled mode runs a recorded plan of {} ops",
                    graph.name,
                    array::inline_plan_len(&p)
                );
                Some(Plan(p))
            }
            Err(e) => {
                log::debug!(
                    "graph {:?}: compiled mode calls MLX's compiled function: {e}",
                    graph.name
                );
                None
            }
        }
    }

    /// The outputs computed from `args` on this thread (None when
    /// evaluation on the calling thread has been turned off since).
    pub(super) fn run(&self, args: &ArrayList) -> Option<PluginResult<UniquePtr<ArrayList>>> {
        array::eval_inline_enabled().then(|| {
            array::run_inline_plan(&self.0, args).map_err(|e| PluginError::internal(e.to_string()))
        })
    }
}

/// Whether the compiled function, called on `args`, fused ops into a kernel
/// of MLX's (or could not be called: no plan then either).
fn fuses(compiled: &Compiled, args: &ArrayList) -> bool {
    let Ok(outs) = compiled.call(args) else {
        return true;
    };
    array::graph_ops(&outs, args)
        .map_or(true, |ops| ops.iter().any(|op| op.starts_with("Compiled")))
}
