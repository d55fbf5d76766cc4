//! rlx-runtime's model API on the MLX plugin: a decoder `.rlxp` package
//! (tests/src/decoder_package.rs) opened with `{"device": "mlx"}`
//! generates the greedy tokens it generates with `{"device": "cpu"}`, in
//! every mode, with the KV caches kept in the plugin's executables (the
//! resident path: each step feeds one row on the device), across the
//! first decode bucket into the next, and speculatively.
//!
//! How the test knows the resident path was live: rlx-runtime falls back
//! to passing the caches through the host without a word, so the host
//! adapter counts what its executables do with state
//! (`rlx_plugin_host::backend::state_counters`): generating n tokens on the
//! resident path binds the caches and feeds at least n - 1 rows, and the
//! host path feeds none.

use rlx_plugin_host::backend::state_counters;
use rlx_plugin_host::backend::{register_plugin_backend, set_resident, with_mode};
use rlx_plugin_tests::decoder_package::{self as dp, DecoderConfig, DecoderPackage};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_runtime::Device;
use serde_json::json;

/// One test at a time: the counters are process-wide.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn package() -> (tempfile::TempDir, DecoderPackage) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = dp::write_decoder_package(dir.path(), &DecoderConfig::default()).expect("write");
    (dir, pkg)
}

fn tokens(pkg: &DecoderPackage, options: serde_json::Value, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut m = dp::open(pkg, options).unwrap_or_else(|e| panic!("open: {e}"));
    dp::generate(&mut *m, prompt, n).unwrap_or_else(|e| panic!("generate: {e}"))
}

#[test]
fn the_plugin_generates_the_cpu_backends_tokens_with_resident_caches() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    register_plugin_backend(mlx(), Device::Mlx, rlx_plugin_api::Mode::Lazy);
    set_resident(Device::Mlx, true);
    let (_dir, pkg) = package();
    let first_cap = pkg.config.decode_caps[0];
    // A short prompt within the first bucket, and one whose context fills
    // the last bucket to its final row (its caches move between buckets).
    let cases = [
        (vec![5u32, 17, 2, 40, 11], first_cap - 5),
        (vec![7, 1, 30, 30, 9], pkg.max_new_tokens(5, false)),
    ];
    for (prompt, n) in &cases {
        let want = tokens(&pkg, json!({"device": "cpu"}), prompt, *n);
        for mode in MODES {
            let before = state_counters();
            let got = with_mode(mode, || tokens(&pkg, json!({"device": "mlx"}), prompt, *n));
            let after = state_counters();
            assert_eq!(got, want, "[{}] prompt {prompt:?}", mode.name());
            assert!(
                after.binds > before.binds,
                "[{}] no cache was bound",
                mode.name()
            );
            assert!(
                after.row_feeds >= before.row_feeds + (*n as u64 - 1),
                "[{}] {} row feeds for {n} tokens: the caches went through the host",
                mode.name(),
                after.row_feeds - before.row_feeds
            );
        }
    }
}

#[test]
fn speculative_decoding_on_the_plugin_keeps_the_checks_caches() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    register_plugin_backend(mlx(), Device::Mlx, rlx_plugin_api::Mode::Lazy);
    set_resident(Device::Mlx, true);
    let (_dir, pkg) = package();
    for prompt in [vec![4u32, 9, 4, 9, 4, 9, 4], vec![5, 17, 2, 40, 11]] {
        let n = pkg.max_new_tokens(prompt.len(), true);
        let want = tokens(&pkg, json!({"device": "cpu"}), &prompt, n);
        for mode in MODES {
            let before = state_counters();
            let got = with_mode(mode, || {
                tokens(
                    &pkg,
                    json!({"device": "mlx", "speculative": true}),
                    &prompt,
                    n,
                )
            });
            assert_eq!(got, want, "[{}] prompt {prompt:?}", mode.name());
            assert!(
                state_counters().row_feeds > before.row_feeds,
                "[{}]",
                mode.name()
            );
        }
    }
}

#[test]
fn with_state_off_the_host_path_gives_the_same_tokens() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    register_plugin_backend(mlx(), Device::Mlx, rlx_plugin_api::Mode::Lazy);
    let (_dir, pkg) = package();
    let prompt = [5u32, 17, 2, 40, 11];
    let n = pkg.config.decode_caps[0];
    let want = tokens(&pkg, json!({"device": "cpu"}), &prompt, n);
    set_resident(Device::Mlx, false);
    let before = state_counters();
    let got = tokens(&pkg, json!({"device": "mlx"}), &prompt, n);
    let after = state_counters();
    set_resident(Device::Mlx, true);
    assert_eq!(got, want);
    assert_eq!(after.row_feeds, before.row_feeds, "state was off");
    // Speculative decoding needs the caches in the executable: refused.
    let mut m = dp::open(&pkg, json!({"device": "mlx", "speculative": true})).unwrap();
    set_resident(Device::Mlx, false);
    let e = dp::generate(&mut *m, &prompt, 4).unwrap_err();
    set_resident(Device::Mlx, true);
    assert!(e.to_string().contains("keeps no caches"), "{e}");
}
