//! A composite op's body as registered: its text parsed and checked (every
//! node lowers here, no params, one output), and the type it answers for
//! given inputs. Read when an executable resolves the op and when the
//! registry checks a registration.

use crate::graph_check::parse_and_check;
use crate::graph_text::{describe, leaves};
use crate::lower::static_dims;
use rlx_ir::{DType as IrDType, Graph, NodeId, Op};
use rlx_plugin_api::{DType, PluginError, PluginResult, TensorType};

/// Parse and check a body: every node lowers here, no params, one output.
pub fn parse_body(text: &str) -> PluginResult<Graph> {
    let g = parse_and_check(text).map_err(|e| e.context("the composite body"))?;
    crate::bounds::check_graph(&g).map_err(|e| e.context("the composite body"))?;
    if let Some(n) = g.nodes().iter().find(|n| matches!(n.op, Op::Param { .. })) {
        return Err(PluginError::invalid_argument(format!(
            "a composite body takes its values as inputs; it has a param ({})",
            describe(&g, n)
        )));
    }
    if g.outputs.len() != 1 {
        return Err(PluginError::invalid_argument(format!(
            "a composite body has one output, this one has {}",
            g.outputs.len()
        )));
    }
    Ok(g)
}

fn dims(g: &Graph, id: NodeId) -> Vec<i64> {
    static_dims(g.shape(id).dims())
        .iter()
        .map(|d| *d as i64)
        .collect()
}

fn abi(d: IrDType) -> PluginResult<DType> {
    crate::dtype::ir_to_abi(d)
        .ok_or_else(|| PluginError::unsupported(format!("no ABI dtype for {d:?}")))
}

/// The body's output type for inputs of these types.
pub fn body_type(g: &Graph, inputs: &[TensorType]) -> PluginResult<TensorType> {
    let (ins, _) = leaves(g);
    if ins.len() != inputs.len() {
        return Err(PluginError::invalid_argument(format!(
            "the body takes {} inputs, got {}",
            ins.len(),
            inputs.len()
        )));
    }
    let mut converted: Option<DType> = None;
    for (i, ((name, id), t)) in ins.iter().zip(inputs).enumerate() {
        let want = dims(g, *id);
        if t.shape != want {
            return Err(PluginError::invalid_argument(format!(
                "input {i} ({name:?}) of the body is {want:?}, got {:?}",
                t.shape
            )));
        }
        let body_dt = abi(g.shape(*id).dtype())?;
        if t.dtype != body_dt {
            if !(t.dtype.is_float() && body_dt.is_float()) {
                return Err(PluginError::invalid_argument(format!(
                    "input {i} ({name:?}) of the body is {body_dt}, got {} (only float dtypes convert)",
                    t.dtype
                )));
            }
            converted = Some(t.dtype);
        }
    }
    let out = g.outputs[0];
    let out_dt = abi(g.shape(out).dtype())?;
    Ok(TensorType {
        // A float body run on converted inputs answers in their dtype.
        dtype: match converted {
            Some(dt) if out_dt.is_float() => dt,
            _ => out_dt,
        },
        shape: dims(g, out),
    })
}
