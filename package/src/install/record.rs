//! What was installed, from where and how it was verified: a JSON record
//! inside the installed directory (`.rlx-install.json`), so it is swapped in
//! and out with the directory it describes. And the checks of the unpacked
//! library that need no loading.

use crate::durable::write_atomic;
use crate::{PackageError, PackageManifest};
use rlx_plugin_api::version::{check_compatible, ABI_VERSION};
use rlx_plugin_loader::{plugin_library, read_manifest_file};
use std::path::Path;

/// The record's file name inside an installed plugin directory.
pub const RECORD_NAME: &str = ".rlx-install.json";

/// How an install was verified.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verification {
    /// The release's sums were signed by this trusted key (its file, or
    /// "--key" and the key id), and the archive's hash is in them.
    Signed { key: String },
    /// No key was trusted; `--allow-unsigned`. `sums` tells whether the
    /// archive's hash was still checked against an unsigned SHA256SUMS.
    Unsigned { sums: bool },
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub name: String,
    pub version: String,
    pub platform: String,
    pub base_platform: String,
    pub abi_version: String,
    pub mlx_version: String,
    pub mlx_backend: String,
    pub source: String,
    pub archive_sha256: String,
    pub verification: Verification,
    /// Seconds since the Unix epoch.
    pub installed_at: u64,
}

impl Record {
    pub(super) fn write(&self, dir: &Path) -> Result<(), PackageError> {
        let mut json = serde_json::to_vec_pretty(self).expect("a record serialises");
        json.push(b'\n');
        write_atomic(&dir.join(RECORD_NAME), &json)
    }
}

/// A plugin directory as found under `plugins/`.
#[derive(Clone, Debug)]
pub struct Installed {
    pub version: String,
    /// Its install record; `None` for a directory put there by hand.
    pub record: Option<Record>,
}

/// What is installed at `dir`: its record, else what its library's
/// embedded manifest says; `None` when there is no plugin directory.
pub fn installed(dir: &Path) -> Option<Installed> {
    if !dir.is_dir() {
        return None;
    }
    if let Some(record) = std::fs::read(dir.join(RECORD_NAME))
        .ok()
        .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
    {
        return Some(Installed {
            version: record.version.clone(),
            record: Some(record),
        });
    }
    let lib = plugin_library(dir).ok()?;
    let m = read_manifest_file(&lib).ok().flatten()?;
    Some(Installed {
        version: m.version,
        record: None,
    })
}

/// The library in the unpacked directory is what the archive's manifest
/// says, and this host can load its ABI: read from its embedded manifest,
/// nothing of it runs.
pub(super) fn check_library(dir: &Path, m: &PackageManifest) -> Result<(), PackageError> {
    let lib = plugin_library(dir).map_err(PackageError::new)?;
    let shown = lib
        .strip_prefix(dir.parent().unwrap_or(dir))
        .unwrap_or(&lib)
        .display()
        .to_string();
    let e = read_manifest_file(&lib)
        .map_err(|e| PackageError::new(format!("{shown}: {e}")))?
        .ok_or_else(|| PackageError::new(format!("{shown}: no embedded manifest")))?;
    check_compatible(ABI_VERSION, e.abi_version).map_err(|why| {
        PackageError::new(format!(
            "{shown}: ABI {} cannot load in this host (ABI {ABI_VERSION}): {why}",
            e.abi_version
        ))
    })?;
    let name_fits = e.name == m.name || m.name.starts_with(&format!("{}-", e.name));
    if !name_fits || e.version != m.version || e.abi_version.to_string() != m.abi_version {
        return Err(PackageError::new(format!(
            "{shown}: the library is {} {} (ABI {}), the archive's manifest says {} {} (ABI {})",
            e.name, e.version, e.abi_version, m.name, m.version, m.abi_version
        )));
    }
    Ok(())
}

/// Order two versions: semver where both parse, else as strings.
pub(super) fn compare(installed: &str, new: &str) -> std::cmp::Ordering {
    match (
        semver::Version::parse(installed),
        semver::Version::parse(new),
    ) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        _ => installed.cmp(new),
    }
}
