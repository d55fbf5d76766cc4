//! Panics the plugin expects and turns into an error: rlx-ir's shape rules
//! index and multiply a node's attributes unchecked (a transpose's
//! permutation past its rank, a size product past `usize`), and
//! `bounds::check_declared` refuses such a node. Caught here without the
//! panic hook's report: the node is refused with the panic's message, and
//! a process with `RUST_BACKTRACE` set would otherwise print a backtrace to
//! its stderr for every such node, as if something had broken. Any other
//! panic, on any thread, still goes to the hook that was there before.

use std::cell::Cell;
use std::panic::{self, UnwindSafe};
use std::sync::Once;

thread_local! {
    /// Whether a panic on this thread is one [`catch`] expects.
    static EXPECTED: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Run `f`; a panic in it is its message as the error, and is not reported
/// by the panic hook.
pub fn catch<T>(f: impl FnOnce() -> T + UnwindSafe) -> Result<T, String> {
    HOOK.call_once(|| {
        let before = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !EXPECTED.with(Cell::get) {
                before(info);
            }
        }));
    });
    let outer = EXPECTED.with(|e| e.replace(true));
    let result = panic::catch_unwind(f);
    EXPECTED.with(|e| e.set(outer));
    result.map_err(|p| rlx_plugin_api::error::panic_message(&*p))
}
