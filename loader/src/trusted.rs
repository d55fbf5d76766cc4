//! Before a plugin is loaded: is it a file only its user (or root) could
//! have put there? Loading runs the plugin's code, and its bundled
//! libraries' code, so each of them, and every directory above them, must
//! pass [`rlx_plugin_api::trust`]'s rule.

use std::path::Path;

/// The environment variable that, set to `1`, loads plugins that fail the
/// ownership and mode check (with a warning) instead of refusing them.
pub const ENV_ALLOW_INSECURE: &str = "RLX_ALLOW_INSECURE_PLUGINS";

/// Whether plugins that fail the ownership and mode check are loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TrustPolicy {
    /// Refuse them (the default).
    #[default]
    Strict,
    /// Load them anyway, logging a warning with the reason.
    AllowInsecure,
}

impl TrustPolicy {
    /// `AllowInsecure` when `RLX_ALLOW_INSECURE_PLUGINS=1`, else `Strict`.
    pub fn from_env() -> TrustPolicy {
        match std::env::var_os(ENV_ALLOW_INSECURE) {
            Some(v) if v == "1" => TrustPolicy::AllowInsecure,
            _ => TrustPolicy::Strict,
        }
    }
}

/// Why the plugin at `lib` may not be trusted, or `Ok`: the library, every
/// directory above it, and (Linux) every library its loading would map
/// from inside the plugin's own directory (its bundled runtime: `lib/`
/// and the like), with the directories between.
pub fn check_plugin_files(lib: &Path) -> Result<(), String> {
    use rlx_plugin_api::trust::{check_ancestors, check_path, Need};
    check_path(lib, Need::NotWritableByOthers)?;
    check_ancestors(lib)?;
    #[cfg(target_os = "linux")]
    {
        let canon = lib
            .canonicalize()
            .map_err(|e| format!("{}: {e}", lib.display()))?;
        let Some(home) = canon.parent() else {
            return Ok(());
        };
        let walk = super::deps::walk(lib, &super::deps::SearchEnv::from_process());
        for found in walk.libraries.iter().filter_map(|l| l.path()) {
            let Ok(dep) = found.canonicalize() else {
                continue;
            };
            let link_dir = found.parent().and_then(|d| d.canonicalize().ok());
            let inside =
                dep.starts_with(home) || link_dir.as_ref().is_some_and(|d| d.starts_with(home));
            if !inside {
                continue;
            }
            // The file (and a symlink naming it), the directories above the
            // file, and the directory holding the symlink.
            check_path(found, Need::NotWritableByOthers)?;
            check_ancestors(&dep)?;
            if let Some(d) = &link_dir {
                check_path(d, Need::NotWritableByOthers)?;
            }
        }
    }
    Ok(())
}
