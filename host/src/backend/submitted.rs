//! rlx-runtime's pipelined runs on a plugin executable: `commit_no_wait`,
//! `sync_pending` and `run_pipelined` as runs submitted to the plugin and
//! waited for later, so that the host prepares the next run's inputs while the
//! device computes the last one.

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
        self.wait_wanted(|_| true)
            .unwrap_or_else(|e| self.fail(e))
            .into_iter()
            .map(|o| o.expect("every output wanted"))
            .collect()
    }

    /// Start a run of these f32 inputs and return without waiting for it (the
    /// plugin's `submit`): its state feeds take effect at once, so the next run
    /// submitted reads the states this one makes, on the device.
    pub fn submit_run(&mut self, inputs: &[(&str, &[f32])]) -> Result<(), String> {
        if !self.offers.submit {
            return Err(format!(
                "{} plugin runs synchronously only (no ABI 1.9 submit)",
                self.plugin
            ));
        }
        crate::guard::catch_quiet(|| self.submit_f32(inputs))
    }

    /// Whether the plugin takes submitted runs.
    pub fn submits(&self) -> bool {
        self.offers.submit
    }

    /// Runs submitted and not waited for.
    pub fn pending_runs(&self) -> usize {
        self.pending
    }

    /// Wait for the oldest submitted run and read back the outputs at the
    /// positions `want` names, as f32 (`None` for the others, left on the
    /// device). A run that failed is the error, and every run submitted
    /// after it is dropped.
    pub fn wait_outputs(&mut self, want: &[usize]) -> Result<Vec<Option<Vec<f32>>>, String> {
        if self.pending == 0 {
            return Err(format!(
                "{} plugin: no run is submitted to wait for",
                self.plugin
            ));
        }
        self.wait_wanted(|i| want.contains(&i))
    }

    fn wait_wanted(
        &mut self,
        want: impl Fn(usize) -> bool,
    ) -> Result<Vec<Option<Vec<f32>>>, String> {
        self.pending -= 1;
        let f32_le = cfg!(target_endian = "little");
        let plan = Plan::<f32>::new(&self.outputs, &want, self.lend_outputs, |v| {
            (v.dtype == DType::F32 && f32_le)
                .then(|| fixed_numel(v))
                .flatten()
        });
        let read = |t: &TensorRef<'_>| convert::bytes_to_f32(t.dtype, &t.compact_cow()?);
        // SAFETY: each lent buffer is the spare capacity of a `Vec` the
        // plan made for this wait, of its length, aliased by nothing.
        let outs = match unsafe { self.exe.wait_dest_raw(plan.dests(), read) } {
            Ok(o) => o,
            Err(e) => {
                // A failed run drops every run submitted after it.
                self.pending = 0;
                return Err(format!("{} plugin: {e}", self.plugin));
            }
        };
        // SAFETY: the plan's rooms were lent to this wait, which succeeded.
        Ok(unsafe { plan.finish(outs, |_, v| v) })
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
