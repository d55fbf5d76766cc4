//! Header §6: registration tables (supported ops, lowering table).

use crate::error::RlxStatus;
use crate::strings::RlxStr;
use crate::tensor::{RlxDataType, RlxTensor};
use abi_stable::StableAbi;
use std::ffi::c_void;

#[repr(C)]
#[derive(StableAbi)]
pub struct RlxOpSupport {
    pub struct_size: usize,
    /// The rlx-ir op-kind name (`"MatMul"`).
    pub op_kind: RlxStr,
    pub dtypes: *const RlxDataType,
    pub n_dtypes: usize,
}

/// The supported-op list. Elements are pointers so the element struct can
/// grow. Plugin-owned, static after `init`.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxOpList {
    pub struct_size: usize,
    pub ops: *const *const RlxOpSupport,
    pub n_ops: usize,
}

/// How a lowering computes its op.
pub mod strategy {
    /// One call of the backend's own op.
    pub const NATIVE: u32 = 0;
    /// Several backend ops.
    pub const COMPOSITE: u32 = 1;
    /// Computed on the host CPU inside the plugin (a round trip).
    pub const HOST_EVALUATED: u32 = 2;
}

/// Eagerly execute one op. `node` is a `.rlxmodel` graph (borrowed) whose
/// only non-input node is the op; `inputs` (borrowed) are bound to its
/// Input nodes in node order. Up to `out_capacity` `OWNED` tensors are written to
/// `outputs` and their count to `*n_outputs`.
pub type RlxExecuteOpFn = unsafe extern "C" fn(
    ctx: *const c_void,
    node: RlxStr,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    out_capacity: usize,
    n_outputs: *mut usize,
) -> *mut RlxStatus;

/// One row of the lowering table. Plugin-owned, static after `init`.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxLoweringEntry {
    pub struct_size: usize,
    /// The rlx-ir op-kind name.
    pub op_kind: RlxStr,
    pub dtypes: *const RlxDataType,
    pub n_dtypes: usize,
    /// One of [`strategy`].
    pub strategy: u32,
    /// A short note (what it maps to), may be empty.
    pub note: RlxStr,
    /// Eager single-op execution; null if this entry cannot run alone
    /// (graph inputs and params). The type is [`RlxExecuteOpFn`], spelled
    /// out because `#[derive(StableAbi)]` sees through no type alias.
    pub execute: Option<
        unsafe extern "C" fn(
            ctx: *const c_void,
            node: RlxStr,
            inputs: *const RlxTensor,
            n_inputs: usize,
            outputs: *mut RlxTensor,
            out_capacity: usize,
            n_outputs: *mut usize,
        ) -> *mut RlxStatus,
    >,
    /// Passed to `execute`. Plugin-owned, static.
    pub execute_ctx: *const c_void,
}

/// The lowering table. Plugin-owned, static after `init`.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxLoweringTable {
    pub struct_size: usize,
    pub entries: *const *const RlxLoweringEntry,
    pub n_entries: usize,
}

crate::abi_struct!(RlxOpSupport, n_dtypes: usize);
crate::abi_struct!(RlxOpList, n_ops: usize);
crate::abi_struct!(RlxLoweringEntry, execute_ctx: *const c_void);
crate::abi_struct!(RlxLoweringTable, n_entries: usize);
