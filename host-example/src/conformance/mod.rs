//! The conformance kit: `rlx-host plugins check PATH` runs every check of
//! the plugin ABI against one plugin library and reports each as ok,
//! failed or skipped.
//!
//! Areas, one file each: [`handshake`] (loading, versions, sizes, the
//! entry), [`tables`] (descriptor, op list, lowering table), [`eager`]
//! (every lowering entry's `execute` on the graphs of [`cases`], against
//! rlx-runtime's CPU backend through [`reference`]), [`exec`] (compile / bind / run / destroy in
//! every mode), [`errors`] (documented status codes, null pointers),
//! [`status`] (status ownership) and [`custom`] (the custom-op registry).
//!
//! Checks are independent: each runs inside `catch_unwind`, so a failing
//! or panicking check is recorded and the next one still runs. The kit
//! assumes nothing Rust-specific of the plugin (a C plugin has no
//! `rust_layout`) and nothing of its op coverage (an op it cannot generate
//! a graph for, or that has no eager entry, is skipped with the reason).

pub mod cases;
mod custom;
mod devices;
mod eager;
mod errors;
mod exec;
mod handshake;
mod raw;
pub mod reference;
mod status;
mod tables;

use rlx_plugin_api::host::LoadedPlugin;
use rlx_plugin_api::{PluginResult, StatusCode};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What became of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The plugin broke the contract; why.
    Fail(String),
    /// The check did not apply or could not be set up; why.
    Skip(String),
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail(_) => "fail",
            Outcome::Skip(_) => "skip",
        }
    }

    pub fn detail(&self) -> Option<&str> {
        match self {
            Outcome::Ok => None,
            Outcome::Fail(s) | Outcome::Skip(s) => Some(s),
        }
    }

    pub fn is_fail(&self) -> bool {
        matches!(self, Outcome::Fail(_))
    }
}

impl From<Result<(), String>> for Outcome {
    fn from(r: Result<(), String>) -> Self {
        match r {
            Ok(()) => Outcome::Ok,
            Err(e) => Outcome::Fail(e),
        }
    }
}

/// One named check and its outcome.
#[derive(Clone, Debug)]
pub struct Check {
    pub name: String,
    pub outcome: Outcome,
}

/// Everything the kit found about one plugin.
#[derive(Clone, Debug)]
pub struct Report {
    /// The path as given (a library or a plugin directory).
    pub path: PathBuf,
    /// `name version` of the plugin, once loaded.
    pub plugin: Option<String>,
    /// Whether the library loaded at all (exit code 2 when not).
    pub loaded: bool,
    pub checks: Vec<Check>,
}

impl Report {
    /// (ok, failed, skipped) counts.
    pub fn counts(&self) -> (usize, usize, usize) {
        let n = |l: &str| {
            self.checks
                .iter()
                .filter(|c| c.outcome.label() == l)
                .count()
        };
        (n("ok"), n("fail"), n("skip"))
    }

    /// 0: every check ok or skipped; 1: some check failed; 2: the plugin
    /// could not even be loaded.
    pub fn exit_code(&self) -> i32 {
        if !self.loaded {
            2
        } else if self.checks.iter().any(|c| c.outcome.is_fail()) {
            1
        } else {
            0
        }
    }

    /// The check called `name`, if it ran.
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    pub fn to_json(&self) -> Value {
        let (ok, fail, skip) = self.counts();
        json!({
            "path": self.path.display().to_string(),
            "plugin": self.plugin,
            "loaded": self.loaded,
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name,
                "outcome": c.outcome.label(),
                "detail": c.outcome.detail(),
            })).collect::<Vec<_>>(),
            "summary": { "ok": ok, "fail": fail, "skip": skip },
            "exit_code": self.exit_code(),
        })
    }

    /// One line per check (`ok   NAME`, `FAIL NAME: WHY`, `skip NAME:
    /// WHY`) and a summary; or the JSON object.
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string_pretty(&self.to_json()).unwrap());
            return;
        }
        println!("checking {}", self.path.display());
        for c in &self.checks {
            println!("{}", c.line());
        }
        self.print_summary();
    }

    /// The last line of the text report.
    pub fn print_summary(&self) {
        let (ok, fail, skip) = self.counts();
        let who = match &self.plugin {
            Some(p) => format!("plugin {p}"),
            None => "the plugin did not load".into(),
        };
        println!(
            "{who}: {} checks, {ok} ok, {fail} failed, {skip} skipped",
            self.checks.len()
        );
    }
}

impl Check {
    /// `ok   NAME`, `FAIL NAME: WHY` or `skip NAME: WHY`.
    pub fn line(&self) -> String {
        match &self.outcome {
            Outcome::Ok => format!("ok   {}", self.name),
            Outcome::Fail(why) => format!("FAIL {}: {why}", self.name),
            Outcome::Skip(why) => format!("skip {}: {why}", self.name),
        }
    }
}

/// Run the whole kit on the plugin library (or plugin directory) `path`.
pub fn check(path: &Path) -> Report {
    check_with(path, &mut |_| {})
}

/// [`check`], calling `on_check` as each check completes (so a caller can
/// print progress: should a plugin crash the process, the checks before
/// the crashing one have been shown).
pub fn check_with(path: &Path, on_check: &mut dyn FnMut(&Check)) -> Report {
    let mut report = Report {
        path: path.to_path_buf(),
        plugin: None,
        loaded: false,
        checks: Vec::new(),
    };
    let (plugin, load) = match handshake::load(path) {
        Ok(p) => (Some(p), Outcome::Ok),
        Err(why) => (None, Outcome::Fail(crate::guard::one_line(&why))),
    };
    let load = Check {
        name: "handshake: load".into(),
        outcome: load,
    };
    on_check(&load);
    report.checks.push(load);
    let Some(plugin) = plugin else {
        return report;
    };
    report.loaded = true;
    let d = plugin.descriptor();
    report.plugin = Some(format!("{} {}", d.name, d.version));
    let mut kit = Kit {
        plugin,
        checks: std::mem::take(&mut report.checks),
        on_check,
    };
    handshake::run(&mut kit);
    tables::run(&mut kit);
    eager::run(&mut kit);
    exec::run(&mut kit);
    errors::run(&mut kit);
    status::run(&mut kit);
    custom::run(&mut kit);
    devices::run(&mut kit);
    report.checks = kit.checks;
    report
}

/// The running kit: the plugin under test and the checks so far.
pub(crate) struct Kit<'a> {
    plugin: Arc<LoadedPlugin>,
    checks: Vec<Check>,
    on_check: &'a mut dyn FnMut(&Check),
}

impl Kit<'_> {
    /// Run one check. A panic (in the kit, or unwinding out of the
    /// plugin's own host-side wrapper) is that check's failure, not the
    /// end of the run.
    fn record(&mut self, name: impl Into<String>, f: impl FnOnce(&Arc<LoadedPlugin>) -> Outcome) {
        let p = self.plugin.clone();
        let outcome = crate::guard::catch_quiet(|| f(&p))
            .unwrap_or_else(|msg| Outcome::Fail(format!("the check panicked: {msg}")));
        let outcome = match outcome {
            Outcome::Fail(s) => Outcome::Fail(crate::guard::one_line(&s)),
            Outcome::Skip(s) => Outcome::Skip(crate::guard::one_line(&s)),
            Outcome::Ok => Outcome::Ok,
        };
        let check = Check {
            name: name.into(),
            outcome,
        };
        (self.on_check)(&check);
        self.checks.push(check);
    }

    fn skip(&mut self, name: impl Into<String>, why: impl Into<String>) {
        let why = why.into();
        self.record(name, |_| Outcome::Skip(why));
    }
}

/// `INVALID_ARGUMENT (1)`, or the bare number for a code this host does
/// not know.
pub(crate) fn code_name(code: u32) -> String {
    let name = match code {
        1 => "INVALID_ARGUMENT",
        2 => "UNSUPPORTED",
        3 => "VERSION_MISMATCH",
        4 => "INTERNAL",
        5 => "PANIC",
        6 => "NOT_FOUND",
        7 => "ALREADY_EXISTS",
        8 => "RESOURCE_EXHAUSTED",
        _ => return format!("unknown code {code}"),
    };
    format!("{name} ({code})")
}

/// The call must fail with one of `want`.
pub(crate) fn expect_err<T>(r: PluginResult<T>, want: &[StatusCode]) -> Outcome {
    let names = || {
        want.iter()
            .map(|c| code_name(*c as u32))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    match r {
        Ok(_) => Outcome::Fail(format!("the call succeeded; expected {}", names())),
        Err(e) if want.contains(&e.code) => Outcome::Ok,
        Err(e) => Outcome::Fail(format!(
            "returned {} ({}); expected {}",
            code_name(e.code as u32),
            e.message,
            names()
        )),
    }
}
