//! One install at a time per RLX home: an advisory `flock` on
//! `install/lock`, released when the process ends however it ends.

use crate::PackageError;
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Held while alive: the lock goes with the descriptor.
pub(super) struct Lock(#[allow(dead_code)] File);

impl Lock {
    pub(super) fn take(path: &Path) -> Result<Lock, PackageError> {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| PackageError::io(path, e))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(PackageError::new(format!(
                "another install into this RLX home is running ({} is locked)",
                path.display()
            )));
        }
        Ok(Lock(f))
    }
}
