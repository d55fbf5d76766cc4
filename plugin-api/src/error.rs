//! Errors as values: status codes, the opaque status handle, and the Rust
//! error type both sides convert it to.
//!
//! Every fallible ABI function returns `*mut RlxStatus`: null means success,
//! anything else is an error the *plugin* allocated (through its own
//! `status_new`, whoever asked for it) and that the receiver releases with
//! the same plugin's `status_free`, exactly once.

use abi_stable::StableAbi;
use std::fmt;

/// Opaque error handle. Created by the plugin's `status_new`; read with
/// `status_code` / `status_message`; released with `status_free`.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxStatus {
    _private: [u8; 0],
}

/// Error codes. Stable numbers: a code is never reused for another meaning.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusCode {
    /// A caller passed something malformed: bad text, wrong shape, wrong
    /// size, a missing param, a null pointer where one is required.
    InvalidArgument = 1,
    /// A well-formed request this plugin does not implement (an op, dtype,
    /// opset, mode or capability).
    Unsupported = 2,
    /// The two sides speak incompatible ABI versions.
    VersionMismatch = 3,
    /// A failure inside the plugin or the library it wraps.
    Internal = 4,
    /// Rust code panicked inside an exported function; the panic was caught.
    Panic = 5,
    /// A lookup by name found nothing.
    NotFound = 6,
    /// A registration under a name that is already taken.
    AlreadyExists = 7,
    /// A tensor too large for the memory available (the machine's, the
    /// device's, or a limit the user set); the message names the tensor, its
    /// shape and its bytes. Nothing was allocated.
    ResourceExhausted = 8,
}

impl StatusCode {
    pub const ALL: [StatusCode; 8] = [
        StatusCode::InvalidArgument,
        StatusCode::Unsupported,
        StatusCode::VersionMismatch,
        StatusCode::Internal,
        StatusCode::Panic,
        StatusCode::NotFound,
        StatusCode::AlreadyExists,
        StatusCode::ResourceExhausted,
    ];

    /// The code for a raw number; an unknown number (from a newer peer) is
    /// read as `Internal` so it is still an error.
    pub fn from_raw(raw: u32) -> StatusCode {
        Self::ALL
            .into_iter()
            .find(|c| *c as u32 == raw)
            .unwrap_or(StatusCode::Internal)
    }

    pub fn name(self) -> &'static str {
        match self {
            StatusCode::InvalidArgument => "invalid argument",
            StatusCode::Unsupported => "unsupported",
            StatusCode::VersionMismatch => "version mismatch",
            StatusCode::Internal => "internal error",
            StatusCode::Panic => "panic",
            StatusCode::NotFound => "not found",
            StatusCode::AlreadyExists => "already exists",
            StatusCode::ResourceExhausted => "resource exhausted",
        }
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The Rust form of a status, used on both sides of the boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginError {
    pub code: StatusCode,
    pub message: String,
}

impl PluginError {
    pub fn new(code: StatusCode, message: impl Into<String>) -> Self {
        PluginError {
            code,
            message: message.into(),
        }
    }
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(StatusCode::InvalidArgument, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(StatusCode::Unsupported, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::Internal, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NotFound, message)
    }
    pub fn resource_exhausted(message: impl Into<String>) -> Self {
        Self::new(StatusCode::ResourceExhausted, message)
    }

    /// Prefix the message with where the error happened.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for PluginError {}

pub type PluginResult<T> = Result<T, PluginError>;

/// The message of a caught panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}
