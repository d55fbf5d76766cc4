//! The host table's `setting` (ABI 1.10), host side: a plugin asks for an
//! `RLX_*` switch and gets the value this host's `rlx_ir::env` reads, so
//! an in-process override (`rlx_ir::env::set`, or `scoped` on the calling
//! thread) reaches the plugin, whose own copy of rlx-ir never sees it.

use rlx_plugin_api::strings::RlxStr;
use std::ffi::c_void;

/// The value of `key`: `RLX_*` keys through `rlx_ir::env` (overrides
/// first, then the process environment), any other key from the process
/// environment (`rlx_ir::env::read`).
pub(crate) fn host_value(key: &str) -> Option<String> {
    rlx_ir::env::read(key).ok()
}

/// `RlxHostApi::setting`: copy at most `cap` bytes of the value into `buf`
/// and return its whole length, or -1 when unset (or the key is not UTF-8).
pub(crate) unsafe extern "C" fn host_setting(
    _ctx: *mut c_void,
    key: RlxStr,
    buf: *mut u8,
    cap: usize,
) -> i64 {
    // Never let a panic unwind into the plugin.
    std::panic::catch_unwind(|| {
        // SAFETY: `key` is borrowed for the call (docs/ABI.md §8).
        let Ok(key) = (unsafe { key.to_str() }) else {
            return -1;
        };
        let Some(v) = host_value(key) else {
            return -1;
        };
        let n = v.len().min(cap);
        if n > 0 && !buf.is_null() {
            // SAFETY: the caller lends `buf` writable for `cap` bytes.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf, n) };
        }
        i64::try_from(v.len()).unwrap_or(i64::MAX)
    })
    .unwrap_or(-1)
}
