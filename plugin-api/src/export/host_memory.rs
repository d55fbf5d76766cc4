//! Header §12: host memory for transfers, mapped and unmapped by the host.

use super::loaded::loaded;
use super::status::guard;
use crate::error::{PluginError, RlxStatus};
use crate::plugin::Offers;
use crate::sized::AbiStruct;
use crate::tables::RlxHostMemoryApi;
use std::ffi::c_void;

/// The table published for what the plugin offers (null: no mapping).
pub(super) fn table(offers: &Offers) -> *const RlxHostMemoryApi {
    static API: RlxHostMemoryApi = RlxHostMemoryApi {
        struct_size: RlxHostMemoryApi::STRUCT_SIZE,
        dma_map: Some(dma_map),
        dma_unmap: Some(dma_unmap),
    };
    if offers.dma_map {
        &API
    } else {
        std::ptr::null()
    }
}

unsafe extern "C" fn dma_map(data: *mut c_void, len: usize) -> *mut RlxStatus {
    guard(|| {
        if data.is_null() || len == 0 {
            return Err(PluginError::invalid_argument(format!(
                "dma_map: {} (data {data:p}, len {len})",
                if data.is_null() {
                    "data is null"
                } else {
                    "len is 0"
                }
            )));
        }
        loaded()?.plugin.dma_map(data.cast(), len)
    })
}

unsafe extern "C" fn dma_unmap(data: *mut c_void) -> *mut RlxStatus {
    guard(|| {
        if data.is_null() {
            return Err(PluginError::invalid_argument("dma_unmap: data is null"));
        }
        loaded()?.plugin.dma_unmap(data.cast())
    })
}
