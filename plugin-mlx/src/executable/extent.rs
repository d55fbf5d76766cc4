//! Active extents (ABI 1.9): a bucketed graph run on its live rows only.

use super::MlxExecutable;
use rlx_plugin_api::PluginResult;

impl MlxExecutable {
    pub(super) fn set_extent(&mut self, extent: Option<(usize, usize)>) -> PluginResult<()> {
        self.extent = extent;
        Ok(())
    }
}
