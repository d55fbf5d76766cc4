//! Custom ops the plugin has no kernel for, run through its host-kernel
//! bridge with rlx-cpu's kernel.
//!
//! A crate registers a custom op with rlx-ir (its shape and gradient) and a
//! kernel with rlx-cpu's registry (rlx-cpu's own `spd.matfn_batched` is one);
//! the plugin's registry does not know the name. Such a node is claimed for the
//! plugin when rlx-cpu has a kernel for it and the plugin takes in-place host
//! kernels (its minor is at least 5): before a graph is compiled on the plugin,
//! each such name is registered with it as a host kernel that runs rlx-cpu's
//! kernel on the inputs in place. Otherwise the node is not claimed, and runs
//! on the CPU backend with its reason ([`crate::partition::Claims`]).

use rlx_ir::{Graph, Op};
use rlx_plugin_api::{CustomImpl, CustomKernel, CustomOp, Origin, PluginError, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

/// Whether the plugin can run custom op `name`: its own registry has it,
/// or rlx-cpu has a kernel the bridge can hand it.
pub fn runs(plugin: &LoadedPlugin, name: &str) -> bool {
    plugin.lookup_custom_op(name).is_ok() || bridgeable(plugin, name)
}

/// rlx-cpu has a kernel for `name` and the plugin takes in-place host kernels:
/// it has a custom-op registry and its minor is at least 5.
fn bridgeable(plugin: &LoadedPlugin, name: &str) -> bool {
    plugin.abi_version().minor >= 5
        && plugin.has_custom_ops()
        && rlx_cpu::op_registry::lookup_cpu_kernel(name).is_some()
}

/// The custom ops of `graph` and of the bodies of its loops and branches:
/// `(name, inputs)`, each name once.
pub fn custom_ops(graph: &Graph) -> Vec<(String, u32)> {
    fn walk(g: &Graph, out: &mut Vec<(String, u32)>) {
        for n in g.nodes() {
            if let Op::Custom {
                name, num_inputs, ..
            } = &n.op
            {
                if !out.iter().any(|(m, _)| m == name) {
                    out.push((name.clone(), *num_inputs));
                }
            }
            for body in n.op.subgraphs() {
                walk(body, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(graph, &mut out);
    out
}

/// Register with `plugin`, as host kernels, the custom ops of `graph`
/// (bodies included) it has no kernel for and rlx-cpu has. A name
/// registered meanwhile by another thread is fine.
pub fn bridge_graph(plugin: &LoadedPlugin, graph: &Graph) -> Result<(), String> {
    for (name, num_inputs) in custom_ops(graph) {
        if plugin.lookup_custom_op(&name).is_ok() || !bridgeable(plugin, &name) {
            continue;
        }
        let op = CustomOp::new(
            name.clone(),
            "rlx-cpu's kernel, run through the host-kernel bridge",
            num_inputs,
            Origin::Host,
            CustomImpl::Kernel(cpu_kernel(name.clone())),
        );
        match plugin.register_op(op) {
            Ok(()) => log::debug!("custom op {name:?} runs on the plugin with rlx-cpu's kernel"),
            Err(e) if e.code == StatusCode::AlreadyExists => {}
            Err(e) => return Err(format!("custom op {name:?}: {}", e.message)),
        }
    }
    Ok(())
}

/// rlx-cpu's kernel for `name`, looked up at each call, over the views the
/// plugin hands a host kernel.
fn cpu_kernel(name: String) -> CustomKernel {
    Arc::new(move |inputs, outputs, attrs| {
        let shape =
            |dtype, dims: &[usize]| rlx_ir::Shape::new(dims, crate::abi_names::ir_dtype(dtype));
        let shapes: Vec<rlx_ir::Shape> = inputs.iter().map(|t| shape(t.dtype, t.shape)).collect();
        let ins: Vec<(&[u8], &rlx_ir::Shape)> = inputs
            .iter()
            .zip(&shapes)
            .map(|(t, s)| (t.data, s))
            .collect();
        let [out] = outputs else {
            return Err(PluginError::internal(format!(
                "custom op {name:?}: rlx-cpu's kernels write one output, {} asked",
                outputs.len()
            )));
        };
        let out_shape = shape(out.dtype, out.shape);
        rlx_cpu::op_registry::run_custom_op_host(&name, &ins, (&mut *out.data, &out_shape), attrs)
            .map_err(|e| PluginError::internal(format!("custom op {name:?}: {e}")))
    })
}
