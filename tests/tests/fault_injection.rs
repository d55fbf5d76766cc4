//! Fault injection (issue #14): the `faulty` test plugin (the fixture with
//! faults on) returns malformed outputs for graphs named `fault_*` (a
//! dtype, a shape or an output count its signature does not declare, an
//! empty tensor in place of the output), faults at one ABI entry for a
//! graph named `fault_<entry>_<kind>` (a panic, an error, a C++ exception
//! through a cxx bridge), and has custom-op kernels that fault in the
//! registry's execute. The host reports each precisely and keeps running;
//! the same plugin then runs a sound graph, the ordinary fixture plugin
//! loaded beside it is unaffected, and no executable is left alive.

use rlx_ir::op::Activation;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::{HostTensor, Mode, StatusCode};
use rlx_plugin_loader::{LoadedPlugin, PluginSet};
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

/// The tests share the faulty plugin's count of live executables: one at a
/// time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn load(names: &[&str]) -> Vec<Arc<LoadedPlugin>> {
    let cfg = rlx_plugin_loader::DiscoveryConfig {
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

/// Both plugins run the sound graph and compute relu(x · w + b).
fn both_still_run(faulty: &Arc<LoadedPlugin>, fixture: &Arc<LoadedPlugin>) {
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

#[test]
fn malformed_outputs_are_reported_and_the_host_keeps_going() {
    let _one = serial();
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
        both_still_run(faulty, fixture);
    }
}

/// The faulty plugin's count of its live executables.
fn live(faulty: &Arc<LoadedPlugin>) -> f32 {
    let one = HostTensor::from_f32(vec![1], &[0.0]).unwrap();
    faulty
        .execute_custom_op("faulty.live_executables", &[one], 1)
        .unwrap()[0]
        .to_f32_vec()
        .unwrap()[0]
}

/// Each ABI entry in turn panics, returns an error, or has a C++
/// exception thrown through a cxx bridge (as the MLX shim's calls can):
/// the host gets the precise error from the call that faulted, the same
/// plugin and the fixture beside it keep working, and no executable is
/// left alive. A panic in `drop` has no status to carry it: the host goes
/// on, and the plugin logs it.
#[test]
fn a_fault_at_each_entry_is_reported_and_nothing_leaks() {
    let _one = serial();
    let logs = rlx_plugin_tests::capture_logs(log::LevelFilter::Error);
    let plugins = load(&["faulty", "fixture"]);
    let (faulty, fixture) = (&plugins[0], &plugins[1]);
    let base = live(faulty);
    let mut tried = 0;
    for entry in ["compile", "signature", "device", "bind", "run", "drop"] {
        for kind in ["panic", "error", "cxx"] {
            // signature, device and drop cannot return an error.
            if kind != "panic" && matches!(entry, "signature" | "device" | "drop") {
                continue;
            }
            tried += 1;
            let name = format!("fault_{entry}_{kind}");
            let got = run(faulty, &name);
            if entry == "drop" {
                assert_eq!(
                    got.expect("a drop fault leaves the run alone")[0]
                        .to_f32_vec()
                        .unwrap(),
                    want()
                );
                assert!(
                    logs().iter().any(|r| r.message.contains(
                        "the executable panicked while it was dropped: injected panic in drop"
                    )),
                    "{:?}",
                    logs()
                );
            } else {
                let e = got.expect_err(&name);
                let (code, says) = match kind {
                    "panic" => (
                        StatusCode::Panic,
                        format!("plugin panicked: injected panic in {entry}"),
                    ),
                    "error" => (StatusCode::Internal, format!("injected error in {entry}")),
                    _ => (
                        StatusCode::Internal,
                        format!("C++ exception: injected C++ exception in {entry}"),
                    ),
                };
                assert_eq!(e.code, code, "{name}: {e}");
                assert!(e.message.contains(&says), "{name}: {says:?} not in {e}");
            }
            assert_eq!(live(faulty), base, "{name} left an executable alive");
            both_still_run(faulty, fixture);
        }
    }
    assert_eq!(tried, 12);
}

/// The registry's execute entry: a kernel that panics, fails, throws a
/// C++ exception or returns two outputs for one.
#[test]
fn a_faulting_custom_op_kernel_is_reported_and_the_registry_keeps_working() {
    let _one = serial();
    let plugins = load(&["faulty"]);
    let faulty = &plugins[0];
    let x = HostTensor::from_f32(vec![2], &[1.0, 2.0]).unwrap();
    let cases = [
        (
            "faulty.kernel_panics",
            StatusCode::Panic,
            "injected panic in a custom-op kernel",
        ),
        (
            "faulty.kernel_errors",
            StatusCode::Internal,
            "injected error in a custom-op kernel",
        ),
        (
            "faulty.kernel_throws",
            StatusCode::Internal,
            "C++ exception: injected C++ exception in a custom-op kernel",
        ),
        (
            "faulty.kernel_two_outputs",
            StatusCode::Internal,
            "custom op \"faulty.kernel_two_outputs\" declares 1 outputs but its kernel returned 2",
        ),
    ];
    for (op, code, says) in cases {
        let e = faulty
            .execute_custom_op(op, std::slice::from_ref(&x), 1)
            .expect_err(op);
        assert_eq!(e.code, code, "{op}: {e}");
        assert!(e.message.contains(says), "{op}: {says:?} not in {e}");
        let out = faulty
            .execute_custom_op("fixture.scale2", std::slice::from_ref(&x), 1)
            .unwrap();
        assert_eq!(out[0].to_f32_vec().unwrap(), vec![2.0, 4.0]);
    }
}
