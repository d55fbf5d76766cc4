//! Exports the entry symbol, which returns null.
use rlx_plugin_api::tables::{RlxHostApi, RlxPluginApi};

/// # Safety
/// Never dereferences `host`.
#[no_mangle]
pub unsafe extern "C" fn rlx_plugin_entry(_host: *const RlxHostApi) -> *const RlxPluginApi {
    std::ptr::null()
}
