//! Header §2: statuses. A status is a boxed code and message in this
//! plugin's allocator; [`guard`] turns an error or a panic into one.

use crate::error::{panic_message, PluginError, PluginResult, RlxStatus, StatusCode};
use crate::strings::RlxStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

struct StatusBox {
    code: u32,
    message: String,
}

/// Turn an error into a status owned by the receiver (freed by `status_free`).
pub fn into_status(e: PluginError) -> *mut RlxStatus {
    Box::into_raw(Box::new(StatusBox {
        code: e.code as u32,
        message: e.message,
    })) as *mut RlxStatus
}

/// Take back a status this plugin made (null → Ok).
///
/// # Safety
/// `s` is null or came from this plugin's `status_new`, and is not used again.
pub unsafe fn take_status(s: *mut RlxStatus) -> PluginResult<()> {
    if s.is_null() {
        return Ok(());
    }
    let b = Box::from_raw(s as *mut StatusBox);
    Err(PluginError::new(StatusCode::from_raw(b.code), b.message))
}

/// Run `f`, turning an error or a panic into a status.
pub fn guard(f: impl FnOnce() -> PluginResult<()>) -> *mut RlxStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => into_status(e),
        Err(payload) => into_status(PluginError::new(
            StatusCode::Panic,
            format!("plugin panicked: {}", panic_message(&*payload)),
        )),
    }
}

pub(super) unsafe extern "C" fn status_new(code: u32, message: RlxStr) -> *mut RlxStatus {
    let code = StatusCode::from_raw(code);
    let message = message.to_string_lossy();
    into_status(PluginError::new(code, message))
}

pub(super) unsafe extern "C" fn status_code(s: *const RlxStatus) -> u32 {
    if s.is_null() {
        return 0;
    }
    (*(s as *const StatusBox)).code
}

pub(super) unsafe extern "C" fn status_message(s: *const RlxStatus) -> RlxStr {
    if s.is_null() {
        return RlxStr::EMPTY;
    }
    RlxStr::from_str(&(*(s as *const StatusBox)).message)
}

pub(super) unsafe extern "C" fn status_free(s: *mut RlxStatus) {
    if !s.is_null() {
        drop(Box::from_raw(s as *mut StatusBox));
    }
}
