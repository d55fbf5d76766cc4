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
/// the user set it, or there is no RLX home (see
/// `DiscoveryConfig::rlx_home_dir`) to put the cache in.
pub fn cache_dir(tmpdir: Option<OsString>, rlx_home_dir: Option<PathBuf>) -> Option<PathBuf> {
    if tmpdir.is_some_and(|t| !t.is_empty()) {
        return None;
    }
    rlx_home_dir.map(|h| h.join("cache"))
}

/// Point `TMPDIR` at the stable cache directory (see the module docs).
///
/// Call it first thing in `main`, before any other thread exists: it sets
/// a process environment variable. A directory that cannot be made leaves
/// `TMPDIR` unset (MLX then uses `/tmp`), with a warning.
pub fn use_stable_cache() {
    let home = rlx_plugin_loader::DiscoveryConfig::from_env(Vec::new()).rlx_home_dir();
    let Some(dir) = cache_dir(std::env::var_os("TMPDIR"), home) else {
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

/// Where a loaded MLX plugin's compiled kernels are kept, from its build
/// info (`mlx.version`, `mlx.backend`): MLX's CPU kernel cache under the
/// process's temporary directory, and on CUDA its PTX cache
/// (`MLX_PTX_CACHE_DIR`, which the CUDA plugin sets on load to `ptx-nofma`
/// beside the CPU one when the user has not; else MLX's `ptx` there).
/// Empty for a plugin that is not MLX.
pub fn mlx_cache_dirs(build_info: &[(String, String)]) -> Vec<PathBuf> {
    let get = |key: &str| {
        build_info
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let Some(version) = get("mlx.version") else {
        return Vec::new();
    };
    let cpu =
        rlx_plugin_api::trust::kernel_cache_dir(&rlx_plugin_api::machine::temp_dir(), version);
    let mut dirs = vec![cpu.clone()];
    if get("mlx.backend") == Some("cuda") {
        dirs.push(
            std::env::var_os("MLX_PTX_CACHE_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| cpu.with_file_name("ptx")),
        );
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_plugin_loader::DiscoveryConfig;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    /// The RLX home as discovery resolves it from these values.
    fn home(rlx_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
        DiscoveryConfig {
            rlx_home: rlx_home.map(PathBuf::from),
            home: home.map(PathBuf::from),
            ..Default::default()
        }
        .rlx_home_dir()
    }

    #[test]
    fn a_tmpdir_the_user_set_wins() {
        assert_eq!(
            cache_dir(os("/scratch"), home(Some("/r"), Some("/h"))),
            None
        );
    }

    #[test]
    fn rlx_home_then_home() {
        assert_eq!(
            cache_dir(None, home(Some("/r"), Some("/h"))),
            Some(PathBuf::from("/r/cache"))
        );
        assert_eq!(
            cache_dir(os(""), home(None, Some("/h"))),
            Some(PathBuf::from("/h/.rlx/cache"))
        );
        assert_eq!(cache_dir(None, home(None, None)), None);
    }
}
