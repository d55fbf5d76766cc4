//! Raw-ABI faults (issue #14): "c-faulty", the C plugin built with
//! `-DRLX_C_PLUGIN_FAULTS`, breaks the ABI's rules where asked: tables with
//! an absurd count, a null entry or a broken string at load; and, after
//! load, a compile that reports success without writing its executable, a
//! signature with an impossible rank, a run that reports success without
//! writing its outputs or writes one without data, a status code no ABI
//! version defines, and an `executable_device` that writes nothing. Each is
//! a precise error in the host (a rejected candidate at load), which goes
//! on; the plugin (when it loaded) and the C plugin beside it keep working.

use rlx_plugin_api::{HostTensor, Mode, StatusCode};
use rlx_plugin_loader::{CandidateState, DiscoveryConfig, LoadError, LoadedPlugin, PluginSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn artifacts() -> PathBuf {
    PathBuf::from(env!("RLX_C_ARTIFACTS")).join("c-plugins")
}

/// RLX_C_FAULT is read by the plugin while it loads: one load at a time.
static ENV: Mutex<()> = Mutex::new(());

/// A fresh copy of c-faulty (a fresh library instance) loaded with
/// `RLX_C_FAULT=fault` (or none).
fn load_copy(fault: Option<&str>) -> (tempfile::TempDir, PluginSet) {
    let _one = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("librlx_c_faulty.so");
    std::fs::copy(artifacts().join("faulty/librlx_c_faulty.so"), &lib).unwrap();
    match fault {
        Some(f) => std::env::set_var("RLX_C_FAULT", f),
        None => std::env::remove_var("RLX_C_FAULT"),
    }
    let set = PluginSet::load(&DiscoveryConfig {
        explicit: vec![lib],
        ..Default::default()
    });
    std::env::remove_var("RLX_C_FAULT");
    (dir, set)
}

fn c_demo() -> Arc<LoadedPlugin> {
    let set = PluginSet::load(&DiscoveryConfig {
        explicit: vec![artifacts().join("1.6/librlx_c_plugin.so")],
        ..Default::default()
    });
    set.get("c-demo").expect("c-demo loads")
}

#[test]
fn malformed_tables_at_load_reject_the_candidate_with_the_reason() {
    let cases = [
        ("ops_huge_count", "1099511627776"),
        ("ops_null_entry", "op list entry 1 is null"),
        (
            "lowering_bad_string",
            "lowering entry 0 has no op kind (a null pointer with length 5)",
        ),
    ];
    for (fault, says) in cases {
        let (_dir, set) = load_copy(Some(fault));
        assert_eq!(set.candidates.len(), 1);
        let why = match &set.candidates[0].state {
            CandidateState::Rejected(e @ LoadError::InvalidTable { .. }) => e.to_string(),
            _ => panic!("{fault}: {}", set.candidates[0].reason()),
        };
        assert!(
            why.starts_with("malformed plugin table: "),
            "{fault}: {why}"
        );
        assert!(why.contains(says), "{fault}: {says:?} not in {why}");
        // The host goes on: the C plugin beside it works.
        assert_eq!(run_add(&c_demo(), "x").unwrap(), vec![2.0, 4.0]);
    }
}

/// `x + x` over f32[2], its input named `input`.
fn add_text(input: &str) -> String {
    format!(
        "rlxmodel 1\nopset 1\n\ngraph @g {{\n  %{input} = input : f32[2]\n  \
         %1 = Binary(Add) %{input}, %{input} : f32[2]\n  return %1\n}}\n"
    )
}

fn run_add(p: &Arc<LoadedPlugin>, input: &str) -> rlx_plugin_api::PluginResult<Vec<f32>> {
    let mut exe = p.compile(&add_text(input), Mode::Lazy)?;
    let x = HostTensor::from_f32(vec![2], &[1.0, 2.0])?;
    let out = exe.run(&[(input, &x)])?;
    out[0].to_f32_vec()
}

#[test]
fn broken_out_params_and_statuses_are_precise_errors() {
    let (_dir, set) = load_copy(None);
    let p = set
        .get("c-faulty")
        .expect("c-faulty loads without a table fault");
    let cases = [
        (
            "fault_compile_no_out",
            StatusCode::Internal,
            "compile succeeded but returned no executable",
        ),
        ("fault_signature_bad_ndim", StatusCode::Internal, "ndim 100"),
        (
            "fault_run_no_out",
            StatusCode::Internal,
            "plugin c-faulty reported success but returned a malformed output 0: tensor f32[] \
             has a null data pointer",
        ),
        (
            "fault_run_null_data",
            StatusCode::Internal,
            "plugin c-faulty reported success but returned a malformed output 0: tensor f32[2] \
             has a null data pointer",
        ),
        (
            "fault_run_unknown_code",
            StatusCode::Internal,
            "a status code no ABI version defines (status code 99, unknown to this host)",
        ),
    ];
    for (input, code, says) in cases {
        let e = run_add(&p, input).expect_err(input);
        assert_eq!(e.code, code, "{input}: {e}");
        assert!(e.message.contains(says), "{input}: {says:?} not in {e}");
        // The same plugin, and the one beside it, go on.
        assert_eq!(run_add(&p, "x").unwrap(), vec![2.0, 4.0]);
        assert_eq!(run_add(&c_demo(), "x").unwrap(), vec![2.0, 4.0]);
    }
    // executable_device reports success and writes nothing: no device,
    // and a warning that says so.
    let logs = rlx_plugin_tests::capture_logs(log::LevelFilter::Warn);
    let exe = p
        .compile(&add_text("fault_device_no_write"), Mode::Lazy)
        .unwrap();
    assert_eq!(exe.device(), None);
    assert!(
        logs().iter().any(|r| {
            r.message.contains(
            "plugin c-faulty: executable_device succeeded but wrote device kind 0 (nothing written)"
        )
        }),
        "{:?}",
        logs()
    );
    assert_eq!(run_add(&p, "x").unwrap(), vec![2.0, 4.0]);
}
