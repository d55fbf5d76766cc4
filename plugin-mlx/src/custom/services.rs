//! What the registry asks of this plugin: reading composite bodies, and
//! running native and composite ops outside a graph (the registry's
//! `execute`), as a one-node graph in eager mode.

use super::body::{body_type, parse_body};
use crate::executable::MlxExecutable;
use rlx_ir::{Graph, Op, Shape};
use rlx_plugin_api::tensor::borrow_all;
use rlx_plugin_api::{
    CompileOptions, CustomOp, CustomOpInfo, CustomOpServices, Executable, HostTensor, Mode,
    PluginError, PluginResult, TensorRef, TensorType,
};

pub struct MlxServices;

fn ir_shape(t: &TensorType) -> PluginResult<Shape> {
    let dims = t
        .static_shape()
        .ok_or_else(|| PluginError::invalid_argument(format!("{t} has unknown sizes")))?;
    Ok(Shape::new(&dims, crate::dtype::abi_to_ir(t.dtype)))
}

impl CustomOpServices for MlxServices {
    fn check_composite(&self, op: &CustomOpInfo, body: &str) -> PluginResult<()> {
        let g = parse_body(body)?;
        let (ins, _) = crate::graph_text::leaves(&g);
        if ins.len() != op.n_inputs as usize {
            return Err(PluginError::invalid_argument(format!(
                "the op declares {} inputs, its body has {}",
                op.n_inputs,
                ins.len()
            )));
        }
        Ok(())
    }

    fn body_shape(&self, body: &str, inputs: &[TensorType]) -> PluginResult<TensorType> {
        body_type(&parse_body(body)?, inputs)
    }

    fn run(
        &self,
        op: &CustomOp,
        inputs: &[HostTensor],
        attrs: &[u8],
        out: &TensorType,
    ) -> PluginResult<HostTensor> {
        let mut g = Graph::new("custom_op");
        let mut ids = Vec::new();
        for (i, t) in inputs.iter().enumerate() {
            let tt = TensorType::of(&t.into());
            ids.push(g.input(format!("x{i}"), ir_shape(&tt)?));
        }
        let y = g.add_node(
            Op::Custom {
                name: op.info.name.clone(),
                num_inputs: op.info.n_inputs,
                attrs: attrs.to_vec(),
            },
            ids,
            ir_shape(out)?,
        );
        g.set_outputs(vec![y]);
        let text = rlx_ir::rlxmodel::to_text(&g)
            .map_err(|e| PluginError::internal(format!("cannot write the graph: {e}")))?;
        let _on = crate::executable::on_device(crate::devices::resolve(None)?)?;
        let mut exe = MlxExecutable::compile(&text, &CompileOptions::mode(Mode::Eager))?;
        let borrowed = borrow_all(inputs);
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("x{i}")).collect();
        let mut named = Vec::with_capacity(inputs.len());
        for (name, raw) in names.iter().zip(&borrowed.raws) {
            // SAFETY: the descriptor borrows `inputs`, alive for this call.
            named.push((name.as_str(), unsafe { TensorRef::from_raw(raw) }?));
        }
        let mut outs = exe.run(&named)?;
        Ok(outs.remove(0))
    }
}
