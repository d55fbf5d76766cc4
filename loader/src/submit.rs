//! (ABI 1.9, header §11) Runs submitted without waiting, and the waits
//! that take their outputs.

use super::executable::{OutputDest, PluginExecutable};
use rlx_plugin_api::error::{PluginError, PluginResult};
use rlx_plugin_api::tables::RlxSubmitApi;
use rlx_plugin_api::tensor::{HostTensorRef, TensorRef};

impl PluginExecutable {
    /// One function of the plugin's submit table, or `UNSUPPORTED`.
    fn submit_fn<F>(&self, pick: impl FnOnce(&RlxSubmitApi) -> Option<F>) -> PluginResult<F> {
        self.plugin.submits.as_ref().and_then(pick).ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {} only runs synchronously (no ABI 1.9 submit and wait)",
                self.plugin.descriptor.name
            ))
        })
    }

    /// Start a run with these inputs (read before this returns) without
    /// waiting for it.
    pub fn submit(&mut self, inputs: &[(&str, HostTensorRef<'_>)]) -> PluginResult<()> {
        let f = self.submit_fn(|t| t.submit)?;
        let borrowed = rlx_plugin_api::tensor::borrow_named_refs(inputs);
        let named = &borrowed.named;
        // SAFETY: `exe` is live; the inputs point into `borrowed`, alive for the call.
        self.plugin
            .check(unsafe { f(self.exe, named.as_ptr(), named.len()) })
    }

    /// Wait for the oldest submitted run and drop its outputs.
    pub fn wait_discard(&mut self) -> PluginResult<()> {
        let f = self.submit_fn(|t| t.wait)?;
        // SAFETY: `exe` is live; no slots.
        self.plugin
            .check(unsafe { f(self.exe, std::ptr::null_mut(), 0) })
    }

    /// Wait for the oldest submitted run; its outputs go where `dests`
    /// say, read ones through `read`.
    ///
    /// # Safety
    /// As for [`PluginExecutable::run_refs_dest_raw`], for each lent buffer.
    pub unsafe fn wait_dest_raw<T>(
        &mut self,
        dests: &[OutputDest],
        mut read: impl FnMut(&TensorRef<'_>) -> PluginResult<T>,
    ) -> PluginResult<Vec<Option<T>>> {
        let f = self.submit_fn(|t| t.wait)?;
        let mut shapes = self.check_dests(dests)?;
        let mut slots = self.dest_slots(dests, &mut shapes);
        let status =
            // SAFETY: `exe` is live; the lent slots point into the caller's
            // buffers and `shapes`, alive for the call.
            unsafe { f(self.exe, slots.as_mut_ptr(), slots.len()) };
        self.plugin.check(status)?;
        self.read_dest_slots(slots, dests, &mut read)
    }
}
