//! Putting a verified plugin directory into place, and taking it back.
//!
//! The new directory is unpacked beside the plugins directory (in the
//! installer's own area of the same RLX home, so on the same filesystem)
//! and exchanged with the installed one in one step where the system has
//! one (Linux's `renameat2(RENAME_EXCHANGE)`): a program starting at any
//! moment finds the old version or the new one, never neither. Elsewhere
//! the old directory is renamed away first, a window of microseconds in
//! which a starting program finds no plugin. A program that already loaded
//! the old version keeps running on it: its files are not rewritten, only
//! renamed, and kept until the next install.

use crate::durable::sync_dir;
use crate::PackageError;
use std::fs;
use std::path::{Path, PathBuf};

/// A directory under the installer's area, removed with what it holds
/// when dropped.
pub(super) struct Staging(PathBuf);

impl Staging {
    pub(super) fn new(work: &Path) -> Result<Staging, PackageError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Ok(Staging(
            work.join(format!("staging-{}-{nanos}", std::process::id())),
        ))
    }
    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A new directory in place, not yet final.
pub(super) struct Placed {
    target: PathBuf,
    /// Where the replaced directory is now (in the staging area), if any.
    old_at: Option<PathBuf>,
    /// Where the new one came from (for a first install's roll back).
    new_from: PathBuf,
    previous: PathBuf,
}

/// Put `new_dir` at `target`; the directory that was there moves to
/// `new_dir`'s place.
pub(super) fn swap_in(
    new_dir: &Path,
    target: &Path,
    previous: &Path,
) -> Result<Placed, PackageError> {
    let old_at = if fs::symlink_metadata(target).is_ok() {
        exchange(new_dir, target)?;
        Some(new_dir.to_path_buf())
    } else {
        fs::rename(new_dir, target).map_err(|e| PackageError::io(target, e))?;
        None
    };
    sync_dir(target.parent().expect("a plugins directory"))?;
    Ok(Placed {
        target: target.to_path_buf(),
        old_at,
        new_from: new_dir.to_path_buf(),
        previous: previous.to_path_buf(),
    })
}

impl Placed {
    /// Keep the new one; the old one becomes `previous` (replacing the one
    /// kept before).
    pub(super) fn commit(self) -> Result<(), PackageError> {
        let Some(old) = self.old_at else {
            return Ok(());
        };
        let parent = self.previous.parent().expect("install/previous");
        fs::create_dir_all(parent).map_err(|e| PackageError::io(parent, e))?;
        if fs::symlink_metadata(&self.previous).is_ok() {
            let work = parent.parent().expect("install/");
            remove_dir(&self.previous, work)?;
        }
        fs::rename(&old, &self.previous).map_err(|e| PackageError::io(&self.previous, e))?;
        sync_dir(parent)
    }

    /// Put back what was there (nothing, on a first install).
    pub(super) fn roll_back(self) -> Result<(), PackageError> {
        match &self.old_at {
            Some(old) => exchange(old, &self.target)?,
            None => fs::rename(&self.target, &self.new_from)
                .map_err(|e| PackageError::io(&self.target, e))?,
        }
        let plugins = self.target.parent().expect("a plugins directory");
        sync_dir(plugins)?;
        if self.old_at.is_none() {
            // A first install leaves no plugins directory it made behind
            // (remove_dir refuses one that holds anything).
            let _ = fs::remove_dir(plugins);
        }
        Ok(())
    }
}

/// Swap two directory entries, atomically where the system can.
fn exchange(a: &Path, b: &Path) -> Result<(), PackageError> {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let ca =
            CString::new(a.as_os_str().as_bytes()).map_err(|e| PackageError::new(e.to_string()))?;
        let cb =
            CString::new(b.as_os_str().as_bytes()).map_err(|e| PackageError::new(e.to_string()))?;
        // SAFETY: two valid C strings; renameat2 only reads them.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                ca.as_ptr(),
                libc::AT_FDCWD,
                cb.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        // A filesystem without the exchange: the two-step way below.
        if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
            return Err(PackageError::io(b, e));
        }
    }
    let aside = a.with_extension("swap");
    fs::rename(b, &aside).map_err(|e| PackageError::io(b, e))?;
    if let Err(e) = fs::rename(a, b) {
        let _ = fs::rename(&aside, b);
        return Err(PackageError::io(a, e));
    }
    fs::rename(&aside, a).map_err(|e| PackageError::io(a, e))
}

/// Remove a directory: renamed into the installer's area first (one step:
/// discovery never sees half of it), then deleted.
pub(super) fn remove_dir(dir: &Path, work: &Path) -> Result<(), PackageError> {
    let trash = Staging::new(work)?;
    fs::rename(dir, trash.path()).map_err(|e| PackageError::io(dir, e))?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    drop(trash);
    Ok(())
}
