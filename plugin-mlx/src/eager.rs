//! The lowering table's eager entries: run one op on tensors.

use crate::executable::MlxExecutable;
use crate::graph_text::leaves;
use rlx_ir::Op;
use rlx_plugin_api::tensor::borrow_all;
use rlx_plugin_api::{
    CompileOptions, Executable, HostTensor, Mode, PluginError, PluginResult, TensorRef,
};

/// Run the single op of `node_text` (a graph of inputs and one op) on
/// `inputs`, bound to the graph's inputs in order.
pub fn execute_single(
    op_kind: &str,
    node_text: &str,
    inputs: &[HostTensor],
) -> PluginResult<Vec<HostTensor>> {
    // A single op runs on the plugin's default device.
    let _on = crate::executable::on_device(crate::devices::resolve(None)?)?;
    let graph = crate::graph_text::read_graph(node_text).map_err(|e| e.context("the node"))?;
    let ops: Vec<_> = graph
        .nodes()
        .iter()
        .filter(|n| !matches!(n.op, Op::Input { .. }))
        .collect();
    match ops.as_slice() {
        [n] if format!("{:?}", n.op.kind()) == op_kind => {}
        _ => {
            return Err(PluginError::invalid_argument(format!(
                "an eager {op_kind} entry needs a graph of inputs and exactly one {op_kind} node; got {}",
                ops.iter().map(|n| format!("{:?}", n.op.kind())).collect::<Vec<_>>().join(", ")
            )))
        }
    }
    let (names, _) = leaves(&graph);
    if names.len() != inputs.len() {
        return Err(PluginError::invalid_argument(format!(
            "{op_kind} takes {} inputs here, got {}",
            names.len(),
            inputs.len()
        )));
    }
    let mut exe = MlxExecutable::compile(node_text, &CompileOptions::mode(Mode::Eager))?;
    let borrowed = borrow_all(inputs);
    let mut named = Vec::with_capacity(inputs.len());
    for ((name, _), raw) in names.iter().zip(&borrowed.raws) {
        // SAFETY: the descriptor borrows `inputs`, alive for this call.
        named.push((name.as_str(), unsafe { TensorRef::from_raw(raw) }?));
    }
    exe.run(&named)
}
