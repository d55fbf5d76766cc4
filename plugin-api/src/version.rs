//! ABI versions: what this build speaks, and whether two builds can talk.
//!
//! The rules (word for word in `docs/ABI.md`, "Versions"):
//! - **major** changes when an existing field or function changes meaning,
//!   type or position, or a required field is added. Host and plugin must
//!   have the same major; otherwise the load is refused and the message says
//!   which side to upgrade.
//! - **minor** changes when an optional field is appended to a table. Any
//!   minor of the same major loads, in both directions: a reader uses a
//!   field only when the writer's `struct_size` covers it, and treats a
//!   field beyond it as absent (null / zero).
//! - **patch** changes for clarifications that change no layout; it is
//!   informational.

use abi_stable::StableAbi;
use std::fmt;

/// The ABI version this build of `rlx-plugin-api` implements.
pub const ABI_VERSION: RlxAbiVersion = RlxAbiVersion {
    major: 1,
    minor: 13,
    patch: 0,
};

/// An ABI version as it crosses the boundary (three `u32`s; frozen forever,
/// so that any two majors can at least read each other's version).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RlxAbiVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl RlxAbiVersion {
    pub fn to_semver(self) -> semver::Version {
        semver::Version::new(self.major.into(), self.minor.into(), self.patch.into())
    }
}

impl fmt::Display for RlxAbiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Why two ABI versions cannot work together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionMismatch {
    /// The plugin's major is newer than the host's: upgrade the host.
    PluginTooNew {
        plugin: semver::Version,
        host: semver::Version,
    },
    /// The plugin's major is older than the host's: upgrade (rebuild) the plugin.
    PluginTooOld {
        plugin: semver::Version,
        host: semver::Version,
    },
}

impl fmt::Display for VersionMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionMismatch::PluginTooNew { plugin, host } => write!(
                f,
                "plugin ABI {plugin} is newer than host ABI {host} (major {} > {}): \
                 upgrade the host to an RLX runtime speaking plugin ABI {}.x, \
                 or install a plugin built for ABI {}.x",
                plugin.major, host.major, plugin.major, host.major
            ),
            VersionMismatch::PluginTooOld { plugin, host } => write!(
                f,
                "plugin ABI {plugin} is older than host ABI {host} (major {} < {}): \
                 upgrade the plugin to a build for ABI {}.x",
                plugin.major, host.major, host.major
            ),
        }
    }
}

impl std::error::Error for VersionMismatch {}

/// Can a plugin speaking `plugin` be used by a host speaking `host`?
/// The same rule is applied by both sides (the host in
/// `rlx_plugin_loader::load`, the plugin in the code `export_plugin!`
/// generates).
pub fn check_compatible(host: RlxAbiVersion, plugin: RlxAbiVersion) -> Result<(), VersionMismatch> {
    let (h, p) = (host.to_semver(), plugin.to_semver());
    match p.major.cmp(&h.major) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(VersionMismatch::PluginTooNew { plugin: p, host: h }),
        std::cmp::Ordering::Less => Err(VersionMismatch::PluginTooOld { plugin: p, host: h }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> RlxAbiVersion {
        RlxAbiVersion {
            major,
            minor,
            patch: 0,
        }
    }

    #[test]
    fn minors_of_one_major_are_compatible_both_ways() {
        assert_eq!(check_compatible(v(1, 0), v(1, 7)), Ok(()));
        assert_eq!(check_compatible(v(1, 7), v(1, 0)), Ok(()));
    }

    #[test]
    fn a_different_major_names_both_versions_and_the_fix() {
        let e = check_compatible(v(1, 1), v(2, 0)).unwrap_err();
        assert!(matches!(e, VersionMismatch::PluginTooNew { .. }));
        let msg = e.to_string();
        assert!(
            msg.contains("2.0.0") && msg.contains("1.1.0") && msg.contains("upgrade the host"),
            "{msg}"
        );

        let e = check_compatible(v(2, 0), v(1, 3)).unwrap_err();
        assert!(matches!(e, VersionMismatch::PluginTooOld { .. }));
        assert!(e.to_string().contains("upgrade the plugin"), "{e}");
    }
}
