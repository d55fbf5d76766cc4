//! Submitted runs: a run's graph built and handed to MLX's
//! stream (`mx::async_eval`), its outputs taken by a later wait, so that
//! the host prepares the next run while this one computes.
//!
//! A submitted run's effects (state feeds, param writes) take effect at
//! submission, as unevaluated arrays: the next run, submitted or not,
//! builds on them and MLX orders the work. If the run then fails, the
//! wait that finds out puts back what the state and params were before
//! it, and drops every run submitted after it (they read its results).

use super::device::spin_us;
use super::state::Snapshot;
use super::{explain, on_device, Built, MlxExecutable};
use crate::lower::A;
use crate::trace::RunTrace;
use rlx_ir::NodeId;
use rlx_mlx_shim::{array, ArrayList, UniquePtr};
use rlx_plugin_api::tables::MAX_SUBMITTED;
use rlx_plugin_api::{OutputSlot, PluginError, PluginResult, StatusCode, TensorRef};

/// A run handed to MLX and not yet waited for.
pub(super) struct Pending {
    outs: Vec<A>,
    list: UniquePtr<ArrayList>,
    /// The state and params before its effects.
    states_before: Snapshot,
    params_before: Vec<(NodeId, A)>,
}

impl MlxExecutable {
    pub(super) fn submit_run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<()> {
        if self.pending.len() >= MAX_SUBMITTED {
            return Err(PluginError::new(
                StatusCode::ResourceExhausted,
                format!(
                    "{MAX_SUBMITTED} runs are submitted and not waited for: wait for one before \
                     submitting another"
                ),
            ));
        }
        let mut trace = RunTrace::start();
        let _on = on_device(&self.device)?;
        trace.mark("device");
        let (built, given) = self.build(inputs, &mut trace)?;
        let Built { outs, writes, list } = built;
        let states_before = self.states.snapshot();
        let params_before = writes
            .iter()
            .filter_map(|(id, _)| self.bound.get(id).map(|a| (*id, a.clone_handle())))
            .collect();
        array::async_eval_list(&list).map_err(|e| {
            PluginError::internal(format!(
                "MLX could not start the run: {}",
                explain(&self.graph, e)
            ))
        })?;
        trace.mark("submit");
        let built = Built { outs, writes, list };
        self.keep(&built, given);
        self.pending.push_back(Pending {
            outs: built.outs,
            list: built.list,
            states_before,
            params_before,
        });
        trace.mark("finish");
        trace.finish(|| format!("{} submit", self.trace_label()));
        Ok(())
    }

    /// Wait for the oldest submitted run; its outputs go into `slots` (one
    /// per output, or none to drop them all).
    pub(super) fn wait_run(&mut self, slots: &mut [OutputSlot<'_>]) -> PluginResult<()> {
        if !slots.is_empty() && slots.len() != self.graph.outputs.len() {
            return Err(PluginError::invalid_argument(format!(
                "the executable has {} outputs but the caller passed {} slots (or pass none to \
                 drop them)",
                self.graph.outputs.len(),
                slots.len()
            )));
        }
        let run = self.pending.pop_front().ok_or_else(|| {
            PluginError::invalid_argument("wait: no run is submitted (submit one first)")
        })?;
        let mut trace = RunTrace::start();
        let _on = on_device(&self.device)?;
        trace.mark("device");
        let done = array::eval_list_spinning(&run.list, spin_us(array::thread_device_is_gpu()))
            .map_err(|e| {
                PluginError::internal(format!(
                    "MLX evaluation of a submitted run failed: {} (run it in eager mode to find \
                     the node)",
                    explain(&self.graph, e)
                ))
            })
            .and_then(|()| self.custom.check());
        if let Err(e) = done {
            // Every later run read this one's results: drop them, and put
            // the state and params back as they were before it.
            let dropped = self.pending.len();
            self.pending.clear();
            self.states.restore(run.states_before);
            for (id, a) in run.params_before {
                self.bound.insert(id, a);
            }
            return Err(if dropped == 0 {
                e
            } else {
                PluginError::new(
                    e.code,
                    format!(
                        "{}; the {dropped} run(s) submitted after it were dropped, and the \
                         state is as it was before it",
                        e.message
                    ),
                )
            });
        }
        trace.mark("eval");
        if !slots.is_empty() {
            for (i, (a, id)) in run.outs.into_iter().zip(&self.graph.outputs).enumerate() {
                self.put_output(i, a, *id, &mut slots[i])?;
            }
        }
        trace.mark("outputs");
        trace.finish(|| format!("{} wait", self.trace_label()));
        Ok(())
    }
}
