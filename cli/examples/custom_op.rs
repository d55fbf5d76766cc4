//! A host kernel written in Rust, used inside a model on the MLX plugin.
//!
//! It registers `example.scaled_swish` (y = x * sigmoid(alpha * x), alpha
//! from the node's attribute bytes) with the plugin, rlx-ir and rlx-cpu in
//! one call, builds a graph that uses it between ordinary ops, and runs the
//! graph through rlx-runtime on the plugin (all three modes) and on the CPU
//! backend, printing the parity.
//!
//! ```sh
//! cargo run -p rlx-host --example custom_op
//! ```
//!
//! The plugin is found like `rlx-host` finds it: `RLX_BACKEND_PLUGINS`,
//! `$RLX_HOME/plugins`, and first the build tree's `target/<profile>/plugins/mlx`.

use rlx_host::run::{errors, execute, find_plugin, random_data};
use rlx_ir::op::Activation;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::{CustomImpl, CustomKernel, CustomOp, Mode, Origin, ShapeRule};
use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
use rlx_plugin_host::custom_ops::register_host_op;
use rlx_plugin_loader::PluginSet;
use rlx_runtime::Device;
use std::sync::Arc;

/// The kernel: f32 in, f32 out, in place into the output the backend
/// allocated. The same function runs on the plugin (inside its graph) and
/// on rlx-runtime's CPU backend.
fn scaled_swish() -> CustomKernel {
    Arc::new(|inputs, outputs, attrs| {
        let alpha = match attrs {
            [a, b, c, d] => f32::from_le_bytes([*a, *b, *c, *d]),
            _ => 1.0,
        };
        let x = inputs[0].data.chunks_exact(4);
        for (y, x) in outputs[0].data.chunks_exact_mut(4).zip(x) {
            let x = f32::from_le_bytes(x.try_into().unwrap());
            let v = x / (1.0 + (-alpha * x).exp());
            y.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    })
}

fn main() -> Result<(), String> {
    // The build tree's plugin directory (a checkout), else discovery.
    let tree = rlx_host::build_tree::profile_dir()
        .and_then(|p| rlx_host::build_tree::mlx_plugin_dir(&p).ok());
    let set = PluginSet::load_from_env(tree.into_iter().collect());
    let mlx = find_plugin(&set, "mlx")?;
    register_plugin_backend(mlx.clone(), Device::Mlx, Mode::Lazy);

    register_host_op(
        &mlx,
        CustomOp::new(
            "example.scaled_swish",
            "x * sigmoid(alpha x); alpha: f32 LE attribute",
            1,
            Origin::Host,
            CustomImpl::Kernel(scaled_swish()),
        )
        .with_shape(ShapeRule::SameAsInput(0)),
    )
    .map_err(|e| e.to_string())?;

    // x[8, 16] @ w[16, 32] -> scaled_swish(alpha = 1.5) -> tanh
    let mut g = Graph::new("uses_a_host_kernel");
    let x = g.input("x", Shape::new(&[8, 16], DType::F32));
    let w = g.param("w", Shape::new(&[16, 32], DType::F32));
    let h = g.matmul(x, w, Shape::new(&[8, 32], DType::F32));
    let s = g.custom_op(
        "example.scaled_swish",
        1.5f32.to_le_bytes().to_vec(),
        vec![h],
    );
    let y = g.activation(Activation::Tanh, s, Shape::new(&[8, 32], DType::F32));
    g.set_outputs(vec![y]);

    let data = random_data(&g, 7)?;
    let cpu = execute(Device::Cpu, &g, &data, 1)?;
    println!("graph: x[8,16] @ w[16,32] -> example.scaled_swish -> tanh");
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let got = with_mode(mode, || execute(Device::Mlx, &g, &data, 3))?;
        let (abs, rel) = errors(&got.outputs[0], &cpu.outputs[0])?;
        println!(
            "mlx {:<8} vs cpu: max abs err {abs:.2e}, max rel err {rel:.2e}",
            mode.name()
        );
        if abs > 1e-5 {
            return Err(format!(
                "{} mode differs from the CPU by {abs}",
                mode.name()
            ));
        }
    }
    Ok(())
}
