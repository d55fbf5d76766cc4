//! `--peers`: the same builtin graph timed in Python (MLX eager, MLX
//! `mx.compile`, PyTorch eager) by `scripts/bench_peers.py`, whose rows
//! have the shape of ours.

use super::args::BenchArgs;
use super::environment::EnvSnapshot;
use super::row::{Row, Status};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the script (first place looked).
pub const ENV_SCRIPT: &str = "RLX_BENCH_PEERS";

const SCRIPT: &str = "bench_peers.py";

/// Where the script is: `$RLX_BENCH_PEERS`, then
/// `<executable dir>/../../scripts/bench_peers.py` (the executable in a
/// workspace's `target/<profile>/`), then `./scripts/bench_peers.py`.
pub fn find_script() -> Result<PathBuf, String> {
    let mut tried: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os(ENV_SCRIPT) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p);
    }
    find_in_scripts(SCRIPT, tried)
}

/// Another script of `scripts/`, looked for where `bench_peers.py` is
/// (beside this executable's workspace, then `./scripts/`).
pub fn find_script_named(name: &str) -> Result<PathBuf, String> {
    find_in_scripts(name, Vec::new())
}

fn find_in_scripts(name: &str, mut tried: Vec<PathBuf>) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        tried.push(dir.join("..").join("..").join("scripts").join(name));
    }
    tried.push(Path::new("scripts").join(name));
    for p in &tried {
        if p.is_file() {
            return Ok(p.clone());
        }
    }
    let tried: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    Err(format!("{name} not found (looked at {})", tried.join(", ")))
}

/// The peers' rows for `args.model`. Nothing here fails the benchmark:
/// a missing script, Python or package is a row saying so. The script
/// runs with the user's environment (`env`; MLX reads `MLX_ENABLE_TF32`).
pub fn rows(args: &BenchArgs, env: &EnvSnapshot, builtin: bool) -> Vec<Row> {
    let base = Row::empty("peers", None, "peers", "peer");
    if !builtin {
        let mut r = base;
        r.status = Status::Skipped;
        r.error = Some("skipped: the Python peers time builtin models only".into());
        return vec![r];
    }
    let script = match find_script() {
        Ok(s) => s,
        Err(e) => return vec![base.failed(e)],
    };
    let mut cmd = Command::new("python3");
    env.apply(&mut cmd);
    let out = cmd
        .arg(&script)
        .args(["--model", &args.model])
        .args(["--runs", &args.runs.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .arg("--json")
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => return vec![base.failed(format!("cannot run python3 {}: {e}", script.display()))],
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().map(str::trim).find(|l| !l.is_empty());
        return vec![base.failed(format!(
            "{} exited with {}: {}",
            script.display(),
            out.status,
            last.unwrap_or("no message")
        ))];
    }
    match parse(&stdout) {
        Ok(rows) => rows,
        Err(e) => vec![base.failed(format!("{}: {e}", script.display()))],
    }
}

/// The script's `--json` output: `{"rows": [row, ...], ...}`.
fn parse(stdout: &str) -> Result<Vec<Row>, String> {
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("its output is not one JSON object: {e}"))?;
    let rows = v
        .get("rows")
        .and_then(|r| r.as_array())
        .ok_or("its output has no \"rows\" array")?;
    rows.iter()
        .map(|r| {
            let mut row = Row::from_json(r)?;
            // Whatever the script says, these rows are peers.
            row.source = "peer".into();
            Ok(row)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_output_parses_into_peer_rows() {
        let rows = parse(
            r#"{"model": "exp4", "rows": [
                {"backend": "python-mlx", "mode": "eager", "median_ms": 0.1, "status": "ok"},
                {"backend": "torch", "mode": "eager", "status": "skipped", "error": "skipped: torch not installed"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].source, "peer");
        assert_eq!(rows[1].status, Status::Skipped);
        assert!(parse("not json").is_err());
        assert!(parse("{}").is_err());
    }
}
