//! Writes that are either whole and on disk, or absent: a release file that a
//! crash or error cut short must never be mistaken for a good one.

use crate::error::PackageError;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file written under a temporary name beside its destination and renamed
/// into place by [`commit`](Self::commit); dropped uncommitted, it is removed.
pub(crate) struct AtomicFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<File>,
}

impl AtomicFile {
    /// Starts writing `dest` (its directory must exist).
    pub(crate) fn create(dest: &Path) -> Result<Self, PackageError> {
        let name = dest
            .file_name()
            .ok_or_else(|| PackageError::new(format!("{}: not a file path", dest.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = dest.with_file_name(tmp_name);
        let file = File::create(&tmp).map_err(|e| PackageError::io(&tmp, e))?;
        Ok(AtomicFile {
            tmp,
            dest: dest.to_path_buf(),
            file: Some(file),
        })
    }

    /// The file being written.
    pub(crate) fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("the file is open until commit")
    }

    /// Flushes the file to disk, renames it into place and syncs the directory.
    pub(crate) fn commit(mut self) -> Result<(), PackageError> {
        let file = self.file.take().expect("the file is open until commit");
        file.sync_all()
            .map_err(|e| PackageError::io(&self.tmp, e))?;
        drop(file);
        fs::rename(&self.tmp, &self.dest).map_err(|e| PackageError::io(&self.dest, e))?;
        if let Some(dir) = self.dest.parent() {
            sync_dir(dir)?;
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `dest` atomically and durably.
pub(crate) fn write_atomic(dest: &Path, bytes: &[u8]) -> Result<(), PackageError> {
    let mut out = AtomicFile::create(dest)?;
    out.file()
        .write_all(bytes)
        .map_err(|e| PackageError::io(dest, e))?;
    out.commit()
}

/// Makes a directory's entries (new names, renames) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), PackageError> {
    // An empty parent (a bare file name) means the current directory.
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| PackageError::io(dir, e))
}
