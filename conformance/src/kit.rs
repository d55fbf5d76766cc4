//! The running kit: the plugin under test, the checks so far, and the
//! helpers every area uses to judge a status.

use crate::report::{Check, Outcome};
use rlx_plugin_api::{PluginResult, StatusCode};
use rlx_plugin_host::guard;
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

pub(crate) struct Kit<'a> {
    pub plugin: Arc<LoadedPlugin>,
    pub checks: Vec<Check>,
    pub on_check: &'a mut dyn FnMut(&Check),
}

impl Kit<'_> {
    /// Run one check. A panic (in the kit, or unwinding out of the
    /// plugin's own host-side wrapper) is that check's failure, not the
    /// end of the run.
    pub fn record(
        &mut self,
        name: impl Into<String>,
        f: impl FnOnce(&Arc<LoadedPlugin>) -> Outcome,
    ) {
        let p = self.plugin.clone();
        let outcome = guard::catch_quiet(|| f(&p))
            .unwrap_or_else(|msg| Outcome::Fail(format!("the check panicked: {msg}")));
        let outcome = match outcome {
            Outcome::Fail(s) => Outcome::Fail(guard::one_line(&s)),
            Outcome::Skip(s) => Outcome::Skip(guard::one_line(&s)),
            Outcome::Ok => Outcome::Ok,
        };
        let check = Check {
            name: name.into(),
            outcome,
        };
        (self.on_check)(&check);
        self.checks.push(check);
    }

    pub fn skip(&mut self, name: impl Into<String>, why: impl Into<String>) {
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
