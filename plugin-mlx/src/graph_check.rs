//! Checking a graph against the lowering table before anything runs: every
//! error names the node, its op and shapes.

use crate::graph_source::GraphSource;
use crate::graph_text::describe;
use crate::lower::Lowering;
use rlx_ir::{Graph, Node};
use rlx_plugin_api::{PluginError, PluginResult};

/// The most dimensions a tensor may have: what an executable's signature
/// can carry to a host (`RLX_MAX_NDIM`, docs/ABI.md §7).
pub const MAX_RANK: usize = 64;

/// Parse text and check every node ([`read_and_check`]).
pub fn parse_and_check(text: &str) -> PluginResult<Graph> {
    read_and_check(GraphSource::Text(text))
}

/// Read a graph and check every node: a lowering exists, takes the node's
/// dtype, shapes are static with at most [`MAX_RANK`] dimensions, and
/// inputs come before their users. (The sizes MLX takes are checked
/// against its memory and then [`crate::bounds`] before any lowering.)
pub fn read_and_check(source: GraphSource) -> PluginResult<Graph> {
    let graph = source.read()?;
    for n in graph.nodes() {
        let rank = graph.shape(n.id).dims().len();
        if rank > MAX_RANK {
            return Err(PluginError::invalid_argument(format!(
                "{}: rank {rank} is more than the {MAX_RANK} dimensions a tensor may have",
                describe(&graph, n)
            )));
        }
        lowering_for(&graph, n)?;
        if !graph.shape(n.id).is_static() {
            return Err(PluginError::unsupported(format!(
                "{}: dynamic dims are not supported by the MLX plugin; bind them before compiling",
                describe(&graph, n)
            )));
        }
        if let Some(bad) = n.inputs.iter().find(|i| i.0 >= n.id.0) {
            return Err(PluginError::invalid_argument(format!(
                "{}: input {bad} is not defined before it is used",
                describe(&graph, n)
            )));
        }
    }
    if graph.outputs.is_empty() {
        return Err(PluginError::invalid_argument("the graph has no outputs"));
    }
    Ok(graph)
}

pub fn lowering_for(g: &Graph, n: &Node) -> PluginResult<&'static Lowering> {
    let kind = n.op.kind();
    let l = crate::table::find(kind).ok_or_else(|| {
        PluginError::unsupported(format!(
            "{}: the MLX plugin does not lower {kind:?}",
            describe(g, n)
        ))
    })?;
    let dt = g.shape(n.id).dtype();
    if !l.dtypes.contains(&dt) {
        return Err(PluginError::unsupported(format!(
            "{}: the MLX plugin lowers {kind:?} for {} but not {}",
            describe(g, n),
            l.dtypes
                .iter()
                .map(|d| format!("{d:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join(", "),
            format!("{dt:?}").to_lowercase()
        )));
    }
    Ok(l)
}
