//! Lists a plugin directory for packing: every directory, file and symlink
//! with its path relative to the directory, in byte order of that path (which
//! puts every directory before its contents), independent of the order the
//! file system returns names in.

use crate::error::PackageError;
use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

/// What a listed path is.
#[derive(Debug)]
pub(crate) enum Kind {
    Dir,
    /// A regular file; `exec` when the source has any execute bit.
    File {
        exec: bool,
    },
    /// A symlink and its target as stored on disk.
    Symlink {
        target: String,
    },
}

/// One listed path.
#[derive(Debug)]
pub(crate) struct Item {
    /// Relative to the plugin directory, `/`-separated.
    pub rel: String,
    pub kind: Kind,
}

/// Lists `dir` (not following symlinks), leaving out `exclude`d relative
/// paths and everything under them. Fails on names that are not UTF-8 and on
/// anything but directories, regular files and symlinks.
pub(crate) fn list(dir: &Path, exclude: &[String]) -> Result<Vec<Item>, PackageError> {
    let meta = fs::metadata(dir).map_err(|e| PackageError::io(dir, e))?;
    if !meta.is_dir() {
        return Err(PackageError::new(format!(
            "{}: not a directory",
            dir.display()
        )));
    }
    let exclude: Vec<&str> = exclude.iter().map(|e| e.trim_end_matches('/')).collect();
    let mut items = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(rel_dir) = pending.pop() {
        let abs_dir = dir.join(&rel_dir);
        let entries = fs::read_dir(&abs_dir).map_err(|e| PackageError::io(&abs_dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| PackageError::io(&abs_dir, e))?;
            let path = entry.path();
            let name = entry.file_name().into_string().map_err(|_| {
                PackageError::new(format!("{}: file name is not UTF-8", path.display()))
            })?;
            let rel = if rel_dir.is_empty() {
                name
            } else {
                format!("{rel_dir}/{name}")
            };
            if exclude.contains(&rel.as_str()) {
                continue;
            }
            let meta = fs::symlink_metadata(&path).map_err(|e| PackageError::io(&path, e))?;
            let file_type = meta.file_type();
            let kind = if file_type.is_dir() {
                pending.push(rel.clone());
                Kind::Dir
            } else if file_type.is_file() {
                Kind::File {
                    exec: meta.permissions().mode() & 0o111 != 0,
                }
            } else if file_type.is_symlink() {
                let target = fs::read_link(&path).map_err(|e| PackageError::io(&path, e))?;
                let target = target.into_os_string().into_string().map_err(|_| {
                    PackageError::new(format!("{}: symlink target is not UTF-8", path.display()))
                })?;
                Kind::Symlink { target }
            } else {
                return Err(PackageError::new(format!(
                    "{}: {} cannot be packed (only directories, regular files and symlinks)",
                    path.display(),
                    describe(&file_type)
                )));
            };
            items.push(Item { rel, kind });
        }
    }
    items.sort_by(|a, b| a.rel.as_bytes().cmp(b.rel.as_bytes()));
    Ok(items)
}

/// A word for a file type that cannot be packed.
fn describe(file_type: &fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "a fifo"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "a device file"
    } else {
        "this file type"
    }
}
