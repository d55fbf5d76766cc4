//! The custom-op registry a plugin keeps: ops by name, each with a kernel.
//! Ops come from the plugin itself (registered in `Plugin::init`) or from
//! the host (through `RlxCustomOpApi::register`).

use crate::error::{PluginError, PluginResult, StatusCode};
use crate::tensor::HostTensor;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// A kernel: inputs in order → outputs in order.
pub type CustomKernel = Arc<dyn Fn(&[HostTensor]) -> PluginResult<Vec<HostTensor>> + Send + Sync>;

/// Who registered an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Plugin,
    Host,
}

impl Origin {
    pub fn to_raw(self) -> u32 {
        match self {
            Origin::Plugin => crate::tables::origin::PLUGIN,
            Origin::Host => crate::tables::origin::HOST,
        }
    }
    pub fn from_raw(raw: u32) -> Origin {
        if raw == crate::tables::origin::HOST {
            Origin::Host
        } else {
            Origin::Plugin
        }
    }
}

/// What is known of a registered op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomOpInfo {
    pub name: String,
    pub description: String,
    pub n_inputs: u32,
    pub n_outputs: u32,
    pub origin: Origin,
}

struct Entry {
    info: CustomOpInfo,
    kernel: CustomKernel,
}

/// Thread-safe registry of custom ops, in name order.
#[derive(Default)]
pub struct CustomOpRegistry {
    ops: RwLock<BTreeMap<String, Entry>>,
}

impl CustomOpRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register an op. A taken name is refused (`AlreadyExists`); an empty
    /// name or one with whitespace is refused (`InvalidArgument`).
    pub fn register(&self, info: CustomOpInfo, kernel: CustomKernel) -> PluginResult<()> {
        if info.name.is_empty() || info.name.chars().any(char::is_whitespace) {
            return Err(PluginError::invalid_argument(format!(
                "custom op name {:?} must be non-empty and contain no whitespace",
                info.name
            )));
        }
        let mut ops = self.ops.write().unwrap_or_else(|e| e.into_inner());
        if ops.contains_key(&info.name) {
            return Err(PluginError::new(
                StatusCode::AlreadyExists,
                format!(
                    "custom op {:?} is already registered; unregister it first",
                    info.name
                ),
            ));
        }
        ops.insert(info.name.clone(), Entry { info, kernel });
        Ok(())
    }

    pub fn unregister(&self, name: &str) -> PluginResult<()> {
        let mut ops = self.ops.write().unwrap_or_else(|e| e.into_inner());
        ops.remove(name)
            .map(|_| ())
            .ok_or_else(|| PluginError::not_found(format!("no custom op named {name:?}")))
    }

    pub fn lookup(&self, name: &str) -> Option<CustomOpInfo> {
        let ops = self.ops.read().unwrap_or_else(|e| e.into_inner());
        ops.get(name).map(|e| e.info.clone())
    }

    pub fn list(&self) -> Vec<CustomOpInfo> {
        let ops = self.ops.read().unwrap_or_else(|e| e.into_inner());
        ops.values().map(|e| e.info.clone()).collect()
    }

    /// Run an op, checking its arity on the way in and out.
    pub fn execute(&self, name: &str, inputs: &[HostTensor]) -> PluginResult<Vec<HostTensor>> {
        let (info, kernel) = {
            let ops = self.ops.read().unwrap_or_else(|e| e.into_inner());
            let e = ops
                .get(name)
                .ok_or_else(|| PluginError::not_found(format!("no custom op named {name:?}")))?;
            (e.info.clone(), e.kernel.clone())
        };
        if inputs.len() != info.n_inputs as usize {
            return Err(PluginError::invalid_argument(format!(
                "custom op {name:?} takes {} inputs, got {}",
                info.n_inputs,
                inputs.len()
            )));
        }
        let outs = kernel(inputs).map_err(|e| e.context(format!("custom op {name:?}")))?;
        if outs.len() != info.n_outputs as usize {
            return Err(PluginError::internal(format!(
                "custom op {name:?} declares {} outputs but its kernel returned {}",
                info.n_outputs,
                outs.len()
            )));
        }
        Ok(outs)
    }
}
