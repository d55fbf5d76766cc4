//! (ABI 1.11, header §12) Host memory mapped for a plugin's transfers:
//! memory a program fills or reads every run, mapped once so that the
//! plugin copies it to and from its device at the bus's speed (on a GPU:
//! page-locked, copied by the DMA engine).

use super::plugin::LoadedPlugin;
use rlx_plugin_api::error::{PluginError, PluginResult};
use rlx_plugin_api::tables::RlxHostMemoryApi;
use std::sync::Arc;

impl LoadedPlugin {
    /// One function of the plugin's host-memory table, or `UNSUPPORTED`.
    fn host_memory_fn<F>(
        &self,
        pick: impl FnOnce(&RlxHostMemoryApi) -> Option<F>,
    ) -> PluginResult<F> {
        self.host_memory.as_ref().and_then(pick).ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {} maps no host memory (no ABI 1.11 dma_map)",
                self.descriptor.name
            ))
        })
    }

    /// Map `bytes` for this plugin's transfers until the mapping is
    /// dropped. A plugin without the table is `UNSUPPORTED`: the memory
    /// then works as any other, at the speed of pageable memory.
    pub fn dma_map<'a>(self: &Arc<Self>, bytes: &'a mut [u8]) -> PluginResult<DmaMapping<'a>> {
        // SAFETY: the range is a live, exclusively borrowed slice, and the
        // mapping this returns holds the borrow until it unmaps the range.
        unsafe { self.dma_map_raw(bytes.as_mut_ptr(), bytes.len()) }?;
        Ok(DmaMapping {
            plugin: Arc::clone(self),
            bytes,
        })
    }

    /// `dma_map` of a raw range, for callers that manage the memory
    /// themselves (and for tests of the contract).
    ///
    /// # Safety
    /// The `len` bytes at `data` must stay allocated until
    /// [`LoadedPlugin::dma_unmap_raw`] of `data`.
    pub unsafe fn dma_map_raw(&self, data: *mut u8, len: usize) -> PluginResult<()> {
        let f = self.host_memory_fn(|t| t.dma_map)?;
        self.check(f(data.cast(), len))
    }

    /// Undo `dma_map_raw` of the range starting at `data`.
    ///
    /// # Safety
    /// No call that reads or writes the range may be running.
    pub unsafe fn dma_unmap_raw(&self, data: *mut u8) -> PluginResult<()> {
        let f = self.host_memory_fn(|t| t.dma_unmap)?;
        self.check(f(data.cast()))
    }
}

/// Host memory mapped for a plugin's transfers; unmapped on drop. It
/// dereferences to the bytes, which a program fills (an input) or lends
/// as an output buffer as it would any slice.
pub struct DmaMapping<'a> {
    plugin: Arc<LoadedPlugin>,
    bytes: &'a mut [u8],
}

impl std::ops::Deref for DmaMapping<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

impl std::ops::DerefMut for DmaMapping<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
}

impl Drop for DmaMapping<'_> {
    fn drop(&mut self) {
        // SAFETY: the mapping holds the only borrow of the range, so no
        // call of this program reads or writes it now.
        if let Err(e) = unsafe { self.plugin.dma_unmap_raw(self.bytes.as_mut_ptr()) } {
            log::warn!("dma_unmap of {} bytes: {e}", self.bytes.len());
        }
    }
}
