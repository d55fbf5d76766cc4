//! `Custom` nodes: resolved by name in the plugin's custom-op registry
//! when a graph is compiled, then lowered by what the op is:
//!
//! - a *native* op ([`native`]) is built from MLX ops, so it stays inside
//!   the lazy graph and `mx::compile`'s fusion;
//! - a *kernel* ([`host_kernel`]) becomes an MLX primitive whose CPU
//!   evaluation calls it, reading the inputs in place and writing into the
//!   output MLX allocated;
//! - a *composite* ([`composite`]) has its body inlined.
//!
//! An executable resolves its ops once, at compile ([`CustomScope`]), and
//! keeps them: unregistering an op does not take it from an executable
//! that uses it.

pub mod collectives;
pub mod composite;
pub mod host_kernel;
pub mod native;
mod services;

use crate::graph_check::describe;
use crate::lower::{Ctx, LResult};
use rlx_ir::{Graph, Op};
use rlx_mlx_shim::Array;
use rlx_plugin_api::{CustomImpl, CustomOp, CustomOpRegistry, PluginError, PluginResult};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

static REGISTRY: OnceLock<&'static CustomOpRegistry> = OnceLock::new();

/// Keep the registry, register the native ops and give the registry the
/// services only this plugin can offer (called from `init`).
pub fn install(registry: &'static CustomOpRegistry) -> PluginResult<()> {
    let _ = REGISTRY.set(registry);
    // A second init (never done by a host) finds the services set.
    if registry.services().is_none() {
        registry.set_services(Arc::new(services::MlxServices))?;
    }
    native::register_all(registry)
}

/// The registry, once `init` ran.
pub fn registry() -> Option<&'static CustomOpRegistry> {
    REGISTRY.get().copied()
}

/// An op as an executable holds it: the registry's entry and, for a
/// composite, its parsed body.
pub struct Resolved {
    pub op: Arc<CustomOp>,
    pub body: Option<Arc<Graph>>,
}

/// The first failure a kernel reported during an evaluation. Kernels run
/// on MLX's CPU stream, where nothing can be returned; the executable reads
/// this after each evaluation.
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

/// The custom ops one executable uses, resolved at compile.
#[derive(Default)]
pub struct CustomScope {
    ops: HashMap<String, Resolved>,
    failures: Arc<Failures>,
}

/// How deep composites may nest (a body using itself is refused here).
const MAX_NESTING: usize = 16;

impl CustomScope {
    /// Resolve every `Custom` node of `graph` (and of the composites it
    /// uses). An unknown name is `NOT_FOUND` naming the node and listing
    /// what is registered.
    pub fn resolve(graph: &Graph) -> PluginResult<CustomScope> {
        let mut scope = CustomScope::default();
        scope.resolve_in(graph, 0)?;
        Ok(scope)
    }

    fn resolve_in(&mut self, graph: &Graph, depth: usize) -> PluginResult<()> {
        for n in graph.nodes() {
            let Op::Custom {
                name, num_inputs, ..
            } = &n.op
            else {
                continue;
            };
            if self.ops.contains_key(name) {
                continue;
            }
            if depth >= MAX_NESTING {
                return Err(PluginError::invalid_argument(format!(
                    "{}: composite custom ops nest deeper than {MAX_NESTING} (a body that uses itself?)",
                    describe(graph, n)
                )));
            }
            let registry = registry()
                .ok_or_else(|| PluginError::internal("the custom-op registry is not set up"))?;
            let op = registry
                .resolve(name)
                .map_err(|e| e.context(describe(graph, n)))?;
            if op.info.n_inputs != *num_inputs || n.inputs.len() != *num_inputs as usize {
                return Err(PluginError::invalid_argument(format!(
                    "{}: custom op {name:?} takes {} inputs, the node has {}",
                    describe(graph, n),
                    op.info.n_inputs,
                    n.inputs.len()
                )));
            }
            let body = match &op.imp {
                CustomImpl::Composite(text) => Some(Arc::new(composite::parse_body(text)?)),
                _ => None,
            };
            self.ops.insert(
                name.clone(),
                Resolved {
                    op,
                    body: body.clone(),
                },
            );
            if let Some(b) = body {
                self.resolve_in(&b, depth + 1)?;
            }
        }
        Ok(())
    }

    /// Whether an op of the scope runs a kernel of the host's or of
    /// another library: code whose effects (and cost) the plugin cannot
    /// see, so it runs only when a run asks for it.
    pub fn calls_kernels(&self) -> bool {
        self.ops
            .values()
            .any(|r| matches!(r.op.imp, CustomImpl::Kernel(_) | CustomImpl::Owned(_)))
    }

    pub fn get(&self, name: &str) -> LResult<&Resolved> {
        self.ops
            .get(name)
            .ok_or_else(|| format!("custom op {name:?} was not resolved at compile").into())
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

/// The `Custom` lowering.
pub fn lower(cx: &Ctx, args: &[&Array]) -> LResult {
    crate::op_fields!(cx, Custom { name, attrs, .. });
    let r = cx.custom.get(name)?;
    match &r.op.imp {
        CustomImpl::Native => native::lower(name, cx, args, attrs),
        CustomImpl::Composite(_) => {
            composite::inline(cx, r.body.as_deref().expect("parsed at resolve"), args)
        }
        CustomImpl::Kernel(k) => {
            host_kernel::node(cx, args, host_kernel::Call::Into(k.clone()), attrs, name)
        }
        CustomImpl::Owned(k) => {
            host_kernel::node(cx, args, host_kernel::Call::Owned(k.clone()), attrs, name)
        }
    }
}

/// The lowering-table row.
pub fn entries() -> Vec<crate::lower::Lowering> {
    vec![crate::row!(
        Custom,
        crate::dtype::ALL,
        Native,
        "by name through the custom-op registry: native ops are MLX ops, kernels an MLX primitive on the CPU stream calling them in place, composites their inlined body",
        lower
    )]
}

/// A kernel's error as the run reports it.
pub fn kernel_error(what: &str, op: &str, e: PluginError) -> PluginError {
    PluginError::new(
        e.code,
        format!("{what}: custom op {op:?} failed: {}", e.message),
    )
}
