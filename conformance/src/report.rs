//! What the kit found: each check's [`Outcome`], the [`Report`] of one
//! plugin, and its text (one line per check) and JSON forms.

use serde_json::{json, Value};
use std::path::PathBuf;

/// What became of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The plugin broke the contract; why.
    Fail(String),
    /// The check did not apply (a part the plugin does not offer) or could
    /// not be set up (an op the plugin does not claim); why.
    Skip(String),
}

impl Outcome {
    /// `ok`, `fail` or `skip`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail(_) => "fail",
            Outcome::Skip(_) => "skip",
        }
    }

    /// Why it failed or was skipped.
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
    /// `area: what` (`state: unknown state name`); stable across
    /// releases, so a test may look one up with [`Report::get`].
    pub name: String,
    pub outcome: Outcome,
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

/// Everything the kit found about one plugin.
#[derive(Clone, Debug)]
pub struct Report {
    /// The path as given (a library or a plugin directory).
    pub path: PathBuf,
    /// `name version` of the plugin, once loaded.
    pub plugin: Option<String>,
    /// Whether the library loaded at all (exit code 2 when not).
    pub loaded: bool,
    /// Every check in the order it ran.
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

    /// The checks that failed.
    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.outcome.is_fail()).collect()
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

    /// The text report: `checking PATH`, one line per check ([`Check::line`])
    /// and the summary line. What an assertion in a plugin's test prints.
    pub fn text(&self) -> String {
        let mut s = format!("checking {}\n", self.path.display());
        for c in &self.checks {
            s.push_str(&c.line());
            s.push('\n');
        }
        s.push_str(&self.summary());
        s.push('\n');
        s
    }

    /// The last line of the text report.
    pub fn summary(&self) -> String {
        let (ok, fail, skip) = self.counts();
        let who = match &self.plugin {
            Some(p) => format!("plugin {p}"),
            None => "the plugin did not load".into(),
        };
        format!(
            "{who}: {} checks, {ok} ok, {fail} failed, {skip} skipped",
            self.checks.len()
        )
    }

    /// [`Report::text`] or the JSON object, on stdout.
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string_pretty(&self.to_json()).unwrap());
        } else {
            print!("{}", self.text());
        }
    }

    /// [`Report::summary`] on stdout.
    pub fn print_summary(&self) {
        println!("{}", self.summary());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcomes: &[Outcome], loaded: bool) -> Report {
        Report {
            path: "/p/librlx_x.so".into(),
            plugin: loaded.then(|| "x 0.1.0".to_string()),
            loaded,
            checks: outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| Check {
                    name: format!("area: check {i}"),
                    outcome: o.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn skips_pass_failures_fail_and_a_plugin_that_did_not_load_is_2() {
        let ok = report(&[Outcome::Ok, Outcome::Skip("not offered".into())], true);
        assert_eq!((ok.exit_code(), ok.counts()), (0, (1, 0, 1)));
        let bad = report(&[Outcome::Ok, Outcome::Fail("why".into())], true);
        assert_eq!(bad.exit_code(), 1);
        assert_eq!(bad.failures()[0].name, "area: check 1");
        assert_eq!(
            report(&[Outcome::Fail("gone".into())], false).exit_code(),
            2
        );
    }

    #[test]
    fn the_text_is_one_line_per_check_between_header_and_summary() {
        let r = report(&[Outcome::Ok, Outcome::Skip("not offered".into())], true);
        assert_eq!(
            r.text(),
            "checking /p/librlx_x.so\nok   area: check 0\nskip area: check 1: not offered\n\
             plugin x 0.1.0: 2 checks, 1 ok, 0 failed, 1 skipped\n"
        );
        assert_eq!(r.to_json()["summary"]["skip"], 1);
    }
}
