//! The parent side of one measurement: start a child process for one
//! backend and turn what it printed into a [`Row`], whatever happened to
//! it.

use super::args::BenchArgs;
use super::environment::EnvSnapshot;
use super::row::Row;
use super::spec::BackendSpec;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Measure `spec` in a child `rlx-host bench --child SPEC` (this same
/// executable), which writes its outputs to `outputs`. The child gets the
/// user's environment unchanged (`env`), so variables the plugin reads
/// (e.g. `RLX_MLX_TF32`) apply to it as set. A child that fails, crashes,
/// prints no row or runs past `--timeout` gives a failed row.
pub fn measure(
    spec: &BackendSpec,
    args: &BenchArgs,
    env: &EnvSnapshot,
    plugins: &[PathBuf],
    outputs: &Path,
    verbose: u8,
) -> Row {
    let backend = match spec {
        BackendSpec::Cpu => "cpu".to_string(),
        BackendSpec::Plugin { name, .. } => name.clone(),
    };
    let base = Row::empty(&backend, spec.mode_label().as_deref(), &spec.label(), "rlx");
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
    let limit = Duration::from_secs_f64(args.timeout);
    let out = match run_with_limit(cmd, limit) {
        Ok(Some(o)) => o,
        Ok(None) => {
            return base.failed(format!(
                "the child ran past --timeout {} s and was killed",
                args.timeout
            ))
        }
        Err(e) => return base.failed(format!("cannot run {}: {e}", exe.display())),
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

/// Run `cmd` to its end, collecting stdout and stderr, or kill it once it
/// has run for `limit` (then `None`).
pub(crate) fn run_with_limit(mut cmd: Command, limit: Duration) -> std::io::Result<Option<Output>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Readers on their own threads, so a child that fills a pipe is
    // never blocked while this thread waits. They report through channels:
    // after a kill, a grandchild (a kernel compiler) may hold a pipe open,
    // and the report is not waited for beyond a second.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            let _ = tx.send(buf);
        });
        rx
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let collect = |rx: std::sync::mpsc::Receiver<Vec<u8>>| match status {
        Some(_) => rx.recv().unwrap_or_default(),
        None => rx.recv_timeout(Duration::from_secs(1)).unwrap_or_default(),
    };
    let (stdout, stderr) = (collect(stdout), collect(stderr));
    Ok(status.map(|status| Output {
        status,
        stdout,
        stderr,
    }))
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
pub(crate) fn failure_reason(out: &Output) -> String {
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
