//! Header §9: executable state: tensors an executable keeps on its device
//! across runs, bound and read by name, and fed from its outputs.

use super::executable::{RlxExecutable, RlxValueVisitor};
use crate::error::RlxStatus;
use crate::strings::RlxStr;
use crate::tensor::RlxTensor;
use abi_stable::StableAbi;

/// How a state tensor follows the runs (`RlxStateApi::set_feed`).
pub mod feed_kind {
    /// The state changes only when it is bound again (the default).
    pub const NONE: u32 = 0;
    /// After each run that succeeds, the state is the named output.
    pub const REPLACE: u32 = 1;
    /// `feed_rows` copies rows of the named output (from the last run that
    /// succeeded) into the state.
    pub const ROWS: u32 = 2;
}

/// Which rows `feed_rows` copies, from an output of the last run into a
/// state. A row is `row_elems` consecutive elements of the flat tensor; a
/// batched tensor is `batch` blocks of `*_batch_rows` rows each. For batch
/// `b` and `r` in `0..n_rows`, output row `b * src_batch_rows + src_row +
/// r` goes to state row `b * dst_batch_rows + dst + r`, where `dst` is
/// `dst_rows[b]` when `dst_rows` is given, else `dst_row`. Borrowed for
/// the call.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RlxRowFeed {
    pub struct_size: usize,
    /// Elements in one row; more than 0.
    pub row_elems: u64,
    /// Consecutive rows copied per batch; at least 1.
    pub n_rows: u64,
    /// The first row read in each batch of the output.
    pub src_row: u64,
    /// The first row written in each batch of the state (unless
    /// `dst_rows` is given).
    pub dst_row: u64,
    /// How many batches; at least 1.
    pub batch: u64,
    /// Rows per batch in the output; read only when `batch > 1`.
    pub src_batch_rows: u64,
    /// Rows per batch in the state; read only when `batch > 1`.
    pub dst_batch_rows: u64,
    /// Null, or `batch` first rows, one per batch, in place of `dst_row`
    /// (sequences at different lengths). Borrowed for the call.
    pub dst_rows: *const u64,
}

/// The state entries. Plugin-owned, static; null in the root table when
/// the plugin keeps no state. Every function is optional (null = not
/// offered); names and values are borrowed for the call.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxStateApi {
    pub struct_size: usize,
    /// Hold `value` (borrowed for the call, whatever its `ownership`: the
    /// plugin copies it to the executable's device) as the state called
    /// `name`: a graph input, whose dtype and shape it must have. From now
    /// on a run takes that input from the state and the caller passes
    /// nothing for it. Binding again replaces the value and keeps the feed.
    pub bind: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            name: RlxStr,
            value: *const RlxTensor,
        ) -> *mut RlxStatus,
    >,
    /// Forget the state `name` (and its feed): its input is the caller's
    /// to pass again. `NOT_FOUND` when no state has that name.
    pub unbind:
        Option<unsafe extern "C" fn(exe: *mut RlxExecutable, name: RlxStr) -> *mut RlxStatus>,
    /// Copy elements `first_elem ..` of the state `name` (flat, row-major)
    /// into `into`: memory the caller lends, a `BORROWED`, compact tensor
    /// of the state's dtype whose element count says how many to copy.
    pub read: Option<
        unsafe extern "C" fn(
            exe: *const RlxExecutable,
            name: RlxStr,
            first_elem: u64,
            into: *mut RlxTensor,
        ) -> *mut RlxStatus,
    >,
    /// Visit each state (role `STATE`), in name order.
    pub list: Option<
        unsafe extern "C" fn(
            exe: *const RlxExecutable,
            visitor: *const RlxValueVisitor,
        ) -> *mut RlxStatus,
    >,
    /// How the state `name` follows the runs: one of [`feed_kind`], from
    /// the output called `output` (ignored for `NONE`). `REPLACE` needs an
    /// output of the state's dtype and shape; `ROWS` one of its dtype.
    pub set_feed: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            name: RlxStr,
            kind: u32,
            output: RlxStr,
        ) -> *mut RlxStatus,
    >,
    /// Copy `rows` (borrowed for the call) from the last run's outputs
    /// into every state fed `ROWS` (or only the one called `name`, when it
    /// is not empty). Every range is checked before any row is written.
    pub feed_rows: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            name: RlxStr,
            rows: *const RlxRowFeed,
        ) -> *mut RlxStatus,
    >,
    /// Copy elements `first_elem ..` of the output called `output` of the
    /// last run that succeeded (or was submitted) into `into`, lent as for
    /// `read`: a row of the logits without reading the rest back. The
    /// plugin keeps the last run's outputs until the next run.
    pub read_output: Option<
        unsafe extern "C" fn(
            exe: *const RlxExecutable,
            output: RlxStr,
            first_elem: u64,
            into: *mut RlxTensor,
        ) -> *mut RlxStatus,
    >,
    /// Optional: absent when null or beyond `struct_size` (a plugin whose minor
    /// is below 13 ends its table at [`STATE_API_SIZE_1_9`]): check both before
    /// calling. Hold as the state `name` of `exe` the value called `value` of
    /// `src` (another live executable of this plugin, on the same device): its
    /// state of that name if it has one, else the output of that name of its
    /// last run. The value must have the input `name`'s dtype and shape.
    /// Nothing is copied: both executables see the one value, and each replaces
    /// its own as it runs. Binding this way keeps the feed, as `bind` does.
    /// With `name` and `value` empty, every state of `src` is taken under its
    /// own name with its feed, all or nothing (each an input here of its dtype
    /// and shape, each feed an output here as it had in `src`).
    pub bind_from: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            name: RlxStr,
            src: *const RlxExecutable,
            value: RlxStr,
        ) -> *mut RlxStatus,
    >,
}

/// The size of a 1.9-1.12 state table: through `read_output`.
pub const STATE_API_SIZE_1_9: usize = std::mem::offset_of!(RlxStateApi, bind_from);

// SAFETY: the table is immutable, process-lifetime data and its functions are callable from any thread.
unsafe impl Sync for RlxStateApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxStateApi {}

crate::abi_struct!(RlxRowFeed, dst_rows: *const u64);
crate::abi_struct!(RlxStateApi, bind_from: usize); // an Option<fn> is pointer-sized
