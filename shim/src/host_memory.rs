//! Host memory mapped for transfers (the ABI's `host_memory` table): the ranges
//! a host maps so that the GPU copies them with its DMA engine
//! (`src/host_memory.cc`).

#[cxx::bridge(namespace = "rlx")]
mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/host_memory.h");

        fn dma_map(data: usize, len: usize) -> Result<u32>;
        fn dma_unmap(data: usize) -> Result<u32>;
    }
}

/// Why a mapping call changed nothing.
#[derive(Debug)]
pub enum DmaError {
    /// The range overlaps one already mapped.
    Overlaps,
    /// No mapped range starts there.
    NotMapped,
    /// The GPU driver cannot page-lock that much memory.
    OutOfMemory,
    /// The GPU driver refused (its message).
    Driver(String),
}

/// Map the `len` bytes at `data`: on a GPU they are page-locked until
/// [`dma_unmap`].
pub fn dma_map(data: *mut u8, len: usize) -> Result<(), DmaError> {
    match ffi::dma_map(data as usize, len) {
        Ok(0) => Ok(()),
        Ok(1) => Err(DmaError::Overlaps),
        Ok(_) => Err(DmaError::OutOfMemory),
        Err(e) => Err(DmaError::Driver(e.what().to_string())),
    }
}

/// Unmap the range that starts at `data`.
pub fn dma_unmap(data: *mut u8) -> Result<(), DmaError> {
    match ffi::dma_unmap(data as usize) {
        Ok(0) => Ok(()),
        Ok(_) => Err(DmaError::NotMapped),
        Err(e) => Err(DmaError::Driver(e.what().to_string())),
    }
}
