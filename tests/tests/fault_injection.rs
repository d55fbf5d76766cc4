//! Fault injection (issue #14, in part): the `faulty` test plugin (the
//! fixture with faults on) returns malformed outputs for graphs named
//! `fault_*`: a dtype, a shape or an output count its signature does not
//! declare, an empty tensor in place of the output. The host reports each
//! precisely and keeps running; the same plugin then runs a sound graph,
//! and the ordinary fixture plugin, loaded beside it, is unaffected.

use rlx_ir::op::Activation;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::host::{LoadedPlugin, PluginSet};
use rlx_plugin_api::{HostTensor, Mode, StatusCode};
use rlx_plugin_tests::test_plugin;
use std::sync::Arc;

/// `relu(x · w + b)` as the fixture computes it, under `name`.
fn graph(name: &str) -> String {
    let f32s = |d: &[usize]| Shape::new(d, DType::F32);
    let mut g = Graph::new(name);
    let x = g.input("x", f32s(&[2, 3]));
    let w = g.param("w", f32s(&[3, 2]));
    let m = g.matmul(x, w, f32s(&[2, 2]));
    let b = g.input("b", f32s(&[2, 2]));
    let a = g.binary(rlx_ir::op::BinaryOp::Add, m, b, f32s(&[2, 2]));
    let r = g.activation(Activation::Relu, a, f32s(&[2, 2]));
    g.set_outputs(vec![r]);
    rlx_ir::rlxmodel::to_text(&g).unwrap()
}

fn load(names: &[&str]) -> Vec<Arc<LoadedPlugin>> {
    let cfg = rlx_plugin_api::host::DiscoveryConfig {
        explicit: names.iter().map(|n| test_plugin(n)).collect(),
        ..Default::default()
    };
    let set = PluginSet::load(&cfg);
    names
        .iter()
        .map(|n| {
            let want = if *n == "fixture" { "fixture" } else { "faulty" };
            set.get(want).unwrap_or_else(|| panic!("{want} loads"))
        })
        .collect()
}

/// Compile `name`'s graph on `p`, bind, run; the result of the run.
fn run(p: &Arc<LoadedPlugin>, name: &str) -> rlx_plugin_api::PluginResult<Vec<HostTensor>> {
    let mut exe = p.compile(&graph(name), Mode::Lazy)?;
    let w = HostTensor::from_f32(vec![3, 2], &[0.5, -1., 0.25, 2., -0.75, 1.])?;
    exe.bind_param("w", &w)?;
    let x = HostTensor::from_f32(vec![2, 3], &[1., 2., 3., -4., -5., -6.])?;
    let b = HostTensor::from_f32(vec![2, 2], &[0.5, -0.5, 0.5, -0.5])?;
    exe.run(&[("x", &x), ("b", &b)])
}

/// relu(x · w + b) for the values `run` binds, computed here in f64.
fn want() -> Vec<f32> {
    let (x, w, b) = (
        [1., 2., 3., -4., -5., -6.],
        [0.5, -1., 0.25, 2., -0.75, 1.],
        [0.5, -0.5, 0.5, -0.5],
    );
    let mut out = Vec::new();
    for i in 0..2 {
        for j in 0..2 {
            let s: f64 = (0..3).map(|k| x[i * 3 + k] * w[k * 2 + j]).sum::<f64>() + b[i * 2 + j];
            out.push(s.max(0.0) as f32);
        }
    }
    out
}

#[test]
fn malformed_outputs_are_reported_and_the_host_keeps_going() {
    let plugins = load(&["faulty", "fixture"]);
    let (faulty, fixture) = (&plugins[0], &plugins[1]);
    let cases = [
        (
            "fault_wrong_dtype",
            StatusCode::Internal,
            "as f16[2, 2], but its signature declares f32[2, 2]",
        ),
        (
            "fault_wrong_shape",
            StatusCode::Internal,
            "as f32[4], but its signature declares f32[2, 2]",
        ),
        (
            "fault_empty_output",
            StatusCode::Internal,
            "as f32[0], but its signature declares f32[2, 2]",
        ),
        // Caught by the plugin side of the ABI (the glue), before the host.
        (
            "fault_extra_output",
            StatusCode::InvalidArgument,
            "has 2 outputs but the caller passed 1 slots",
        ),
    ];
    for (name, code, says) in cases {
        let e = run(faulty, name).expect_err(name);
        assert_eq!(e.code, code, "{name}: {e}");
        assert!(e.message.contains(says), "{name}: {says:?} not in {e}");
        if code == StatusCode::Internal {
            assert!(e.message.contains("plugin faulty returned output 0"), "{e}");
        }
        // The same plugin still runs a sound graph, and so does the other.
        for p in [faulty, fixture] {
            let out = run(p, "sound").unwrap();
            assert_eq!(
                out[0].to_f32_vec().unwrap(),
                want(),
                "{}",
                p.descriptor().name
            );
        }
    }
}
