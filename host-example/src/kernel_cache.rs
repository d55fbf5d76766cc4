//! A stable home for the kernels plugins compile at run time.
//!
//! MLX's compiled mode turns each fused kernel into a shared library with
//! the system C++ compiler (CPU) or NVRTC (CUDA), and caches the result
//! under the process's temporary directory (`$TMPDIR/mlx/<version>/cpu`,
//! `.../ptx`), keyed by the kernel's name, so a second process reuses it.
//! `/tmp` is often cleared at reboot, and MLX has no setting of its own for
//! the CPU cache, so `rlx-host` points `TMPDIR` at `$RLX_HOME/cache` (else
//! `~/.rlx/cache`) when the user has not set `TMPDIR`: the cache then lives
//! at `$RLX_HOME/cache/mlx/<version>/cpu`. A `TMPDIR` the user set wins.

use std::ffi::OsString;
use std::path::PathBuf;

/// The directory `TMPDIR` should name, or `None` to leave it as it is:
/// the user set it, or there is no home to put the cache in.
pub fn cache_dir(
    tmpdir: Option<OsString>,
    rlx_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    if tmpdir.is_some_and(|t| !t.is_empty()) {
        return None;
    }
    match (
        rlx_home.filter(|h| !h.is_empty()),
        home.filter(|h| !h.is_empty()),
    ) {
        (Some(h), _) => Some(PathBuf::from(h).join("cache")),
        (None, Some(h)) => Some(PathBuf::from(h).join(".rlx").join("cache")),
        (None, None) => None,
    }
}

/// Point `TMPDIR` at the stable cache directory (see the module docs).
///
/// Call it first thing in `main`, before any other thread exists: it sets
/// a process environment variable. A directory that cannot be made leaves
/// `TMPDIR` unset (MLX then uses `/tmp`), with a warning.
pub fn use_stable_cache() {
    let Some(dir) = cache_dir(
        std::env::var_os("TMPDIR"),
        std::env::var_os(rlx_plugin_api::host::discover::ENV_HOME),
        std::env::var_os("HOME"),
    ) else {
        return;
    };
    match std::fs::create_dir_all(&dir) {
        // Only `main` calls this, while the process has one thread.
        Ok(()) => std::env::set_var("TMPDIR", &dir),
        Err(e) => eprintln!(
            "rlx-host: warning: cannot make the kernel cache {}: {e}; compiled kernels stay in /tmp",
            dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn a_tmpdir_the_user_set_wins() {
        assert_eq!(cache_dir(os("/scratch"), os("/r"), os("/h")), None);
    }

    #[test]
    fn rlx_home_then_home() {
        assert_eq!(
            cache_dir(None, os("/r"), os("/h")),
            Some(PathBuf::from("/r/cache"))
        );
        assert_eq!(
            cache_dir(os(""), os(""), os("/h")),
            Some(PathBuf::from("/h/.rlx/cache"))
        );
        assert_eq!(cache_dir(None, None, None), None);
    }
}
