//! `rlx-host bench` as a user runs it: the binary, a builtin model, the
//! CPU backend and the MLX plugin in every mode, each measured in its own
//! child process. Nothing here asserts on speed.

mod common;

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

/// `rlx-host --plugin <mlx dir> bench ARGS`, discovery otherwise limited
/// to the executable's own plugins directory.
fn bench(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .arg("--plugin")
        .arg(common::mlx_plugin_dir())
        .arg("bench")
        .args(args)
        .env_remove("RLX_BACKEND_PLUGINS")
        .env("RLX_HOME", home.path())
        // The machine's shared kernel cache, not one per temporary home
        // (see the kernel cache test below for that rule).
        .env("TMPDIR", std::env::temp_dir())
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("spawn rlx-host")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failure: non-zero exit and exactly one stderr line containing each
/// of `must_contain`.
fn assert_one_line_failure(o: &Output, must_contain: &[&str]) {
    let err = stderr(o);
    assert!(
        !o.status.success(),
        "expected a failure; stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "stderr must be one line, got:\n{err}");
    assert!(lines[0].starts_with("rlx-host: error: "), "{err}");
    for m in must_contain {
        assert!(lines[0].contains(m), "{m:?} not in: {err}");
    }
}

#[test]
fn exp4_gives_a_row_per_backend_and_mode_with_sound_figures() {
    let o = bench(&["exp4", "--runs", "3", "--warmup", "1", "--json"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    let v: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{out}"));
    assert_eq!(v["model"], "exp4");
    assert_eq!(v["runs"], 3);
    assert!(v["env"].get("RLX_MLX_TF32").is_some(), "{v}");
    assert!(
        v["plugins"][0]["devices"]
            .as_array()
            .is_some_and(|d| !d.is_empty()),
        "{v}"
    );
    let rows = v["rows"].as_array().expect("rows");
    let requested: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["requested"].as_str())
        .collect();
    assert_eq!(
        requested,
        ["cpu", "mlx:lazy", "mlx:eager", "mlx:compiled"],
        "{v}"
    );
    for r in rows {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["error"].is_null(), "{r}");
        let runs: Vec<f64> = r["runs_ms"]
            .as_array()
            .expect("runs_ms")
            .iter()
            .map(|x| x.as_f64().expect("a run's time"))
            .collect();
        assert_eq!(runs.len(), 3, "{r}");
        let median = r["median_ms"].as_f64().expect("median_ms");
        let min = r["min_ms"].as_f64().expect("min_ms");
        let max = runs.iter().copied().fold(f64::MIN, f64::max);
        assert!(median <= max && min <= median, "{r}");
        assert!(r["compile_ms"].as_f64().is_some_and(|c| c >= 0.0), "{r}");
        assert!(r["first_run_ms"].as_f64().is_some(), "{r}");
        assert!(r["ratio_vs_cpu"].as_f64().is_some(), "{r}");
        let err = r["max_abs_err"].as_f64().expect("max_abs_err");
        assert!(err < 1e-6, "error against the cpu row: {r}");
        assert_eq!(r["reference"], "cpu", "{r}");
        if cfg!(target_os = "linux") {
            assert!(r["peak_rss_bytes"].as_u64().is_some_and(|b| b > 0), "{r}");
        }
    }
}

#[test]
fn the_table_names_every_backend() {
    let o = bench(&[
        "exp4",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--backends",
        "cpu,mlx:eager",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    for h in [
        "BACKEND",
        "MEDIAN MS",
        "PEAK RSS",
        "MAX ABS ERR",
        "RLX_MLX_TF32",
        "devices:",
    ] {
        assert!(out.contains(h), "{h:?} not in:\n{out}");
    }
    assert!(out.contains("reference") && out.contains("eager"), "{out}");
}

#[test]
fn a_model_that_does_not_exist_fails_with_one_line() {
    let o = bench(&["no-such-model.rlxmodel"]);
    assert_one_line_failure(&o, &["no-such-model.rlxmodel", "builtin"]);
}

#[test]
fn an_unknown_backend_or_mode_is_a_clear_error() {
    let o = bench(&["exp4", "--backends", "cpu,no-such-plugin"]);
    assert_one_line_failure(&o, &["--backends", "no plugin named \"no-such-plugin\""]);
    let o = bench(&["exp4", "--backends", "mlx:fast"]);
    assert_one_line_failure(&o, &["unknown mode \"fast\""]);
}

#[test]
fn a_backend_that_fails_is_a_row_with_its_error_and_a_non_zero_exit() {
    // The fixture plugin lowers matmul, relu and add only: exp4's Exp
    // fails to compile in the child.
    let fixture = common::fixture_path();
    let o = bench(&[
        "exp4",
        "--runs",
        "2",
        "--backends",
        "cpu,fixture:lazy",
        "--json",
        "--plugin",
        fixture.to_str().unwrap(),
    ]);
    assert_one_line_failure(&o, &["fixture:lazy"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("the JSON object still comes");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows[0]["status"], "ok", "{v}");
    assert_eq!(rows[1]["status"], "failed", "{v}");
    let e = rows[1]["error"].as_str().expect("the child's error");
    assert!(e.contains("fixture") && e.contains("Activation"), "{e}");
}

#[test]
fn peers_rows_join_the_table_and_missing_packages_are_skipped_rows() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/bench_peers.py");
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .args(["bench", "exp4", "--runs", "2", "--warmup", "0"])
        .args(["--backends", "cpu", "--peers", "--json"])
        .env("RLX_BENCH_PEERS", &script)
        .env_remove("RLX_BACKEND_PLUGINS")
        .env("RLX_HOME", home.path())
        .output()
        .expect("spawn rlx-host");
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let rows = v["rows"].as_array().expect("rows");
    let peers: Vec<&Value> = rows.iter().filter(|r| r["source"] == "peer").collect();
    let names: Vec<&str> = peers
        .iter()
        .filter_map(|r| r["requested"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "peer:python-mlx:eager",
            "peer:python-mlx:compiled",
            "peer:python-mlx:compiled+io",
            "peer:torch:eager",
            "peer:torch:eager+io"
        ],
        "{v}"
    );
    for r in peers {
        match r["status"].as_str() {
            Some("ok") => {
                assert!(r["median_ms"].as_f64().is_some(), "{r}");
                assert!(r["max_abs_err"].as_f64().is_some_and(|e| e < 1e-6), "{r}");
            }
            Some("skipped") => {
                let e = r["error"].as_str().unwrap_or_default();
                assert!(
                    e.starts_with("skipped: ") && e.ends_with("not installed"),
                    "{r}"
                );
            }
            _ => panic!("a peer row is neither ok nor skipped: {r}"),
        }
    }
}

#[test]
fn a_child_past_the_timeout_is_killed_and_its_row_fails() {
    // No child starts, loads the MLX plugin (libmlx alone is tens of MiB
    // to map) and compiles in 1 ms; a CPU-only child might.
    let o = bench(&[
        "exp4",
        "--runs",
        "2",
        "--backends",
        "mlx:lazy",
        "--timeout",
        "0.001",
        "--json",
    ]);
    assert_one_line_failure(&o, &["mlx:lazy"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("the JSON object still comes");
    let row = &v["rows"][0];
    assert_eq!(row["status"], "failed", "{v}");
    let e = row["error"].as_str().expect("the error");
    assert!(e.contains("--timeout 0.001 s"), "{e}");

    let o = bench(&["exp4", "--timeout", "0"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a positive number of seconds"),
        "{}",
        stderr(&o)
    );
}

/// Every file under `dir`, with its modification time.
fn files_with_mtimes(dir: &std::path::Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push((p, e.metadata().unwrap().modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn compiled_kernels_are_kept_in_rlx_home_and_reused_by_the_next_process() {
    let home = tempfile::tempdir().unwrap();
    let model = home.path().join("model.rlxmodel");
    let m = rlx_host::models::matmul_relu_add(4, 8, 6);
    std::fs::write(&model, rlx_ir::rlxmodel::to_text(&m.graph).unwrap()).unwrap();
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_rlx-host"))
            .arg("--plugin")
            .arg(common::mlx_plugin_dir())
            .args([
                "bench",
                model.to_str().unwrap(),
                "--backends",
                "mlx:compiled",
            ])
            .args(["--runs", "1", "--warmup", "0", "--json"])
            .env_remove("RLX_BACKEND_PLUGINS")
            .env_remove("TMPDIR")
            // Its two runs build the kernels in the first: in the
            // background the build would start with the second and be
            // cancelled when the process ends.
            .env("RLX_MLX_BACKGROUND_COMPILE", "0")
            .env("RLX_HOME", home.path())
            .output()
            .expect("spawn rlx-host")
    };
    let first = run();
    assert!(first.status.success(), "{}", stderr(&first));
    let cache = home.path().join("cache").join("mlx");
    let after_first = files_with_mtimes(&cache);
    assert!(
        after_first
            .iter()
            .any(|(p, _)| p.extension().is_some_and(|e| e == "so")),
        "no compiled kernel under {}: {after_first:?}",
        cache.display()
    );
    // The second process finds every kernel there: nothing is written.
    let second = run();
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(files_with_mtimes(&cache), after_first);
}
