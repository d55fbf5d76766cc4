//! The plugin's side of the custom-op registry, set up at `init`.

use super::{keep_registry, native, services};
use rlx_plugin_api::{CustomOpRegistry, PluginResult};
use std::sync::Arc;

/// Keep the registry, register the native ops and give the registry the
/// services only this plugin can offer (called from `init`).
pub fn install(registry: &'static CustomOpRegistry) -> PluginResult<()> {
    keep_registry(registry);
    // A second init (never done by a host) finds the services set.
    if registry.services().is_none() {
        registry.set_services(Arc::new(services::MlxServices))?;
    }
    native::register_all(registry)
}
