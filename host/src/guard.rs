//! Turning panics into errors.
//!
//! rlx-runtime's compile and run paths (and the backend adapter, whose trait
//! methods cannot return errors) report failures by panicking. [`catch`]
//! runs a closure, catches a panic and returns its message as an error,
//! while keeping the default panic hook quiet on this thread (no "thread
//! panicked at" line and no backtrace): the caller reports the error itself.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static QUIET: Cell<u32> = const { Cell::new(0) };
}

/// Install (once) a panic hook that stays silent on threads inside
/// [`catch`] and defers to the previous hook everywhere else.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| q.get()) == 0 {
                previous(info);
            }
        }));
    });
}

/// The message of a caught panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// A multi-line message as one line: trimmed lines joined with a space,
/// cut at `MAX_LINE` characters.
pub fn one_line(msg: &str) -> String {
    const MAX_LINE: usize = 600;
    let joined = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if joined.chars().count() > MAX_LINE {
        let cut: String = joined.chars().take(MAX_LINE).collect();
        format!("{cut} ...")
    } else if joined.is_empty() {
        "(empty panic message)".into()
    } else {
        joined
    }
}

/// Run `f`; a panic becomes `Err(message)` with the message as raised
/// (possibly several lines). The default hook stays quiet.
pub fn catch_raw<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install_hook();
    QUIET.with(|q| q.set(q.get() + 1));
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get() - 1));
    r.map_err(|p| {
        let msg = panic_message(&*p);
        log::debug!("caught panic: {msg}");
        msg
    })
}

/// Run `f`; a panic becomes `Err(message)`, the message flattened to one
/// line (rlx-opt's legalize panics list one offending node per line). The
/// whole message is logged at debug level.
pub fn catch_quiet<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_raw(f).map_err(|m| one_line(&m))
}

/// [`catch_quiet`] with the error prefixed by `what`.
pub fn catch<R>(what: &str, f: impl FnOnce() -> R) -> Result<R, String> {
    catch_quiet(f).map_err(|e| format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_one_line_errors() {
        let e = catch("compile", || -> () { panic!("first\n  second\n\nthird") }).unwrap_err();
        assert_eq!(e, "compile: first second third");
        assert_eq!(catch("x", || 5).unwrap(), 5);
        let long = "y".repeat(2000);
        assert!(one_line(&long).len() < 700);
    }
}
