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
use crate::graph_text::leaves;
use crate::lower::{static_dims, Ctx, LResult, A};
use rlx_ir::{Graph, NodeId};
use rlx_mlx_shim::{ops, Array};
use rlx_plugin_api::{PluginError, PluginResult};

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
    let mut outs = cx
        .evaluate(body, &leaf)
        .map_err(|e| format!("in the composite body: {}", e.message))?;
    Ok(outs.remove(0))
}
