//! Header §12: host memory for transfers. A host maps memory it owns once (a
//! batch buffer it refills every step, an output buffer it lends every run) so
//! that a plugin's copies between that memory and a device run at the bus's
//! speed: on a GPU, mapped memory is page-locked and copied by the device's DMA
//! engine, where pageable memory goes through the driver's staging copies.
//! PJRT's `PJRT_Client_DmaMap` and `PJRT_Client_DmaUnmap` are the model.

use crate::error::RlxStatus;
use abi_stable::StableAbi;
use std::ffi::c_void;

/// Plugin-owned, static; null in the root table when the plugin has no
/// use for mapped memory. Both functions are offered together.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxHostMemoryApi {
    pub struct_size: usize,
    /// Map the `len` bytes at `data` (host-owned; they must stay allocated
    /// until `dma_unmap`) for the plugin's copies. The bytes are not
    /// changed. A range that overlaps one already mapped, a null `data` or
    /// a `len` of 0 is `INVALID_ARGUMENT`; a device that cannot lock that
    /// much memory is `RESOURCE_EXHAUSTED`.
    pub dma_map: Option<unsafe extern "C" fn(data: *mut c_void, len: usize) -> *mut RlxStatus>,
    /// Undo `dma_map` of the range starting at `data` (the same pointer).
    /// `NOT_FOUND` when no mapping starts there. Must not be called while a
    /// call that reads or writes the range is running.
    pub dma_unmap: Option<unsafe extern "C" fn(data: *mut c_void) -> *mut RlxStatus>,
}

// SAFETY: the table is immutable, process-lifetime data and its functions are callable from any thread.
unsafe impl Sync for RlxHostMemoryApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxHostMemoryApi {}

crate::abi_struct!(RlxHostMemoryApi, dma_unmap: usize); // an Option<fn> is pointer-sized
