//! One mode's report: each test's result and what it compiled on the
//! plugin, the files only macOS compiles, and the verdict.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// A test's result as libtest printed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Ignored,
}

/// What one test compiled for `Device::Mlx`.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Compiles {
    /// Graphs the plugin took whole.
    pub whole: usize,
    /// Graphs split with the CPU backend.
    pub split: usize,
    /// Why nodes of the split graphs ran on the CPU, distinct.
    pub why: Vec<String>,
}

impl Compiles {
    fn add(&mut self, cpu_nodes: usize, why: &str) {
        if cpu_nodes == 0 {
            self.whole += 1;
            return;
        }
        self.split += 1;
        for w in why.split("; ").filter(|w| !w.is_empty()) {
            if !self.why.iter().any(|x| x == w) {
                self.why.push(w.to_owned());
            }
        }
    }
}

impl fmt::Display for Compiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.whole, self.split) {
            (0, 0) => write!(f, "no graph compiled on the plugin"),
            (w, 0) => write!(f, "{w} graph(s) on the plugin whole"),
            (w, s) => write!(
                f,
                "{w} graph(s) on the plugin whole, {s} fell back in part to the CPU ({})",
                self.why.join("; ")
            ),
        }
    }
}

/// One mode's results.
pub struct Report {
    pub mode: String,
    /// Each test, in the order libtest finished them, with its compiles.
    pub tests: Vec<(String, Outcome, Compiles)>,
    /// Compiles on threads not named after a test (a test's own threads).
    pub unattributed: Compiles,
    /// The child's exit, and whether it ran past its time.
    pub exit: std::process::ExitStatus,
    pub timeout: Duration,
}

impl Report {
    /// `compiles` is the child's events file (`crate::child`).
    pub fn new(
        mode: &str,
        outcomes: Vec<(String, Outcome)>,
        compiles: &str,
        exit: std::process::ExitStatus,
        timeout: Duration,
    ) -> Report {
        let mut by_thread: BTreeMap<&str, Compiles> = BTreeMap::new();
        for line in compiles.lines() {
            let f: Vec<&str> = line.splitn(4, '\t').collect();
            let [thread, _plugin, cpu, why] = f[..] else {
                continue;
            };
            by_thread
                .entry(thread)
                .or_default()
                .add(cpu.parse().unwrap_or(0), why);
        }
        let tests: Vec<_> = outcomes
            .into_iter()
            .map(|(name, o)| {
                let c = by_thread.remove(name.as_str()).unwrap_or_default();
                (name, o, c)
            })
            .collect();
        let mut unattributed = Compiles::default();
        for c in by_thread.into_values() {
            unattributed.whole += c.whole;
            unattributed.split += c.split;
            for w in c.why {
                if !unattributed.why.contains(&w) {
                    unattributed.why.push(w);
                }
            }
        }
        Report {
            mode: mode.to_owned(),
            tests,
            unattributed,
            exit,
            timeout,
        }
    }

    fn expected(&self, name: &str) -> Option<&'static crate::expected::Expected> {
        crate::expected::lookup(name, &self.mode)
    }

    /// The failures no entry of [`crate::expected`] explains.
    pub fn unexpected_failures(&self) -> Vec<&str> {
        self.tests
            .iter()
            .filter(|(n, o, _)| *o == Outcome::Failed && self.expected(n).is_none())
            .map(|(n, _, _)| n.as_str())
            .collect()
    }

    /// Expected failures that passed: the list is stale.
    pub fn unexpected_passes(&self) -> Vec<&str> {
        self.tests
            .iter()
            .filter(|(n, o, _)| *o == Outcome::Passed && self.expected(n).is_some())
            .map(|(n, _, _)| n.as_str())
            .collect()
    }

    fn count(&self, o: Outcome) -> usize {
        self.tests.iter().filter(|t| t.1 == o).count()
    }

    /// Did the child finish (libtest exits 101 on a failed test) and leave
    /// nothing unexplained?
    pub fn ok(&self) -> bool {
        let finished = self.exit.success() || self.exit.code() == Some(101);
        finished
            && !self.tests.is_empty()
            && self.unexpected_failures().is_empty()
            && self.unexpected_passes().is_empty()
    }

    /// libtest's closing line for this mode, expected failures counted as
    /// ignored (they are listed above it, each with its reason).
    pub fn libtest_line(&self) -> String {
        let failed = self.unexpected_failures().len() + self.unexpected_passes().len();
        let expected = self.count(Outcome::Failed) - self.unexpected_failures().len();
        let passed = self.count(Outcome::Passed) - self.unexpected_passes().len();
        format!(
            "test result: {}. {passed} passed; {failed} failed; {} ignored; 0 measured; 0 filtered out",
            if self.ok() { "ok" } else { "FAILED" },
            self.count(Outcome::Ignored) + expected
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "--- rlx-runtime {}'s tests on the MLX plugin, {} mode ---",
            crate::RLX_RUNTIME_VERSION,
            self.mode
        )?;
        let mut tests: Vec<_> = self.tests.iter().collect();
        tests.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, o, c) in tests {
            let status = match (o, self.expected(name)) {
                (Outcome::Passed, None) => "passed".to_owned(),
                (Outcome::Passed, Some(_)) => "PASSED, but listed as an expected failure".into(),
                (Outcome::Failed, None) => "FAILED".into(),
                (Outcome::Failed, Some(e)) => format!("expected failure ({})", e.reason),
                (Outcome::Ignored, _) => "ignored".into(),
            };
            writeln!(f, "{name}: {status}; {c}")?;
        }
        if self.unattributed != Compiles::default() {
            writeln!(f, "(threads the tests started: {})", self.unattributed)?;
        }
        let reached = self
            .tests
            .iter()
            .filter(|t| t.2.whole + t.2.split > 0)
            .count();
        let fell_back = self.tests.iter().filter(|t| t.2.split > 0).count();
        writeln!(
            f,
            "{} tests: {} passed, {} failed ({} expected), {} ignored; {reached} compiled on the plugin, {fell_back} of them with a CPU fallback",
            self.tests.len(),
            self.count(Outcome::Passed),
            self.count(Outcome::Failed),
            self.count(Outcome::Failed) - self.unexpected_failures().len(),
            self.count(Outcome::Ignored),
        )?;
        let macos: Vec<_> = crate::files().into_iter().filter(|f| f.2 > 0).collect();
        if !macos.is_empty() {
            writeln!(
                f,
                "Not compiled here ({} tests of {} files only compile on macOS):",
                macos.iter().map(|f| f.2).sum::<usize>(),
                macos.len()
            )?;
            for (name, _, n, why) in macos {
                writeln!(f, "  {name}: {n} test(s): {why}")?;
            }
        }
        if !(self.exit.success() || self.exit.code() == Some(101)) {
            writeln!(
                f,
                "The run did not finish: {} (limit {:?}, RLX_SUITE_TIMEOUT)",
                self.exit, self.timeout
            )?;
        }
        for n in self.unexpected_failures() {
            writeln!(f, "unexpected failure: {n}")?;
        }
        for n in self.unexpected_passes() {
            writeln!(
                f,
                "unexpected pass: {n} (remove it from tests/runtime-suite/src/expected.rs)"
            )?;
        }
        Ok(())
    }
}
