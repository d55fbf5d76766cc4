//! Making a manifest's system links (see [`SystemLink`]) in an unpacked
//! plugin directory: inside it only, never through a symlink, never over
//! anything already there.

use crate::error::PackageError;
use crate::manifest::{PackageManifest, SystemLink};
use std::fs;
use std::path::{Component, Path};

/// Make every system link of `manifest` under `root` (the directory that
/// holds `<name>/`, as [`unpack_verified`](crate::unpack_verified) left
/// it). A link whose target this machine lacks is made all the same: it
/// dangles, and the loader moves on, as it would have in the build tree.
pub fn make_system_links(root: &Path, manifest: &PackageManifest) -> Result<(), PackageError> {
    manifest.validate()?;
    for link in &manifest.system_links {
        make_one(root, link)?;
    }
    Ok(())
}

fn make_one(root: &Path, link: &SystemLink) -> Result<(), PackageError> {
    let rel = Path::new(&link.path);
    let mut at = root.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    let (last, dirs) = parts
        .split_last()
        .ok_or_else(|| PackageError::new(format!("{}: an empty link path", link.path)))?;
    for c in dirs {
        let Component::Normal(name) = c else {
            return Err(PackageError::new(format!(
                "{}: not a plain path",
                link.path
            )));
        };
        at.push(name);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => {
                return Err(PackageError::new(format!(
                    "{}: {} is not a directory",
                    link.path,
                    at.display()
                )))
            }
            Err(_) => fs::create_dir(&at).map_err(|e| PackageError::io(&at, e))?,
        }
    }
    let Component::Normal(name) = last else {
        return Err(PackageError::new(format!(
            "{}: not a plain path",
            link.path
        )));
    };
    at.push(name);
    if fs::symlink_metadata(&at).is_ok() {
        return Err(PackageError::new(format!(
            "{}: already exists",
            at.display()
        )));
    }
    std::os::unix::fs::symlink(&link.target, &at).map_err(|e| PackageError::io(&at, e))
}
