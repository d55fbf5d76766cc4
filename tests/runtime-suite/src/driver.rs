//! The driver: one child run per mode, its output forwarded as it comes,
//! its results and the plugin's compiles read into a [`Report`].

use crate::report::{Outcome, Report};
use crate::{ENV_EVENTS, ENV_MODE, ENV_MODES};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The modes run when `RLX_SUITE_MODES` is not set.
pub const DEFAULT_MODES: &str = "lazy,eager,compiled";
/// How long one mode's run may take (`RLX_SUITE_TIMEOUT`, seconds).
const DEFAULT_TIMEOUT_S: u64 = 1500;

/// Run every mode; the process's exit status: 0 when no test failed
/// that is not expected to, and no expected failure passed.
pub fn run(args: &[String]) -> i32 {
    let modes = std::env::var(ENV_MODES).unwrap_or_else(|_| DEFAULT_MODES.into());
    let timeout = std::env::var("RLX_SUITE_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_TIMEOUT_S);
    let dir = crate::profile_dir().join("runtime-suite");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("rlx-runtime suite: {}: {e}", dir.display());
        return 2;
    }
    println!(
        "rlx-runtime {}'s own tests on the MLX plugin, from {}; modes: {modes}",
        crate::RLX_RUNTIME_VERSION,
        crate::RLX_RUNTIME_TESTS
    );
    let mut status = 0;
    for mode in modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let report = match run_mode(mode, args, &dir, Duration::from_secs(timeout)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("rlx-runtime suite ({mode}): {e}");
                status = 1;
                continue;
            }
        };
        let text = report.to_string();
        println!("{text}");
        let file = dir.join(format!("report-{mode}.txt"));
        match std::fs::write(&file, &text) {
            Ok(()) => println!("(written to {})", file.display()),
            Err(e) => eprintln!("rlx-runtime suite: {}: {e}", file.display()),
        }
        println!("{}", report.libtest_line());
        if !report.ok() {
            status = 1;
        }
    }
    status
}

fn run_mode(
    mode: &str,
    args: &[String],
    dir: &std::path::Path,
    timeout: Duration,
) -> Result<Report, String> {
    let events = dir.join(format!("events-{mode}.tsv"));
    let _ = std::fs::remove_file(&events);
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    println!("\n=== mode {mode} ===");
    let mut child = Command::new(&exe)
        .args(args)
        .env(ENV_MODE, mode)
        .env(ENV_EVENTS, &events)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let watchdog = watchdog(child.id(), timeout);
    let stdout = child.stdout.take().expect("piped stdout");
    let mut outcomes = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading the child's output: {e}"))?;
        match parse_result(&line) {
            Some((name, outcome)) => {
                match (&outcome, crate::expected::lookup(&name, mode)) {
                    (Outcome::Failed, Some(e)) => {
                        println!("test {name} ... expected failure: {}", e.reason)
                    }
                    _ => println!("{line}"),
                }
                outcomes.push((name, outcome));
            }
            // Each mode gets its own closing line, counting expected
            // failures apart ([`Report::libtest_line`]).
            None if line.starts_with("test result:") => {}
            None => println!("{line}"),
        }
    }
    let exit = child
        .wait()
        .map_err(|e| format!("waiting for the child: {e}"))?;
    watchdog.store(true, std::sync::atomic::Ordering::Relaxed);
    let compiles = std::fs::read_to_string(&events).unwrap_or_default();
    Ok(Report::new(mode, outcomes, &compiles, exit, timeout))
}

/// Kills process `pid` after `timeout` unless the returned flag is set
/// first.
fn watchdog(pid: u32, timeout: Duration) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < timeout {
            if flag.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if !flag.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!("rlx-runtime suite: the run passed {timeout:?}; killing it");
            // SAFETY: kill(2) on a pid this process started and has not
            // yet waited for (the flag is set after the wait).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    done
}

/// A libtest result line: `test NAME ... ok|FAILED|ignored[, reason]`.
pub fn parse_result(line: &str) -> Option<(String, Outcome)> {
    let rest = line.strip_prefix("test ")?;
    let (name, result) = rest.split_once(" ... ")?;
    let name = name.trim_end_matches(" - should panic").to_owned();
    let outcome = match result.trim() {
        "ok" => Outcome::Passed,
        "FAILED" => Outcome::Failed,
        r if r.starts_with("ignored") => Outcome::Ignored,
        _ => return None,
    };
    Some((name, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines() {
        assert_eq!(
            parse_result("test a::b ... ok"),
            Some(("a::b".into(), Outcome::Passed))
        );
        assert_eq!(
            parse_result("test a::b - should panic ... FAILED"),
            Some(("a::b".into(), Outcome::Failed))
        );
        assert_eq!(
            parse_result("test a ... ignored, needs a GPU"),
            Some(("a".into(), Outcome::Ignored))
        );
        assert_eq!(parse_result("test result: ok. 1 passed"), None);
        assert_eq!(parse_result("running 3 tests"), None);
    }
}
