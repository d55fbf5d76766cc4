//! (ABI 1.9, header §10) Clones and shared params of a loaded plugin's
//! executables.

use super::executable::PluginExecutable;
use rlx_plugin_api::error::{PluginError, PluginResult};
use rlx_plugin_api::tables::{RlxExecutable, RlxSharingApi};
use std::sync::Arc;

impl PluginExecutable {
    fn sharing_api(&self, what: &str) -> PluginResult<&RlxSharingApi> {
        self.plugin.sharing.as_ref().ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {} shares nothing between executables (ABI 1.9): cannot {what}",
                self.plugin.descriptor.name
            ))
        })
    }

    /// A second executable sharing this one's program and params, with a
    /// copy of its state.
    pub fn clone_executable(&self) -> PluginResult<PluginExecutable> {
        let f = self
            .sharing_api("clone an executable")?
            .clone
            .ok_or_else(|| {
                PluginError::unsupported(format!(
                    "plugin {} cannot clone executables",
                    self.plugin.descriptor.name
                ))
            })?;
        let mut out: *mut RlxExecutable = std::ptr::null_mut();
        // SAFETY: `exe` is live; `out` is a writable out-pointer.
        self.plugin.check(unsafe { f(self.exe, &mut out) })?;
        if out.is_null() {
            return Err(PluginError::internal(
                "clone succeeded but returned no executable",
            ));
        }
        // The same compiled program: its signature is the source's, not
        // read through the plugin again (a clone per decode step is a
        // client's way to rebuild its graph). Params bound without a copy
        // are the clone's too.
        Ok(PluginExecutable {
            plugin: self.plugin.clone(),
            exe: out,
            signature: self.signature.clone(),
            keep_alive: self.keep_alive.clone(),
        })
    }

    /// Take `src`'s params (one copy on the device for both): how many.
    /// `src` must be an executable of the same loaded plugin.
    pub fn share_params_from(&mut self, src: &PluginExecutable) -> PluginResult<usize> {
        if !Arc::ptr_eq(&self.plugin, &src.plugin) {
            return Err(PluginError::invalid_argument(format!(
                "cannot share params between executables of two plugins ({} at {} and {} at {})",
                self.plugin.descriptor.name,
                self.plugin.path().display(),
                src.plugin.descriptor.name,
                src.plugin.path().display()
            )));
        }
        let f = self
            .sharing_api("share params")?
            .share_params
            .ok_or_else(|| {
                PluginError::unsupported(format!(
                    "plugin {} cannot share params",
                    self.plugin.descriptor.name
                ))
            })?;
        let mut n = 0usize;
        // SAFETY: both handles are live executables of this plugin; `n` is writable.
        self.plugin.check(unsafe { f(self.exe, src.exe, &mut n) })?;
        // Whatever `src` aliases without a copy, this one now reads too.
        self.keep_alive.extend(src.keep_alive.iter().cloned());
        Ok(n)
    }
}
