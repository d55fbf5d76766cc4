//! The plugin adapter: `Session::new(Device::Mlx)` compiling and running
//! through the fixture test plugin gives the CPU backend's numbers.

mod common;

use rlx_host::models::matmul_relu_add;
use rlx_host::run::{errors, execute, random_data, ModelData};
use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{self, register_plugin_backend, with_mode};
use rlx_runtime::{Device, Session};

fn setup() {
    // Every test in this binary registers the same plugin: idempotent.
    register_plugin_backend(common::fixture(), Device::Mlx, Mode::Lazy);
}

fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>], tol: f64) {
    assert_eq!(got.len(), want.len(), "output count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (abs, _) = errors(g, w).unwrap();
        assert!(abs <= tol, "output {i}: max abs err {abs} > {tol}");
    }
}

#[test]
fn session_on_the_fixture_matches_the_cpu_backend_in_every_mode() {
    setup();
    let model = matmul_relu_add(4, 8, 6);
    let data = random_data(&model.graph, 7).unwrap();
    let cpu = execute(Device::Cpu, &model.graph, &data, 1).unwrap();
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let got = with_mode(mode, || execute(Device::Mlx, &model.graph, &data, 2))
            .unwrap_or_else(|e| panic!("{}: {e}", mode.name()));
        assert_close(&got.outputs, &cpu.outputs, 1e-5);
        assert_eq!(got.outputs[0].len(), 4 * 6);
        // relu(...) + b is not all b: the matmul really ran.
        assert!(got.outputs[0].iter().any(|v| *v != 0.0));
    }
}

#[test]
fn the_session_api_is_used_directly() {
    setup();
    // The same thing without the run helpers: what an rlx-runtime program
    // writes once the plugin is registered.
    let mut g = Graph::new("direct");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let w = g.param("w", Shape::new(&[3, 2], DType::F32));
    let y = g.mm(x, w);
    let y = g.relu(y);
    let two = g.constant(2.0, DType::F32);
    let y = g.mul(y, two);
    g.set_outputs(vec![y]);
    let xs = [1.0, -2.0, 3.0, 0.5, 0.25, -1.0];
    let ws = [1.0, 0.0, 0.0, 1.0, 1.0, -1.0];
    let mut results = Vec::new();
    for device in [Device::Mlx, Device::Cpu] {
        let mut c = Session::new(device).compile(g.clone());
        c.set_param("w", &ws);
        results.push(c.run(&[("x", &xs)]));
    }
    // x @ w = [[4, -5], [-0.75, 1.25]] -> relu -> * 2
    assert_close(&results[0], &[vec![8.0, 0.0, 0.0, 2.5]], 1e-6);
    assert_close(&results[0], &results[1], 1e-6);
}

#[test]
fn the_mode_is_chosen_per_compile() {
    setup();
    assert_eq!(backend::plugin_mode(Device::Mlx), Some(Mode::Lazy));
    with_mode(Mode::Compiled, || {
        assert_eq!(backend::plugin_mode(Device::Mlx), Some(Mode::Compiled));
    });
    assert_eq!(backend::plugin_mode(Device::Mlx), Some(Mode::Lazy));
}

#[test]
fn the_fixture_claims_only_its_ops() {
    setup();
    let ops = backend::parse_op_kinds(&common::fixture());
    use rlx_ir::OpKind;
    for k in [
        OpKind::Input,
        OpKind::Param,
        OpKind::Constant,
        OpKind::Binary,
        OpKind::Activation,
        OpKind::MatMul,
    ] {
        assert!(ops.contains(&k), "{k:?} not claimed: {ops:?}");
    }
    assert_eq!(ops.len(), 6, "{ops:?}");
}

#[test]
fn an_op_the_plugin_cannot_run_is_a_one_line_error_naming_it() {
    setup();
    // Softmax is not claimed: rlx-runtime decomposes it into ops the
    // fixture does not claim either (reductions). Without fallback the
    // compile fails before the plugin sees the graph, naming the op; with
    // it (the default) the Softmax runs on the CPU backend.
    let mut g = Graph::new("softmax");
    let x = g.input("x", Shape::new(&[2, 4], DType::F32));
    let y = g.sm(x, -1);
    g.set_outputs(vec![y]);
    let data = random_data(&g, 0).unwrap();
    use rlx_plugin_host::partition::Fallback;
    assert!(backend::set_fallback(Device::Mlx, Fallback::Never));
    let err = execute(Device::Mlx, &g, &data, 1).unwrap_err();
    assert!(backend::set_fallback(Device::Mlx, Fallback::Cpu));
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains("fixture plugin:"), "{err}");
    assert!(err.contains("claim"), "{err}");
    let split = execute(Device::Mlx, &g, &data, 1).unwrap();
    let cpu = execute(Device::Cpu, &g, &data, 1).unwrap();
    assert_eq!(
        split.outputs, cpu.outputs,
        "the Softmax ran on the CPU backend"
    );
    let plan = backend::explain(Device::Mlx, &g).unwrap();
    assert!(
        plan.partitions
            .iter()
            .all(|p| p.side == rlx_plugin_host::partition::Side::Cpu),
        "{plan}"
    );

    // Claimed kind, unsupported variant (Activation is claimed, the fixture
    // runs only Relu): the plugin's own error comes back.
    let mut g = Graph::new("tanh");
    let x = g.input("x", Shape::new(&[2, 4], DType::F32));
    let y = g.tanh(x);
    g.set_outputs(vec![y]);
    let err = execute(Device::Mlx, &g, &random_data(&g, 0).unwrap(), 1).unwrap_err();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains("fixture plugin:"), "{err}");
}

#[test]
fn wrong_param_sizes_are_errors_not_crashes() {
    setup();
    let model = matmul_relu_add(2, 3, 4);
    let mut data: ModelData = random_data(&model.graph, 1).unwrap();
    data.params[0].1.pop();
    let err = execute(Device::Mlx, &model.graph, &data, 1).unwrap_err();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains("binding params"), "{err}");
}
