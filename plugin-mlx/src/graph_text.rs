//! Reading `.rlxmodel` text into a graph, and the words errors use for its
//! nodes and leaves: what every part of the plugin reports with, below the
//! lowering table (which `graph_check` checks graphs against).

use rlx_ir::{Graph, Node, NodeId, Op};
use rlx_plugin_api::{PluginError, PluginResult};

/// A node as errors show it: `%3 "q_proj" (MatMul f32[2, 4] → f32[2, 8])`.
pub fn describe(g: &Graph, n: &Node) -> String {
    let ins: Vec<String> = n.inputs.iter().map(|i| shape_str(g, *i)).collect();
    let name = n
        .name
        .as_deref()
        .map(|s| format!(" {s:?}"))
        .unwrap_or_default();
    format!(
        "node {}{name} ({:?} {} -> {})",
        n.id,
        n.op.kind(),
        if ins.is_empty() {
            "()".to_string()
        } else {
            ins.join(", ")
        },
        shape_str(g, n.id)
    )
}

pub fn shape_str(g: &Graph, id: NodeId) -> String {
    let s = g.shape(id);
    let dims: Vec<String> = s
        .dims()
        .iter()
        .map(|d| match d {
            rlx_ir::Dim::Static(n) => n.to_string(),
            rlx_ir::Dim::Dynamic(k) => format!("?{k}"),
        })
        .collect();
    format!(
        "{}[{}]",
        format!("{:?}", s.dtype()).to_lowercase(),
        dims.join(", ")
    )
}

/// Why graph text could not be read, with the ABI's code for it: an op or
/// variant this plugin's rlx-ir does not know (a newer host's), or a newer
/// format or opset, is UNSUPPORTED; malformed text is INVALID_ARGUMENT.
pub fn read_error(e: rlx_ir::rlxmodel::RlxModelError) -> PluginError {
    use rlx_ir::rlxmodel::RlxModelError as E;
    let unknown = matches!(&e, E::Value(v) if v.to_string().contains("unknown variant"));
    let msg = format!("cannot read the graph: {e}");
    match e {
        E::Version(_) => PluginError::unsupported(msg),
        _ if unknown => PluginError::unsupported(msg),
        _ => PluginError::invalid_argument(msg),
    }
}

/// rlx-ir's reader behind the nesting check (deep nesting would overflow
/// its stack and abort the host).
pub fn read_graph(text: &str) -> PluginResult<Graph> {
    rlx_plugin_api::graph_text::check_nesting(text)
        .map_err(|e| PluginError::invalid_argument(format!("cannot read the graph: {e}")))?;
    rlx_ir::rlxmodel::from_text(text).map_err(read_error)
}

/// Named leaves of a graph, in node order.
pub type Leaves = Vec<(String, NodeId)>;

/// The graph's inputs and params in node order: `(name, node id)`.
pub fn leaves(g: &Graph) -> (Leaves, Leaves) {
    let mut inputs = Vec::new();
    let mut params = Vec::new();
    for n in g.nodes() {
        match &n.op {
            Op::Input { name } => inputs.push((name.clone(), n.id)),
            Op::Param { name } => params.push((name.clone(), n.id)),
            _ => {}
        }
    }
    (inputs, params)
}
