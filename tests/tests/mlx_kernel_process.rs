//! `RLX_MLX_BACKGROUND_COMPILE=process`: compiled mode's kernels are built
//! in a process of their own (the plugin directory's
//! `rlx-mlx-kernel-builder`), as on a CUDA GPU, here on the CPU: runs are
//! lazy until the child has exited, then switch to the compiled function,
//! bit-identical across the switch; the kernels the child built are in
//! MLX's on-disk cache, where this process's compiled function found them.
//! A builder that fails leaves the build to the switching run, with the
//! same values. Its own test binary: the setting is read once, and MLX's
//! kernel cache points at a fresh directory; the failing builder's test
//! runs in a process of its own (this binary, started again).

use rlx_plugin_tests::warmup;
use std::sync::Mutex;

/// Held while a test changes this process's environment or starts a
/// process (which reads it): the two must not overlap.
static ENV: Mutex<()> = Mutex::new(());

/// Set in the process the failing builder's test starts.
const ENV_FAILING: &str = "RLX_TEST_FAILING_BUILDER";

/// Files under `dir`, recursively.
fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
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
fn a_child_process_builds_the_kernels_and_runs_switch_bit_identical() {
    if std::env::var_os(ENV_FAILING).is_some() {
        return; // the other test's process
    }
    let cache = {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let cache = warmup::cold_kernel_cache();
        // SAFETY: set before the plugin is loaded (below), which reads it
        // once, and while no other thread reads the environment.
        unsafe { std::env::set_var("RLX_MLX_BACKGROUND_COMPILE", "process") };
        cache
    };
    let logs = warmup::runs_switch_bit_identical();
    assert!(
        logs.iter()
            .any(|m| { m.contains("ms (in a process of their own, rlx-mlx-kernel-builder)") }),
        "{logs:?}"
    );
    // MLX's CPU kernels are shared libraries in its cache directory; the
    // child wrote them (this process built none: the switch found them).
    let built: Vec<_> = files(cache.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "so" || e == "dylib"))
        .collect();
    assert!(!built.is_empty(), "no kernel in {}", cache.path().display());
    assert!(
        !logs
            .iter()
            .any(|m| m.contains("building compiled mode's kernels in the background")),
        "{logs:?}"
    );
}

#[test]
fn a_failing_builder_leaves_the_build_to_the_switching_run() {
    if std::env::var_os(ENV_FAILING).is_none() {
        let cache = tempfile::tempdir().unwrap();
        let out = {
            let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "a_failing_builder_leaves_the_build_to_the_switching_run",
                    "--nocapture",
                ])
                .env(ENV_FAILING, "1")
                .env("RLX_MLX_BACKGROUND_COMPILE", "process")
                .env("RLX_MLX_KERNEL_BUILDER", "/bin/false")
                .env("TMPDIR", cache.path())
                .output()
                .unwrap()
        };
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let logs = warmup::runs_switch_bit_identical();
    assert!(
        logs.iter()
            .any(|m| m.contains("kernels in the background failed")
                && m.contains("/bin/false exited with")),
        "{logs:?}"
    );
}
