//! Verified unpacking of a release archive: everything or nothing. `dest` is
//! created here and, on any error (or panic), removed again, so the installer
//! never sees a half-unpacked or unverified plugin.

use crate::durable::sync_dir;
use crate::error::PackageError;
use crate::extract::{extract, Limits};
use crate::manifest::PackageManifest;
use std::fs::{self, DirBuilder, File};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Stream `archive` (a .tar.xz) into `dest` (must not exist; created, mode
/// 0700 while unpacking, 0755 once complete), checking as it goes, and return
/// the manifest.
///
/// `dest` ends up holding `manifest.json` (the archive's copy, the record of
/// what was installed) and the plugin directory `<name>/`. Refused, with an
/// error naming the entry: a first entry that is not `manifest.json`; paths
/// that are absolute, have `..`, `.` or empty components, or are not under
/// `<name>/`; hard links, devices, fifos and other types; symlinks not listed
/// with the same target in the manifest (whose targets must stay inside the
/// plugin directory); files not in the manifest, duplicates, a size or
/// SHA-256 differing from the manifest, manifest files missing from the
/// archive; more than `limits` allow; a truncated or corrupt stream. Every
/// file and directory is synced before Ok is returned.
pub fn unpack_verified(
    archive: &Path,
    dest: &Path,
    limits: &Limits,
) -> Result<PackageManifest, PackageError> {
    let file = File::open(archive).map_err(|e| PackageError::io(archive, e))?;
    unpack_into(BufReader::new(file), dest, limits)
        .map_err(|e| PackageError::new(format!("{}: {e}", archive.display())))
}

/// The same checks over an in-memory archive, unpacking into `dest` (for the fuzz target).
pub fn unpack_verified_bytes(
    archive: &[u8],
    dest: &Path,
    limits: &Limits,
) -> Result<PackageManifest, PackageError> {
    unpack_into(archive, dest, limits)
}

fn unpack_into<R: BufRead>(
    src: R,
    dest: &Path,
    limits: &Limits,
) -> Result<PackageManifest, PackageError> {
    if fs::symlink_metadata(dest).is_ok() {
        return Err(PackageError::new(format!(
            "{}: already exists (unpacking needs a new directory)",
            dest.display()
        )));
    }
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| PackageError::io(parent, e))?;
    }
    DirBuilder::new()
        .mode(0o700)
        .create(dest)
        .map_err(|e| PackageError::io(dest, e))?;
    let guard = RemoveOnFailure(Some(dest.to_path_buf()));
    let result = extract(src, dest, limits).and_then(|(manifest, dirs)| {
        make_durable(dest, &dirs)?;
        Ok(manifest)
    });
    match result {
        Ok(manifest) => {
            guard.disarm();
            Ok(manifest)
        }
        Err(err) => guard.remove(err),
    }
}

/// Syncs every created directory, deepest first, then opens `dest` to
/// everyone's reading (0755) and syncs it. Files were synced as written.
fn make_durable(dest: &Path, dirs: &[PathBuf]) -> Result<(), PackageError> {
    for dir in dirs.iter().rev() {
        sync_dir(dir)?;
    }
    fs::set_permissions(dest, fs::Permissions::from_mode(0o755))
        .map_err(|e| PackageError::io(dest, e))?;
    sync_dir(dest)
}

/// Removes the destination unless disarmed: on an error, and on a panic too.
struct RemoveOnFailure(Option<PathBuf>);

impl RemoveOnFailure {
    fn disarm(mut self) {
        self.0 = None;
    }

    /// Removes the destination now and returns `err`, noting a failed removal.
    fn remove<T>(mut self, err: PackageError) -> Result<T, PackageError> {
        let dest = self.0.take().expect("armed until used");
        match fs::remove_dir_all(&dest) {
            Ok(()) => Err(err),
            Err(e) => Err(PackageError::new(format!(
                "{err} (and removing {} failed: {e})",
                dest.display()
            ))),
        }
    }
}

impl Drop for RemoveOnFailure {
    fn drop(&mut self) {
        if let Some(dest) = self.0.take() {
            let _ = fs::remove_dir_all(dest);
        }
    }
}
