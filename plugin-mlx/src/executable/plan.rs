//! Compiled mode on the CPU where `mx::compile` would fuse nothing: the
//! graph's evaluation on the calling thread recorded once (shim
//! `inline_plan`) and run on each call's arguments. A compiled call
//! otherwise rebuilds the traced graph through hash maps (MLX's
//! `compile_replace`) and the evaluation walks it again to find what to
//! run: together about a tenth of the demo transformer's 26 µs run.
//!
//! Recorded from the graph built on zeros, with the compiled function's
//! arguments (inputs, params, hoisted values) as its leaves, when every op
//! is one the shim runs itself, nothing is written back into a param, and
//! either the compiled function fuses none of them (the plan holds no op
//! MLX's compile fuses, or its trace on the same zeros holds no `Compiled`
//! kernel: a fused chain is one pass over memory where the plan would make
//! several) or its fusion leaves at least half as many ops as the plan has
//! (MLX's fuser cuts at every slice and concatenation; known without the
//! trace when at most half the plan is fusable) and every value is small
//! ([`SMALL_VALUE_BYTES`]): then passes over cache-resident values cost
//! less than MLX's evaluation of what is left, op by op, and no kernel is
//! compiled. Otherwise compiled mode calls the compiled function.

use super::evaluate::{zeros_like, Env};
use super::hoist::{self, Hoisting};
use crate::lower::custom_scope::CustomScope;
use crate::lower::param_writes::ParamWrites;
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
        let p = match plan {
            Ok(p) => p,
            Err(e) => {
                log::debug!(
                    "graph {:?}: compiled mode calls MLX's compiled function: {e}",
                    graph.name
                );
                return None;
            }
        };
        let len = array::inline_plan_len(&p);
        // Whether MLX's fusion could pay is known without tracing the
        // compiled function (the trace cost more than the rest of such a
        // compile) where the plan has nothing it could fuse, or, for small
        // values, where what it could fuse is at most half the plan: the
        // ops it leaves are then at least half (short of what its tracing
        // finds written twice, which rlx's optimiser has merged already).
        let fusable = array::inline_plan_fusable(&p);
        let small = values_small(graph);
        let why = if fusable == 0 {
            "nothing MLX could fuse"
        } else if small && 2 * fusable <= len {
            "at most half of them MLX could fuse"
        } else {
            match fused_ops(compiled, &args)? {
                Some(_) if !small => return None,
                // Fusion that removes most of the ops is worth MLX's
                // evaluation of what is left.
                Some(n) if 2 * n < len => {
                    log::debug!(
                        "graph {:?}: compiled mode calls MLX's compiled function ({n} ops where the plan has {len})",
                        graph.name
                    );
                    return None;
                }
                Some(_) => "MLX's fusion leaves at least half",
                None => "MLX fuses none of them",
            }
        };
        log::debug!(
            "graph {:?}: compiled mode runs a recorded plan of {len} ops ({why})",
            graph.name
        );
        Some(Plan(p))
    }

    /// The outputs computed from `args` on this thread (None when
    /// evaluation on the calling thread has been turned off since).
    pub(super) fn run(&self, args: &ArrayList) -> Option<PluginResult<UniquePtr<ArrayList>>> {
        array::eval_inline_enabled().then(|| {
            array::run_inline_plan(&self.0, args).map_err(|e| PluginError::internal(e.to_string()))
        })
    }
}

/// Up to how many bytes every value of a graph (its params aside) may
/// take for its plan to be preferred where MLX would fuse: values a core's
/// caches hold. Measured on rlx's decomposed FFT (pocketfft): n = 4,099
/// (1,561 MLX ops), MLX's evaluation of the compiled function took 8.0 ms
/// a run and the same ops run on the calling thread 3.5 ms, with no
/// kernel to compile first (7.5 s on a cold cache); at rows = 64, n = 1,024
/// (values of 512 KiB) the compiled function took 5.7 ms and the plan 4.7.
const SMALL_VALUE_BYTES: usize = 1 << 20;

/// Whether every value of `graph` but its params is known and at most
/// [`SMALL_VALUE_BYTES`].
fn values_small(graph: &Graph) -> bool {
    graph.nodes().iter().all(|n| {
        matches!(n.op, rlx_ir::Op::Param { .. })
            || n.shape.size_bytes().is_some_and(|b| b <= SMALL_VALUE_BYTES)
    })
}

/// How many ops the compiled function's graph, called on `args`, has
/// when it fused some into kernels of MLX's (`Some(None)`: it fused none);
/// None, no plan either, when it could not be called or read.
fn fused_ops(compiled: &Compiled, args: &ArrayList) -> Option<Option<usize>> {
    let outs = compiled.call(args).ok()?;
    let ops = array::graph_ops(&outs, args).ok()?;
    Some(
        ops.iter()
            .any(|op| op.starts_with("Compiled"))
            .then_some(ops.len()),
    )
}
