//! rlx-runtime with the MLX plugin behind `Session::new(Device::Mlx)`: the
//! MLP and the demo transformer, compiled by rlx-runtime's pipeline for the
//! plugin's claims, in every mode, against `Session::new(Device::Cpu)`.

use rlx_host::models::{mlp, transformer, MlpConfig, TransformerConfig};
use rlx_host::run::{errors, execute, random_data};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_runtime::Device;

fn check(model: &rlx_host::models::Model, seed: u64, tol: f64) {
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let data = random_data(&model.graph, seed).unwrap();
    let cpu = execute(Device::Cpu, &model.graph, &data, 1).unwrap();
    assert!(
        cpu.outputs.iter().all(|o| o.iter().any(|v| *v != 0.0)),
        "reference is zeros"
    );
    for mode in MODES {
        let got = with_mode(mode, || execute(Device::Mlx, &model.graph, &data, 2))
            .unwrap_or_else(|e| panic!("[{}] {e}", mode.name()));
        assert_eq!(got.outputs.len(), cpu.outputs.len());
        for (i, (g, c)) in got.outputs.iter().zip(&cpu.outputs).enumerate() {
            let (abs, _) = errors(g, c).unwrap();
            assert!(
                abs <= tol,
                "[{}] output {i}: max abs err {abs} > {tol}",
                mode.name()
            );
        }
    }
}

#[test]
fn mlp_through_session_matches_cpu() {
    // f32, a few dozen-term dot products: 1e-5 absolute.
    check(&mlp(&MlpConfig::default()), 3, 1e-5);
}

#[test]
fn transformer_through_session_matches_cpu() {
    // f32 through norms, attention and two residual blocks: 1e-4 absolute
    // on logits of order 1.
    check(&transformer(&TransformerConfig::default()), 5, 1e-4);
}
