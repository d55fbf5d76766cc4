//! Header §8: the custom-op registry (1.1).

use crate::error::RlxStatus;
use crate::strings::RlxStr;
use crate::tensor::RlxTensor;
use abi_stable::StableAbi;
use std::ffi::c_void;

/// Where a custom op came from.
pub mod origin {
    pub const PLUGIN: u32 = 0;
    pub const HOST: u32 = 1;
}

/// A custom-op kernel supplied by the registering party. Writes exactly
/// `n_outputs` `OWNED` tensors. An error status must be made with the
/// plugin's `status_new`.
pub type RlxCustomKernelFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus;

/// A custom op to register. Borrowed for the `register_op` call, except
/// `kernel_ctx`, whose ownership moves to the plugin: it calls
/// `kernel_ctx_drop(kernel_ctx)` once, when the op is unregistered, or at
/// once when registration fails (a taken name is `ALREADY_EXISTS`, never
/// a replacement).
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxCustomOpDesc {
    pub struct_size: usize,
    /// A dotted name (`"myorg.fused_gelu"`).
    pub name: RlxStr,
    pub description: RlxStr,
    pub n_inputs: u32,
    pub n_outputs: u32,
    /// Required.
    pub kernel: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            inputs: *const RlxTensor,
            n_inputs: usize,
            outputs: *mut RlxTensor,
            n_outputs: usize,
        ) -> *mut RlxStatus,
    >,
    pub kernel_ctx: *mut c_void,
    pub kernel_ctx_drop: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
}

/// What the registry knows of one op. Borrowed for the visitor call.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxCustomOpInfo {
    pub struct_size: usize,
    pub name: RlxStr,
    pub description: RlxStr,
    pub n_inputs: u32,
    pub n_outputs: u32,
    /// One of [`origin`].
    pub origin: u32,
    /// (1.3) Written as 0, never read: fills what was tail padding.
    pub reserved0: u32,
}

/// A callback over custom ops (borrowed for the call that receives it).
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxCustomOpVisitor {
    pub struct_size: usize,
    /// Passed back to `visit`.
    pub ctx: *mut c_void,
    /// Required. `info` is borrowed for the call.
    pub visit: Option<unsafe extern "C" fn(ctx: *mut c_void, info: *const RlxCustomOpInfo)>,
}

/// The custom-op registry. Plugin-owned, static. Thread-safe.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxCustomOpApi {
    pub struct_size: usize,
    /// `AlreadyExists` when the name is taken.
    pub register_op: Option<unsafe extern "C" fn(desc: *const RlxCustomOpDesc) -> *mut RlxStatus>,
    /// `NotFound` when the name is unknown.
    pub unregister: Option<unsafe extern "C" fn(name: RlxStr) -> *mut RlxStatus>,
    /// Visit the op `name`; `NotFound` when unknown.
    pub lookup: Option<
        unsafe extern "C" fn(name: RlxStr, visitor: *const RlxCustomOpVisitor) -> *mut RlxStatus,
    >,
    /// Visit every op, in name order.
    pub list: Option<unsafe extern "C" fn(visitor: *const RlxCustomOpVisitor) -> *mut RlxStatus>,
    /// Run the op `name` on borrowed `inputs`, writing its `n_outputs`
    /// `OWNED` outputs.
    pub execute: Option<
        unsafe extern "C" fn(
            name: RlxStr,
            inputs: *const RlxTensor,
            n_inputs: usize,
            outputs: *mut RlxTensor,
            n_outputs: usize,
        ) -> *mut RlxStatus,
    >,
}

// SAFETY: the registry table is immutable, process-lifetime data and its functions are thread-safe (docs/ABI.md, threading).
unsafe impl Sync for RlxCustomOpApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxCustomOpApi {}

crate::abi_struct!(
    RlxCustomOpDesc,
    kernel_ctx_drop: Option<unsafe extern "C" fn(*mut c_void)>
);
crate::abi_struct!(RlxCustomOpInfo, reserved0: u32);
crate::abi_struct!(RlxCustomOpApi, execute: usize); // an Option<fn> is pointer-sized
crate::abi_struct!(RlxCustomOpVisitor, visit: usize);
