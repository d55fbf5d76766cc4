//! rlx-runtime's pipelined runs on a plugin executable: `commit_no_wait`,
//! `sync_pending` and `run_pipelined` as runs submitted to the plugin and
//! waited for later (ABI 1.9), so that the host prepares the next run's
//! inputs while the device computes the last one.

use super::graph::PluginGraph;
use super::outputs::{fixed_numel, Plan};
use rlx_plugin_api::{convert, DType, TensorRef};

impl PluginGraph {
    /// Submit a run of f32 inputs.
    pub(super) fn submit_f32(&mut self, inputs: &[(&str, &[f32])]) {
        let owned = inputs
            .iter()
            .map(|(n, v)| (*n, convert::f32_le_bytes(v), rlx_ir::DType::F32))
            .collect();
        self.with_inputs(owned, |exe, named| exe.submit(named));
        self.pending += 1;
    }

    /// Wait for the oldest submitted run: its outputs as f32.
    pub(super) fn wait_f32(&mut self) -> Vec<Vec<f32>> {
        self.pending -= 1;
        let f32_le = cfg!(target_endian = "little");
        let plan = Plan::<f32>::new(
            &self.outputs,
            |_| true,
            self.lend_outputs,
            |v| {
                (v.dtype == DType::F32 && f32_le)
                    .then(|| fixed_numel(v))
                    .flatten()
            },
        );
        let read = |t: &TensorRef<'_>| convert::bytes_to_f32(t.dtype, &t.compact_cow()?);
        // SAFETY: each lent buffer is the spare capacity of a `Vec` the
        // plan made for this wait, of its length, aliased by nothing.
        let outs = match unsafe { self.exe.wait_dest_raw(plan.dests(), read) } {
            Ok(o) => o,
            Err(e) => {
                // A failed run drops every run submitted after it.
                self.pending = 0;
                self.fail(e)
            }
        };
        // SAFETY: the plan's rooms were lent to this wait, which succeeded.
        unsafe { plan.finish(outs, |_, v| v) }
            .into_iter()
            .map(|o| o.expect("every output wanted"))
            .collect()
    }

    /// Wait for every submitted run, dropping the outputs.
    pub(super) fn drain(&mut self) {
        while self.pending > 0 {
            self.pending -= 1;
            if let Err(e) = self.exe.wait_discard() {
                self.pending = 0;
                self.fail(e);
            }
        }
    }
}
