//! Compiling for a plugin without a `Session`: the plugin's own executable
//! ([`PluginGraph`]) rather than rlx-runtime's `CompiledGraph`, for a
//! program that uses what the plugin offers beyond rlx-runtime's
//! `ExecutableGraph` (state taken from another executable, runs submitted
//! and waited for with the outputs it names). The graph goes through the
//! same pipeline as `Session::compile`'s and must run on the plugin whole.

use super::*;
use crate::partition::{Plan, Side};

/// `graph` compiled for the plugin registered for `device`, in the mode a
/// compile on this thread would use ([`with_mode`]), whole: a node the
/// plugin does not take is an error naming it, never a fallback.
///
/// A graph compiled before (the same bytes, mode and options) is not
/// compiled again: the result is a clone of that compile's executable,
/// with nothing bound ([`PluginGraph::reused`]; `compile_cache.rs`).
pub fn compile_on_plugin(device: Device, graph: &Graph) -> Result<PluginGraph, String> {
    let backend = crate::guard::catch_raw(make_backend_for(device))?;
    let options = CompileOptions::default();
    let key = compile_cache::key_bytes(graph).map(|b| (backend.cache_context(&options), b));
    if let Some((context, bytes)) = &key {
        if let Some(exe) = compile_cache::lookup(context, bytes) {
            return Ok(exe);
        }
    }
    let lowered = crate::guard::catch_quiet(|| backend.pipeline.lower(graph.clone(), &options))?;
    let plan = Plan::new(&lowered, &backend.reg.claims);
    if let Some(p) = plan.placements.iter().find(|p| p.side == Some(Side::Cpu)) {
        return Err(format!(
            "{} plugin does not take node %{} {:?}: {}",
            backend.pipeline.label, p.node.0, p.kind, p.why
        ));
    }
    let exe = crate::guard::catch_quiet(|| backend.build_graph(lowered, options.rng))?;
    if let Some((context, bytes)) = key {
        compile_cache::store(context, bytes, &exe);
    }
    Ok(exe)
}
