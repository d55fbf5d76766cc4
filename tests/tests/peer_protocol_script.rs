//! `scripts/peer-protocol.py`, the protocol of every "against a peer"
//! figure, driven with commands that print known figures: seven pairs at
//! least, the order alternated pair by pair, the median pair ratio with its
//! spread, a sitting whose peer is slow against its reference marked noisy
//! and run again, and failures named.

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/peer-protocol.py")
}

/// A command that logs `who` to `log` and prints `line`.
fn cmd(log: &Path, who: &str, line: &str) -> String {
    format!("echo {who} >> {} && echo '{line}'", log.display())
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("python3")
        .arg(script())
        .args(args)
        .output()
        .expect("python3 runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn pairs_alternate_and_the_median_pair_ratio_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("order");
    let ours = cmd(&log, "ours", "step 2.0 ms");
    let peer = cmd(&log, "peer", "compiled 4.0 ms then 1 ms of noise: 4.0 ms");
    let (code, out, err) = run(&["--ours", &ours, "--peer", &peer, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let r = &v["result"];
    assert_eq!(r["pairs"].as_array().unwrap().len(), 7);
    assert_eq!(r["ratio_median"].as_f64().unwrap(), 0.5);
    assert_eq!(r["peer_median_ms"].as_f64().unwrap(), 4.0);
    assert_eq!(r["noisy"], false);
    let order = std::fs::read_to_string(&log).unwrap();
    let order: Vec<&str> = order.lines().collect();
    assert_eq!(order.len(), 14);
    for (i, pair) in order.chunks(2).enumerate() {
        let want = if i % 2 == 0 {
            ["ours", "peer"]
        } else {
            ["peer", "ours"]
        };
        assert_eq!(pair, want, "pair {i}");
    }
}

#[test]
fn two_formats_are_read_through_alternatives() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("order");
    let ours = cmd(&log, "ours", "mlx:compiled 1.0 median 3.0");
    let peer = cmd(&log, "peer", "ROW train 6.0 5.0");
    let (code, out, err) = run(&[
        "--ours",
        &ours,
        "--peer",
        &peer,
        "--extract",
        r"median ([0-9.]+)|ROW train ([0-9.]+)",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["result"]["ratio_median"].as_f64().unwrap(), 0.5);
}

#[test]
fn a_slow_peer_marks_the_sitting_noisy_and_it_is_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("order");
    let ours = cmd(&log, "ours", "3 ms");
    let peer = cmd(&log, "peer", "4 ms");
    // The peer's reference is 2 ms: 4 > 1.5 x 2, every sitting noisy.
    let (code, out, _) = run(&[
        "--ours",
        &ours,
        "--peer",
        &peer,
        "--reference-peer",
        "2",
        "--sittings",
        "2",
    ]);
    assert_eq!(code, 3, "{out}");
    assert_eq!(out.matches("NOISY").count(), 2, "{out}");
    assert!(out.contains("ratio 0.750 [0.750, 0.750]"), "{out}");
    // Within 1.5x of its reference: one sitting, not noisy.
    let (code, out, _) = run(&["--ours", &ours, "--peer", &peer, "--reference-peer", "3"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("sitting").count(), 1, "{out}");
    assert!(out.contains(": ok"), "{out}");
}

#[test]
fn too_few_pairs_and_a_command_without_a_figure_are_refused() {
    let (code, _, err) = run(&["--ours", "echo 1 ms", "--peer", "echo 1 ms", "--pairs", "3"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 7"), "{err}");
    let (code, _, err) = run(&["--ours", "echo fast", "--peer", "echo 1 ms"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("printed no figure"), "{err}");
    let (code, _, err) = run(&["--ours", "exit 3", "--peer", "echo 1 ms"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("exited with 3"), "{err}");
}
