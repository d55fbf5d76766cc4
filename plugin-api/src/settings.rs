//! The host's settings, plugin side (header §4): a plugin links its own copy of
//! rlx-ir, so an `RLX_*` switch the host set in process (`rlx_ir::env::set`) is
//! invisible to the plugin's `rlx_ir::env`. The host table's `setting` asks the
//! host instead. [`setting`] uses it when the host offers it and falls back to
//! this process's environment when the host does not (its table ends before
//! `setting`, or the field is null) or the plugin was not loaded through the
//! entry (a unit test calling the plugin directly).

use crate::log::HostTable;
use crate::strings::RlxStr;
use std::sync::OnceLock;

/// The host's `setting` and its context, kept at the handshake.
#[derive(Clone, Copy)]
struct HostSetting {
    ctx: *mut std::ffi::c_void,
    f: unsafe extern "C" fn(*mut std::ffi::c_void, RlxStr, *mut u8, usize) -> i64,
}

// SAFETY: the host promises `setting` is callable from any thread with its
// context (docs/ABI.md §14).
unsafe impl Send for HostSetting {}
// SAFETY: as for Send.
unsafe impl Sync for HostSetting {}

/// `None` inside: the host table has no `setting` (null, or beyond its
/// `struct_size`).
static HOST: OnceLock<Option<HostSetting>> = OnceLock::new();

/// Keep the host's `setting` (the handshake calls this once).
pub(crate) fn install(host: &HostTable) {
    let _ = HOST.get_or_init(|| {
        host.setting.map(|f| HostSetting {
            ctx: host.log_ctx,
            f,
        })
    });
}

/// Whether the host answers [`setting`] itself (its table offers the function),
/// rather than this process's environment.
pub fn host_has_settings() -> bool {
    matches!(HOST.get(), Some(Some(_)))
}

/// The value of the setting `key` (an `RLX_*` switch) as the host sees it: for
/// a host that offers the `setting` function, its answer (the Rust host's
/// `rlx_ir::env`: in-process overrides, then the process environment);
/// otherwise `std::env::var(key)`. `None` when unset (or, in the fallback, not
/// UTF-8).
pub fn setting(key: &str) -> Option<String> {
    match HOST.get() {
        Some(Some(h)) => ask_host(*h, key),
        _ => std::env::var(key).ok(),
    }
}

/// [`setting`] read as a switch, as rlx-ir's `env::flag` reads one: unset,
/// empty, `0`, `false`, `off` and `no` (any case, surrounding blanks
/// ignored) are off; any other value (`1`, `true`, `yes`, `on`, …) is on.
pub fn setting_flag(key: &str) -> bool {
    setting(key).is_some_and(|v| truthy(&v))
}

fn truthy(v: &str) -> bool {
    let s = v.trim();
    !(s.is_empty()
        || ["0", "false", "off", "no"]
            .iter()
            .any(|w| s.eq_ignore_ascii_case(w)))
}

fn ask_host(h: HostSetting, key: &str) -> Option<String> {
    let mut buf = vec![0u8; 256];
    // The value may change between two calls: ask again while it grows,
    // a few times at most.
    for _ in 0..4 {
        // SAFETY: the host's own function and context; `key` and `buf` are
        // valid for the call, `buf` writable for `buf.len()` bytes.
        let n = unsafe { (h.f)(h.ctx, RlxStr::from_str(key), buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return None;
        }
        let n = usize::try_from(n).ok()?;
        if n <= buf.len() {
            buf.truncate(n);
            return Some(String::from_utf8_lossy(&buf).into_owned());
        }
        buf = vec![0u8; n];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::truthy;

    #[test]
    fn switches_read_as_rlx_ir_reads_them() {
        for on in ["1", "true", "YES", " on ", "2", "fp16"] {
            assert!(truthy(on), "{on:?}");
        }
        for off in ["", " ", "0", "false", "OFF", "no"] {
            assert!(!truthy(off), "{off:?}");
        }
    }
}
