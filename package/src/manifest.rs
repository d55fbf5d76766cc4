//! `manifest.json`, the archive's first entry: what the plugin is, and the
//! size, SHA-256 and mode of every file in it. The unpacker trusts nothing in
//! the archive that this does not vouch for.

use crate::digest::is_sha256_hex;
use crate::error::PackageError;
use crate::paths::{check_member, check_name, resolve_link};
use crate::FORMAT;
use std::collections::BTreeSet;

/// Mode of a regular file with an execute bit.
pub(crate) const MODE_EXEC: u32 = 0o755;
/// Mode of any other regular file.
pub(crate) const MODE_PLAIN: u32 = 0o644;
/// Mode recorded for symlinks (their own mode means nothing on Linux/macOS).
pub(crate) const MODE_LINK: u32 = 0o777;

/// One file or symlink of the plugin directory. Directories are not listed:
/// they are implied by the paths.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileEntry {
    /// Relative to the archive root; begins with `<name>/`.
    pub path: String,
    /// Bytes of content (0 for a symlink).
    pub size: u64,
    /// Lowercase hex SHA-256 of the content ("" for a symlink).
    pub sha256: String,
    /// 0o755 or 0o644 for files, 0o777 for symlinks.
    pub mode: u32,
    /// The symlink's target, relative to the link's directory; only for symlinks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

/// A symlink to a file of the machine's own, outside the plugin directory,
/// that the installer makes after unpacking (the MLX CPU directory's
/// `blas/optimized/` links to the system OpenBLAS; where the target is
/// missing the link dangles and the loader moves on to the bundled
/// reference BLAS). Never an archive entry: links leaving the directory
/// are refused there, and these are made only by
/// [`make_system_links`](crate::make_system_links), inside the plugin
/// directory, never written through.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SystemLink {
    /// Where the link goes, relative to the archive root (under `<name>/`).
    pub path: String,
    /// The absolute path it points to.
    pub target: String,
}

/// The archive's description of itself (`manifest.json`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackageManifest {
    /// Archive layout version: [`FORMAT`].
    pub format: u32,
    /// The plugin's name, also the archive's top-level directory.
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The plugin ABI version it implements ("1.10").
    pub abi_version: String,
    /// The platform it was built for ("linux-x86_64", "linux-x86_64-cuda13").
    pub platform: String,
    /// The MLX release it bundles.
    pub mlx_version: String,
    /// The MLX backend it was built with ("cpu", "metal", "cuda").
    pub mlx_backend: String,
    /// Every file and symlink, sorted by path.
    pub files: Vec<FileEntry>,
    /// Links to the machine's own files, made at install, sorted by path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_links: Vec<SystemLink>,
}

impl PackageManifest {
    /// Pretty JSON with a trailing newline: the exact bytes stored in archives
    /// (deterministic, so packing is reproducible).
    pub fn to_json(&self) -> Vec<u8> {
        let mut out =
            serde_json::to_vec_pretty(self).expect("a manifest always serialises to JSON");
        out.push(b'\n');
        out
    }

    /// Parses and [`validate`](Self::validate)s a manifest.
    pub fn from_json(bytes: &[u8]) -> Result<Self, PackageError> {
        let manifest: PackageManifest = serde_json::from_slice(bytes)
            .map_err(|e| PackageError::new(format!("manifest.json: {e}")))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks what the unpacker relies on: the format, a plain name, every
    /// path under `<name>/` with plain components, sorted without duplicates,
    /// files with a SHA-256 and mode 0o755 or 0o644, symlinks with no content
    /// and a relative target that stays inside the plugin directory.
    pub fn validate(&self) -> Result<(), PackageError> {
        let fail = |message: String| PackageError::new(format!("manifest.json: {message}"));
        if self.format != FORMAT {
            return Err(fail(format!(
                "format {} is not supported (this build reads format {FORMAT})",
                self.format
            )));
        }
        check_name(&self.name).map_err(fail)?;
        for (field, value) in [
            ("version", &self.version),
            ("abi_version", &self.abi_version),
            ("platform", &self.platform),
        ] {
            if value.is_empty() {
                return Err(fail(format!("{field} is empty")));
            }
        }
        let links: BTreeSet<&str> = self
            .files
            .iter()
            .filter(|f| f.link.is_some())
            .map(|f| f.path.as_str())
            .collect();
        let mut seen = BTreeSet::new();
        for (i, file) in self.files.iter().enumerate() {
            let path = &file.path;
            check_member(path, &self.name, false).map_err(fail)?;
            if !seen.insert(path.as_str()) {
                return Err(fail(format!("{path}: listed twice")));
            }
            if i > 0 && self.files[i - 1].path.as_bytes() >= path.as_bytes() {
                return Err(fail(format!("{path}: files are not sorted by path")));
            }
            match &file.link {
                None => {
                    if !is_sha256_hex(&file.sha256) {
                        return Err(fail(format!(
                            "{path}: sha256 is not 64 lowercase hex digits"
                        )));
                    }
                    if file.mode != MODE_EXEC && file.mode != MODE_PLAIN {
                        return Err(fail(format!(
                            "{path}: mode {:o} (only 755 and 644 are allowed)",
                            file.mode
                        )));
                    }
                }
                Some(target) => {
                    if file.size != 0 || !file.sha256.is_empty() || file.mode != MODE_LINK {
                        return Err(fail(format!(
                            "{path}: a symlink must have size 0, sha256 \"\" and mode 777"
                        )));
                    }
                    resolve_link(path, target, |p| links.contains(p)).map_err(fail)?;
                }
            }
        }
        for (i, link) in self.system_links.iter().enumerate() {
            let path = &link.path;
            check_member(path, &self.name, false).map_err(fail)?;
            if seen.contains(path.as_str()) {
                return Err(fail(format!("{path}: both a file and a system link")));
            }
            if i > 0 && self.system_links[i - 1].path.as_bytes() >= path.as_bytes() {
                return Err(fail(format!("{path}: system links are not sorted by path")));
            }
            let t = &link.target;
            let plain = t.starts_with('/')
                && !t.contains('\0')
                && t.split('/').all(|c| c != ".." && c != ".");
            if !plain {
                return Err(fail(format!(
                    "{path}: a system link's target must be an absolute path without . or .. ({t:?})"
                )));
            }
        }
        Ok(())
    }

    /// The sum of all file sizes (saturating: a hostile manifest may overflow).
    pub(crate) fn total_size(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |sum, f| sum.saturating_add(f.size))
    }
}
