//! Header §10: clones and shared params: executables of one plugin that share a
//! compiled program or their weights instead of holding copies.

use super::executable::RlxExecutable;
use crate::error::RlxStatus;
use abi_stable::StableAbi;

/// Plugin-owned, static; null in the root table when the plugin shares
/// nothing between executables. Every function is optional (null = not
/// offered).
///
/// An executable passed here must be a live one of this plugin: one it
/// compiled or cloned and that was not destroyed. Anything else (another
/// plugin's, a destroyed one) is `INVALID_ARGUMENT`, never a crash.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxSharingApi {
    pub struct_size: usize,
    /// A new executable like `exe`: the same signature, device and mode,
    /// sharing its compiled program and bound params, with a copy of its
    /// state (values and feeds) and nothing submitted. `*out` is owned by
    /// the caller, released with `executable_destroy`; each of the two may
    /// then be used, bound and destroyed independently.
    pub clone: Option<
        unsafe extern "C" fn(
            exe: *const RlxExecutable,
            out: *mut *mut RlxExecutable,
        ) -> *mut RlxStatus,
    >,
    /// Make every param of `dst` the param of the same name in `src` (one
    /// copy of the weights on the device for both). `src` must be another
    /// executable on the same device with every one of `dst`'s params
    /// bound, each of the same dtype and shape; otherwise nothing changes
    /// and the status names the first param that differs. `*n_shared`
    /// (optional, may be null) is set to the number of params shared. A
    /// later `executable_bind_param` on either replaces only its own.
    pub share_params: Option<
        unsafe extern "C" fn(
            dst: *mut RlxExecutable,
            src: *const RlxExecutable,
            n_shared: *mut usize,
        ) -> *mut RlxStatus,
    >,
}

// SAFETY: the table is immutable, process-lifetime data and its functions are callable from any thread.
unsafe impl Sync for RlxSharingApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxSharingApi {}

crate::abi_struct!(RlxSharingApi, share_params: usize); // an Option<fn> is pointer-sized
