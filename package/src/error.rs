//! The crate's one error type: a message meant for a person.
//!
//! Callers (the packager, the installer) only ever report these errors, never
//! branch on them, so a plain message that names the entry or file at fault is
//! all they need.

use std::fmt;
use std::path::Path;

/// Why packing, signing, verifying or unpacking failed; `Display` is the message.
#[derive(Debug)]
pub struct PackageError(pub String);

impl PackageError {
    /// An error with this message.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        PackageError(message.into())
    }

    /// An I/O error on `path`, naming the path so the message stands alone.
    pub(crate) fn io(path: &Path, err: std::io::Error) -> Self {
        PackageError(format!("{}: {err}", path.display()))
    }
}

impl fmt::Display for PackageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PackageError {}

impl From<std::io::Error> for PackageError {
    fn from(err: std::io::Error) -> Self {
        PackageError(err.to_string())
    }
}
