//! The custom ops one executable uses, as its lowerings see them: resolved
//! once, at compile (`custom::resolve`), and kept, so that unregistering an
//! op does not take it from an executable that uses it; and the slot where
//! a kernel reports its failure, since kernels run where nothing can be
//! returned.

use rlx_ir::Graph;
use rlx_plugin_api::{CustomImpl, CustomOp, PluginError, PluginResult};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An op as an executable holds it: the registry's entry and, for a
/// composite, its parsed body.
pub struct Resolved {
    pub op: Arc<CustomOp>,
    pub body: Option<Arc<Graph>>,
}

/// The first failure a kernel reported during an evaluation. Kernels run
/// inside MLX's evaluation (on the calling thread or MLX's CPU stream
/// thread), where nothing can be returned; the executable reads this after
/// each evaluation.
#[derive(Default)]
pub struct Failures(Mutex<Option<PluginError>>);

impl Failures {
    pub fn record(&self, e: PluginError) {
        let mut f = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
    }
    pub fn take(&self) -> Option<PluginError> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The custom ops one executable uses, by name.
#[derive(Default)]
pub struct CustomScope {
    ops: HashMap<String, Resolved>,
    failures: Arc<Failures>,
}

impl CustomScope {
    pub fn contains(&self, name: &str) -> bool {
        self.ops.contains_key(name)
    }

    pub fn insert(&mut self, name: String, op: Resolved) {
        self.ops.insert(name, op);
    }

    /// Whether an op of the scope runs a kernel of the host's or of
    /// another library: code whose effects (and cost) the plugin cannot
    /// see, so it runs only when a run asks for it.
    pub fn calls_kernels(&self) -> bool {
        self.ops
            .values()
            .any(|r| matches!(r.op.imp, CustomImpl::Kernel(_) | CustomImpl::Owned(_)))
    }

    pub fn get(&self, name: &str) -> Result<&Resolved, String> {
        self.ops
            .get(name)
            .ok_or_else(|| format!("custom op {name:?} was not resolved at compile"))
    }

    pub fn failures(&self) -> &Arc<Failures> {
        &self.failures
    }

    /// A kernel's failure in the last evaluation, as the run's error.
    pub fn check(&self) -> PluginResult<()> {
        match self.failures.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
