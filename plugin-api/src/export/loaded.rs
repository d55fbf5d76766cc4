//! The plugin as the handshake left it: the plugin value, its custom-op
//! registry, its tables once `init` built them, and its devices. Set once
//! per process; every exported function reads it.

use crate::custom_ops::CustomOpRegistry;
use crate::error::{PluginError, PluginResult};
use crate::plugin::{DeviceInfo, Plugin};
use crate::tables::{RlxLoweringTable, RlxOpList};
use std::sync::OnceLock;

pub(super) struct Loaded {
    pub(super) plugin: Box<dyn Plugin>,
    pub(super) registry: CustomOpRegistry,
    pub(super) tables: OnceLock<Tables>,
    /// The descriptor's devices, the default first.
    pub(super) devices: Vec<DeviceInfo>,
}

pub(super) struct Tables {
    pub(super) op_list: RlxOpList,
    pub(super) lowering: RlxLoweringTable,
}

// SAFETY: the tables hold pointers to leaked, immutable data only.
unsafe impl Send for Tables {}
// SAFETY: as for Send: nothing behind the pointers is ever written.
unsafe impl Sync for Tables {}

static LOADED: OnceLock<Loaded> = OnceLock::new();

/// Keep what the first successful handshake made (a later one, which the
/// entry never makes, would change nothing).
pub(super) fn set(loaded: Loaded) {
    let _ = LOADED.set(loaded);
}

pub(super) fn loaded() -> PluginResult<&'static Loaded> {
    LOADED.get().ok_or_else(|| {
        PluginError::internal("the plugin was not initialised by a successful handshake")
    })
}

pub(super) fn tables() -> PluginResult<&'static Tables> {
    loaded()?.tables.get().ok_or_else(|| {
        PluginError::invalid_argument("call `init` before reading the plugin's tables")
    })
}
