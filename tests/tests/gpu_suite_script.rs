//! `scripts/gpu-suite.py`, the GPU suite's runner, driven against this
//! test binary itself: it lists the tests, runs each one chosen in its own
//! process, counts per module, reports a failure with its exit status and
//! resumes from its results file. Two of the tests below are its targets;
//! they do nothing unless the script runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Fails when the script's run asks it to, through the environment.
#[test]
fn target_fails_when_asked() {
    if std::env::var_os("GPU_SUITE_SCRIPT_FAIL").is_some() {
        panic!("asked to fail by the gpu-suite script test");
    }
}

#[test]
fn target_passes() {}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-suite.py")
}

fn run(dir: &Path, only: &str, extra: &[&str], fail: bool) -> (i32, String) {
    let mut cmd = Command::new("python3");
    cmd.arg(script())
        .arg(std::env::current_exe().unwrap())
        .args(["--jobs", "2", "--only", only])
        .arg("--log")
        .arg(dir.join("logs"))
        .arg("--results")
        .arg(dir.join("results.txt"))
        .args(extra);
    if fail {
        cmd.env("GPU_SUITE_SCRIPT_FAIL", "1");
    } else {
        cmd.env_remove("GPU_SUITE_SCRIPT_FAIL");
    }
    let out = cmd.output().expect("python3 runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn the_script_runs_each_test_alone_reports_failures_and_resumes() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rlx-gpu-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // First run: one target fails, the other passes; exit status 1.
    let (code, text) = run(&dir, "target_", &[], true);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("FAILED (exit 101): target_fails_when_asked"),
        "{text}"
    );
    assert!(text.contains("gpu-suite: 2 tests, 2 processes"), "{text}");
    let results = std::fs::read_to_string(dir.join("results.txt")).unwrap();
    assert!(results.contains("ok target_passes "), "{results}");
    assert!(
        results.contains("FAILED target_fails_when_asked "),
        "{results}"
    );
    // Each test's own output is kept, named after it.
    let log = std::fs::read_to_string(dir.join("logs/target_fails_when_asked.txt")).unwrap();
    assert!(log.contains("asked to fail"), "{log}");

    // Resumed: only what has not passed runs, and now passes.
    let results = dir.join("results.txt");
    let (code, text) = run(
        &dir,
        "target_",
        &["--skip-ok", results.to_str().unwrap()],
        false,
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("gpu-suite: 1 tests, 1 processes"), "{text}");
    assert!(text.contains("gpu-suite: ok 1, unrun 0"), "{text}");

    // A filter that selects nothing is an error, not a silent pass.
    let (code, text) = run(&dir, "no_such_test", &[], false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("no test selected"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
