//! Checking an unpacked plugin directory against its manifest after the fact:
//! for `rlx-host` to re-verify an installed plugin, and for the fuzz target to
//! confirm that whatever `unpack_verified` accepted is exactly what the
//! manifest describes.

use crate::digest::sha256_reader;
use crate::error::PackageError;
use crate::manifest::PackageManifest;
use crate::walk::{self, Kind};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Ok when `root/<name>/` holds exactly the manifest's files (size, SHA-256,
/// mode) and symlinks (target), and nothing else but directories.
pub fn verify_tree(root: &Path, manifest: &PackageManifest) -> Result<(), PackageError> {
    let plugin_dir = root.join(&manifest.name);
    let mut listed: BTreeMap<&str, _> = manifest
        .files
        .iter()
        .map(|f| (f.path.as_str(), f))
        .collect();
    for item in walk::list(&plugin_dir, &[])? {
        let path = format!("{}/{}", manifest.name, item.rel);
        let on_disk = plugin_dir.join(&item.rel);
        let fail = |why: String| Err(PackageError::new(format!("{}: {why}", on_disk.display())));
        if let Kind::Dir = item.kind {
            continue;
        }
        if let Some(link) = manifest.system_links.iter().find(|l| l.path == path) {
            match &item.kind {
                Kind::Symlink { target } if *target == link.target => continue,
                _ => {
                    return fail(format!(
                        "not the system link to {} it should be",
                        link.target
                    ))
                }
            }
        }
        let Some(entry) = listed.remove(path.as_str()) else {
            return fail("not in the manifest".into());
        };
        match (&item.kind, &entry.link) {
            (Kind::Symlink { target }, Some(expected)) if target == expected => {}
            (Kind::Symlink { target }, _) => {
                return fail(format!("symlink to {target:?} differs from the manifest"))
            }
            (_, Some(_)) => return fail("not a symlink, unlike the manifest".into()),
            _ => {
                let meta = fs::metadata(&on_disk).map_err(|e| PackageError::io(&on_disk, e))?;
                let mode = meta.permissions().mode() & 0o7777;
                if mode != entry.mode {
                    return fail(format!("mode {mode:o}, the manifest says {:o}", entry.mode));
                }
                let file = File::open(&on_disk).map_err(|e| PackageError::io(&on_disk, e))?;
                let (sha256, size) =
                    sha256_reader(file).map_err(|e| PackageError::io(&on_disk, e))?;
                if size != entry.size || sha256 != entry.sha256 {
                    return fail(format!(
                        "content differs from the manifest (size {size}, sha256 {sha256})"
                    ));
                }
            }
        }
    }
    match listed.into_keys().next() {
        Some(missing) => Err(PackageError::new(format!(
            "{missing}: in the manifest but missing from {}",
            root.display()
        ))),
        None => Ok(()),
    }
}
