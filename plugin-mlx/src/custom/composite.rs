//! Composite custom ops: an `.rlxmodel` body whose `Input` nodes, in node
//! order, are the op's inputs and whose one output is the op's. The body is
//! inlined where the op is used, so its nodes join the surrounding MLX
//! graph (and `mx::compile`'s fusion) like any others.
//!
//! The body computes in the dtypes it declares. A node whose inputs have
//! the body's shapes but another float dtype (an f16 model using a body
//! written in f32) has them converted on the way in and the result
//! converted to the node's dtype on the way out.

use crate::dtype::ir_to_mx;
use crate::executable::evaluate;
use crate::graph_check::{leaves, parse_and_check};
use crate::lower::{static_dims, Ctx, LResult, A};
use rlx_ir::{DType as IrDType, Graph, NodeId, Op};
use rlx_mlx_shim::{ops, Array};
use rlx_plugin_api::{DType, PluginError, PluginResult, TensorType};

/// Parse and check a body: every node lowers here, no params, one output.
pub fn parse_body(text: &str) -> PluginResult<Graph> {
    let g = parse_and_check(text).map_err(|e| e.context("the composite body"))?;
    if let Some(n) = g.nodes().iter().find(|n| matches!(n.op, Op::Param { .. })) {
        return Err(PluginError::invalid_argument(format!(
            "a composite body takes its values as inputs; it has a param ({})",
            crate::graph_check::describe(&g, n)
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

/// Inline `body` on `args`.
pub fn inline(cx: &Ctx, body: &Graph, args: &[&Array]) -> LResult {
    let (ins, _) = leaves(body);
    if ins.len() != args.len() {
        return Err(format!(
            "the composite body takes {} inputs, the node has {}",
            ins.len(),
            args.len()
        )
        .into());
    }
    let mut bound: Vec<(NodeId, A)> = Vec::with_capacity(args.len());
    for (i, ((name, id), a)) in ins.iter().zip(args).enumerate() {
        let want = static_dims(body.shape(*id).dims());
        if cx.in_dims(i) != want {
            return Err(format!(
                "input {i} ({name:?}) of the composite body is {want:?}, the node gives {:?}",
                cx.in_dims(i)
            )
            .into());
        }
        let dt = ir_to_mx(body.shape(*id).dtype()).ok_or("body dtype")?;
        let v = if a.dtype() == dt {
            a.clone_handle()
        } else {
            ops::astype(a, dt)?
        };
        bound.push((*id, v));
    }
    let leaf = |id: NodeId| -> PluginResult<A> {
        bound
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, v)| v.clone_handle())
            .ok_or_else(|| PluginError::internal(format!("body leaf {id} is not bound")))
    };
    let mut outs = evaluate(body, &cx.env(), &leaf)
        .map_err(|e| format!("in the composite body: {}", e.message))?;
    Ok(outs.remove(0))
}
