//! Header §13: graph forms. A graph crosses the ABI as `.rlxmodel` text, which
//! any plugin of any rlx version reads; writing and reading that text costs a
//! few microseconds a node (a graph of 1,600 nodes spent about 50 ms of its
//! 70 ms compile there). A plugin may also read forms that are cheaper to make
//! and parse but bind both sides tighter, such as rlx-ir's own serialisation of
//! a graph for one exact rlx-ir version; a host that writes one of them sends
//! it instead of the text. PJRT's `PJRT_Program` (code plus a format string)
//! is the model.

use super::executable::{RlxCompileOptions, RlxExecutable};
use crate::error::RlxStatus;
use crate::strings::RlxStr;
use abi_stable::StableAbi;
use std::ffi::c_void;

/// Plugin-owned, static; null in the root table when the plugin reads no
/// form but `.rlxmodel` text.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxGraphFormApi {
    pub struct_size: usize,
    /// The forms the plugin reads, `n_forms` names (docs/ABI.md §24 defines
    /// them). Plugin-owned, static.
    pub forms: *const RlxStr,
    pub n_forms: usize,
    /// As the root table's `compile`, for the `len` bytes at `data`
    /// (borrowed for the call) in the form named `form`. A form the plugin
    /// does not list is `UNSUPPORTED`; bytes that are not a graph in that
    /// form are `INVALID_ARGUMENT`.
    pub compile: Option<
        unsafe extern "C" fn(
            form: RlxStr,
            data: *const c_void,
            len: usize,
            options: *const RlxCompileOptions,
            out: *mut *mut RlxExecutable,
        ) -> *mut RlxStatus,
    >,
}

// SAFETY: the table is immutable, process-lifetime data and its function is callable from any thread.
unsafe impl Sync for RlxGraphFormApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxGraphFormApi {}

crate::abi_struct!(RlxGraphFormApi, compile: usize); // an Option<fn> is pointer-sized
