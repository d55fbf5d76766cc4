//! The parent side of one measurement: start a child process for one
//! backend and turn what it printed into a [`Row`], whatever happened to
//! it.

use super::args::BenchArgs;
use super::environment::EnvSnapshot;
use super::row::Row;
use super::spec::BackendSpec;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Measure `spec` in a child `rlx-host bench --child SPEC` (this same
/// executable), which writes its outputs to `outputs`. The child gets the
/// user's environment unchanged (`env`), so variables the plugin reads
/// (e.g. `RLX_MLX_TF32`) apply to it as set. A child that fails, crashes
/// or prints no row gives a failed row.
pub fn measure(
    spec: &BackendSpec,
    args: &BenchArgs,
    env: &EnvSnapshot,
    plugins: &[PathBuf],
    outputs: &Path,
    verbose: u8,
) -> Row {
    let (backend, mode) = match spec {
        BackendSpec::Cpu => ("cpu".to_string(), None),
        BackendSpec::Plugin { name, mode } => (name.clone(), Some(mode.name())),
    };
    let base = Row::empty(&backend, mode, &spec.label(), "rlx");
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return base.failed(format!("cannot find this executable to re-run it: {e}")),
    };
    let mut cmd = Command::new(&exe);
    env.apply(&mut cmd);
    for _ in 0..verbose {
        cmd.arg("-v");
    }
    for p in plugins {
        cmd.arg("--plugin").arg(p);
    }
    cmd.arg("bench")
        .arg(&args.model)
        .args(["--runs", &args.runs.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .args(["--child", &spec.label()])
        .arg("--child-outputs")
        .arg(outputs);
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return base.failed(format!("cannot start {}: {e}", exe.display())),
    };
    if verbose > 0 {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    match (out.status.success(), row_line(&out)) {
        (true, Some(Ok(row))) => row,
        (true, Some(Err(e))) => base.failed(format!("the child's row is malformed: {e}")),
        (true, None) => base.failed("the child exited without printing a row"),
        (false, _) => base.failed(failure_reason(&out)),
    }
}

/// The last stdout line that is a JSON object: the row (a plugin or MLX
/// may print lines of its own before it).
fn row_line(out: &Output) -> Option<Result<Row, String>> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| Row::from_json(&v))
}

/// Why a child failed, in one line: its error line, else how it ended.
fn failure_reason(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let how = exit_description(&out.status);
    // The child's own error line (see main.rs), else its last line.
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("rlx-host: error: "))
        .map(str::to_string)
        .or_else(|| {
            stderr
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(|l| format!("{how}: {l}"))
        });
    line.unwrap_or(how)
}

fn exit_description(status: &std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("the child was killed by signal {sig}");
        }
    }
    match status.code() {
        Some(c) => format!("the child exited with status {c}"),
        None => "the child ended abnormally".into(),
    }
}
