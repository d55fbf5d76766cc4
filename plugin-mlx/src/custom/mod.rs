//! `Custom` nodes: resolved by name in the plugin's custom-op registry
//! when a graph is compiled ([`resolve`]), then lowered by what the op is:
//!
//! - a *native* op ([`native`]) is built from MLX ops, so it stays inside
//!   the lazy graph and `mx::compile`'s fusion;
//! - a *kernel* (`lower::host_kernel`) becomes an MLX primitive whose CPU
//!   evaluation calls it, reading the inputs in place and writing into the
//!   output MLX allocated;
//! - a *composite* ([`composite`]) has its body inlined.
//!
//! An executable resolves its ops once, at compile
//! (`lower::custom_scope::CustomScope`), and keeps them: unregistering an op
//! does not take it from an executable that uses it.

pub mod body;
pub mod collectives;
pub mod composite;
pub mod install;
pub mod native;
pub mod resolve;
mod services;

use crate::lower::host_kernel::{self, Call};
use crate::lower::{Ctx, LResult};
use rlx_mlx_shim::Array;
use rlx_plugin_api::{CustomImpl, CustomOpRegistry};
use std::sync::OnceLock;

static REGISTRY: OnceLock<&'static CustomOpRegistry> = OnceLock::new();

/// Keep the registry `init` was given ([`install::install`]).
fn keep_registry(registry: &'static CustomOpRegistry) {
    let _ = REGISTRY.set(registry);
}

/// The registry, once `init` ran.
pub fn registry() -> Option<&'static CustomOpRegistry> {
    REGISTRY.get().copied()
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
        CustomImpl::Kernel(k) => host_kernel::node(cx, args, Call::Into(k.clone()), attrs, name),
        CustomImpl::Owned(k) => host_kernel::node(cx, args, Call::Owned(k.clone()), attrs, name),
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
