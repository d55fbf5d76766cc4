//! Resolving the `Custom` nodes of a graph by name in the plugin's
//! custom-op registry, when an executable is compiled.

use super::body::parse_body;
use super::registry;
use crate::graph_text::describe;
use crate::lower::custom_scope::{CustomScope, Resolved};
use rlx_ir::{Graph, Op};
use rlx_plugin_api::{CustomImpl, PluginError, PluginResult};
use std::sync::Arc;

/// How deep composites may nest (a body using itself is refused here).
const MAX_NESTING: usize = 16;

/// Resolve every `Custom` node of `graph` (and of the composites it uses).
/// An unknown name is `NOT_FOUND` naming the node and listing what is
/// registered.
pub fn resolve(graph: &Graph) -> PluginResult<CustomScope> {
    let mut scope = CustomScope::default();
    resolve_in(&mut scope, graph, 0)?;
    Ok(scope)
}

fn resolve_in(scope: &mut CustomScope, graph: &Graph, depth: usize) -> PluginResult<()> {
    for n in graph.nodes() {
        let Op::Custom {
            name, num_inputs, ..
        } = &n.op
        else {
            continue;
        };
        if scope.contains(name) {
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
            CustomImpl::Composite(text) => Some(Arc::new(parse_body(text)?)),
            _ => None,
        };
        scope.insert(
            name.clone(),
            Resolved {
                op,
                body: body.clone(),
            },
        );
        if let Some(b) = body {
            resolve_in(scope, &b, depth + 1)?;
        }
    }
    Ok(())
}
