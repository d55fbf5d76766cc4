//! Compiled mode builds its kernels beside the runs: runs are lazy until
//! the kernels are ready, then switch to the compiled function, the values
//! bit-identical across the switch (`rlx_plugin_tests::warmup`). Here on
//! the CPU, with each of the builders:
//! - a background thread (the CPU's default);
//! - a process of their own (`RLX_MLX_BACKGROUND_COMPILE=process`: the
//!   plugin directory's `rlx-mlx-kernel-builder`, as on a CUDA GPU), whose
//!   kernels are in MLX's on-disk cache, where this process's compiled
//!   function finds them;
//! - a builder that fails, which leaves the build to the switching run.
//!
//! The plugin reads its setting once and MLX its cache directory once, so
//! each case runs in a process of its own: this test binary, started again
//! for one test with [`ENV_CASE`] and the case's environment set.

use rlx_plugin_tests::warmup::{self, Sent};
use std::path::{Path, PathBuf};

/// Set in the process that runs a case.
const ENV_CASE: &str = "RLX_TEST_WARMUP_CASE";

/// Run `test` (this binary's test of that name) in a process of its own
/// with `envs` and a fresh kernel cache (`TMPDIR`); true in that process,
/// where the caller runs the case.
fn in_own_process(test: &str, envs: &[(&str, &str)]) -> bool {
    if std::env::var_os(ENV_CASE).is_some() {
        return true;
    }
    let cache = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env(ENV_CASE, "1")
        .env("TMPDIR", cache.path())
        .env_remove("RLX_MLX_BACKGROUND_COMPILE")
        .env_remove("RLX_MLX_KERNEL_BUILDER")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{test}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// Files under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_thread_builds_the_kernels_and_runs_switch_bit_identical() {
    if !in_own_process(
        "a_thread_builds_the_kernels_and_runs_switch_bit_identical",
        &[],
    ) {
        return;
    }
    let logs = warmup::runs_switch_bit_identical(Sent::Form);
    assert!(
        logs.iter()
            .any(|m| m.contains("kernels built in the background in")
                && !m.contains("process of their own")),
        "{logs:?}"
    );
}

#[test]
fn a_child_process_builds_the_kernels_and_runs_switch_bit_identical() {
    if !in_own_process(
        "a_child_process_builds_the_kernels_and_runs_switch_bit_identical",
        &[("RLX_MLX_BACKGROUND_COMPILE", "process")],
    ) {
        return;
    }
    // The child is handed the graph in the form the compile received.
    for sent in [Sent::Text, Sent::Form] {
        let logs = warmup::runs_switch_bit_identical(sent);
        assert!(
            logs.iter()
                .any(|m| m.contains("ms (in a process of their own, rlx-mlx-kernel-builder)")),
            "{sent:?}: {logs:?}"
        );
        assert!(
            !logs
                .iter()
                .any(|m| m.contains("building compiled mode's kernels in the background")),
            "{sent:?}: {logs:?}"
        );
    }
    // MLX's CPU kernels are shared libraries in its cache directory
    // ($TMPDIR, which the child inherited); the child wrote them.
    let cache = std::env::temp_dir();
    let built: Vec<_> = files(&cache)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "so" || e == "dylib"))
        .collect();
    assert!(!built.is_empty(), "no kernel in {}", cache.display());
}

#[test]
fn a_failing_builder_leaves_the_build_to_the_switching_run() {
    if !in_own_process(
        "a_failing_builder_leaves_the_build_to_the_switching_run",
        &[
            ("RLX_MLX_BACKGROUND_COMPILE", "process"),
            ("RLX_MLX_KERNEL_BUILDER", "/bin/false"),
        ],
    ) {
        return;
    }
    let logs = warmup::runs_switch_bit_identical(Sent::Text);
    assert!(
        logs.iter()
            .any(|m| m.contains("kernels in the background failed")
                && m.contains("/bin/false exited with")),
        "{logs:?}"
    );
}
