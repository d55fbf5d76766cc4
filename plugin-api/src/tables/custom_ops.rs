//! Header §8: the custom-op registry: kernels, attributes, shape rules,
//! composites and in-place kernels.

use super::executable::RlxValueInfo;
use crate::error::RlxStatus;
use crate::strings::RlxStr;
use crate::tensor::{RlxDataType, RlxTensor};
use abi_stable::StableAbi;
use std::ffi::c_void;

/// Where a custom op came from.
pub mod origin {
    pub const PLUGIN: u32 = 0;
    pub const HOST: u32 = 1;
}

/// How an op is carried out.
pub mod custom_kind {
    /// A kernel the registering party supplied.
    pub const KERNEL: u32 = 0;
    /// Built by the plugin from its own backend's ops (inside its graphs).
    pub const NATIVE: u32 = 1;
    /// An `.rlxmodel` body, inlined where the op is used.
    pub const COMPOSITE: u32 = 2;
}

/// How an op's output dtype and shape follow from its inputs.
pub mod shape_rule {
    /// Not declared (also what a desc too short to hold `shape_rule` means,
    /// `CUSTOM_OP_DESC_SIZE_1_1`): `infer_shape` is `UNSUPPORTED`; a compiled
    /// graph's node still declares its shape.
    pub const NONE: u32 = 0;
    /// Dtype and shape of input `shape_input`.
    pub const SAME_AS_INPUT: u32 = 1;
    /// NumPy broadcast of every input's shape; dtype of input 0.
    pub const BROADCAST: u32 = 2;
    /// `shape_fn` says.
    pub const CALLBACK: u32 = 3;
    /// The composite body's output (its inputs must match the body's).
    pub const BODY: u32 = 4;
}

/// The most dimensions [`RlxShapeOut`] holds.
pub const CUSTOM_MAX_NDIM: usize = 16;

/// An output's dtype and shape, written by `infer_shape` or a shape callback.
/// An out-struct: the caller sets `struct_size`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxShapeOut {
    pub struct_size: usize,
    pub dtype: RlxDataType,
    /// `0..=CUSTOM_MAX_NDIM`.
    pub ndim: i32,
    pub dims: [i64; CUSTOM_MAX_NDIM],
}

/// A shape callback: the output's dtype and shape for inputs of these dtypes
/// and shapes (borrowed; `role` is input, `name` empty) and these attributes
/// (an array of pointers, as for every growable struct). An error status must
/// be made with the plugin's `status_new`.
pub type RlxCustomShapeFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    attrs: *const u8,
    attrs_len: usize,
    inputs: *const *const RlxValueInfo,
    n_inputs: usize,
    out: *mut RlxShapeOut,
) -> *mut RlxStatus;

/// A kernel that writes into outputs the plugin allocated: `outputs` are
/// `BORROWED`, compact row-major, of the node's dtype and shape, and writable
/// for the call; inputs are borrowed too. No data is copied on the way in or
/// out.
pub type RlxCustomKernelIntoFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    attrs: *const u8,
    attrs_len: usize,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *const RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus;

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
    // --- 1.5 ---
    /// Preferred over `kernel` when set: receives the node's attributes
    /// and writes into plugin-allocated outputs. One of `kernel`,
    /// `kernel_into` or `composite` is required.
    pub kernel_into: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            attrs: *const u8,
            attrs_len: usize,
            inputs: *const RlxTensor,
            n_inputs: usize,
            outputs: *const RlxTensor,
            n_outputs: usize,
        ) -> *mut RlxStatus,
    >,
    /// Non-empty: the op is this `.rlxmodel` graph (its `Input` nodes, in
    /// order, are the op's inputs; its one output the op's), inlined
    /// where the op is used. Copied by the plugin.
    pub composite: RlxStr,
    /// One of [`shape_rule`].
    pub shape_rule: u32,
    /// The input `SAME_AS_INPUT` copies.
    pub shape_input: u32,
    /// Required when `shape_rule` is `CALLBACK`; called with `kernel_ctx`.
    pub shape_fn: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            attrs: *const u8,
            attrs_len: usize,
            inputs: *const *const RlxValueInfo,
            n_inputs: usize,
            out: *mut RlxShapeOut,
        ) -> *mut RlxStatus,
    >,
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
    /// Written as 0, never read: fills the bytes that would be tail padding,
    /// which writers count in `struct_size`, so that the fields below cannot
    /// start inside them.
    pub reserved0: u32,
    // --- 1.5 ---
    /// One of [`custom_kind`].
    pub kind: u32,
    /// One of [`shape_rule`].
    pub shape_rule: u32,
    /// The input a `SAME_AS_INPUT` rule copies.
    pub shape_input: u32,
    /// Written as 0, never read.
    pub reserved1: u32,
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
    // --- 1.5 ---
    /// The output dtype and shape of op `name` for these inputs
    /// (`role` input, `name` ignored) and attributes, by the op's rule.
    /// `UNSUPPORTED` when the op declares none.
    pub infer_shape: Option<
        unsafe extern "C" fn(
            name: RlxStr,
            attrs: *const u8,
            attrs_len: usize,
            inputs: *const *const RlxValueInfo,
            n_inputs: usize,
            out: *mut RlxShapeOut,
        ) -> *mut RlxStatus,
    >,
    /// `execute` with attributes.
    pub execute_attrs: Option<
        unsafe extern "C" fn(
            name: RlxStr,
            attrs: *const u8,
            attrs_len: usize,
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

crate::abi_struct!(RlxCustomOpDesc, shape_fn: usize); // an Option<fn> is pointer-sized
crate::abi_struct!(RlxCustomOpInfo, reserved1: u32);
crate::abi_struct!(RlxCustomOpApi, execute_attrs: usize);
crate::abi_struct!(RlxShapeOut, dims: [i64; CUSTOM_MAX_NDIM]);

/// The size of each struct as 1.1-1.4 wrote it (the end of `kernel_ctx_drop`,
/// `reserved0` and `execute`).
pub const CUSTOM_OP_DESC_SIZE_1_1: usize = std::mem::offset_of!(RlxCustomOpDesc, kernel_into);
pub const CUSTOM_OP_INFO_SIZE_1_3: usize = std::mem::offset_of!(RlxCustomOpInfo, kind);
pub const CUSTOM_OP_API_SIZE_1_1: usize = std::mem::offset_of!(RlxCustomOpApi, infer_shape);
crate::abi_struct!(RlxCustomOpVisitor, visit: usize);
