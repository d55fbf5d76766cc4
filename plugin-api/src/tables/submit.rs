//! Header §11: submitted runs: a run started without waiting for its outputs,
//! so that a host prepares the next run while the device computes this one.

use super::executable::RlxExecutable;
use crate::error::RlxStatus;
use crate::tensor::{RlxNamedTensor, RlxTensor};
use abi_stable::StableAbi;

/// Plugin-owned, static; null in the root table when the plugin only runs
/// synchronously. Both functions are offered together or not at all.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxSubmitApi {
    pub struct_size: usize,
    /// Start a run with these inputs (borrowed for the call, checked as
    /// `executable_run` checks them) and return without waiting for it.
    /// Its state feeds (§9) take effect now, so a run submitted next reads
    /// the state this one makes. Runs are queued, oldest first, up to
    /// `RLX_MAX_SUBMITTED` per executable (more is `RESOURCE_EXHAUSTED`).
    pub submit: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            inputs: *const RlxNamedTensor,
            n_inputs: usize,
        ) -> *mut RlxStatus,
    >,
    /// Wait for the oldest submitted run and hand over its outputs as
    /// `executable_run_into` does (`n_outputs` slots, each lent, `OWNED`
    /// or skipped), or discard them all when `n_outputs` is 0.
    /// `INVALID_ARGUMENT` when nothing is submitted. When that run failed,
    /// every run submitted after it is dropped and the state is put back
    /// as it was before the failed run was submitted.
    pub wait: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            outputs: *mut RlxTensor,
            n_outputs: usize,
        ) -> *mut RlxStatus,
    >,
}

/// The most runs one executable keeps submitted at once.
pub const MAX_SUBMITTED: usize = 64;

// SAFETY: the table is immutable, process-lifetime data and its functions are callable from any thread.
unsafe impl Sync for RlxSubmitApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxSubmitApi {}

crate::abi_struct!(RlxSubmitApi, wait: usize); // an Option<fn> is pointer-sized
