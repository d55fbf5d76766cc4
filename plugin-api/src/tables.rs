//! The function tables: every struct that crosses the ABI besides tensors.
//!
//! Each struct starts with `struct_size` and only ever grows at the end.
//! Every function pointer is an `Option` so that a table read past a
//! smaller writer's `struct_size` (zero-filled) is "absent", never garbage.
//! Ownership and lifetime are written on every pointer field; see
//! `docs/ABI.md` for the full contract.

use crate::error::RlxStatus;
use crate::strings::RlxStr;
use crate::tensor::{RlxDataType, RlxNamedTensor, RlxTensor};
use crate::version::RlxAbiVersion;
use abi_stable::StableAbi;
use std::ffi::c_void;
use std::mem::{offset_of, size_of};

/// The one symbol a plugin exports.
pub const ENTRY_SYMBOL: &str = "rlx_plugin_entry";

/// The entry's type. The host passes its table (host-owned, valid for the
/// rest of the process) and receives the plugin's root table (plugin-owned,
/// valid for the rest of the process), or null on a failure the plugin could
/// not even describe.
pub type RlxEntryFn = unsafe extern "C" fn(host: *const RlxHostApi) -> *const RlxPluginApi;

// ---------------------------------------------------------------- host table

/// Log levels, numbered like the `log` crate's `LevelFilter`.
pub mod log_level {
    pub const OFF: u32 = 0;
    pub const ERROR: u32 = 1;
    pub const WARN: u32 = 2;
    pub const INFO: u32 = 3;
    pub const DEBUG: u32 = 4;
    pub const TRACE: u32 = 5;
}

/// One log record. Every field is borrowed for the duration of the call.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxLogRecord {
    pub struct_size: usize,
    /// `log_level::ERROR ..= log_level::TRACE`.
    pub level: u32,
    /// The emitter's own target (e.g. its module path).
    pub target: RlxStr,
    pub message: RlxStr,
    pub module_path: RlxStr,
    pub file: RlxStr,
    /// 0 when unknown.
    pub line: u32,
}

/// What the host offers the plugin. Host-owned; valid for the rest of the
/// process. Callable from any thread.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxHostApi {
    pub struct_size: usize,
    /// The host's ABI version.
    pub abi_version: RlxAbiVersion,
    /// The host program, for messages. Host-owned, static.
    pub host_name: RlxStr,
    /// Opaque to the plugin; passed back to `log` and `log_max_level`.
    pub log_ctx: *mut c_void,
    /// Deliver one record. Optional: without it the plugin logs nothing.
    pub log: Option<unsafe extern "C" fn(ctx: *mut c_void, record: *const RlxLogRecord)>,
    /// The most verbose level the host wants now (`log_level::*`). Asked
    /// at handshake and may be asked again; optional (absent = `TRACE`).
    pub log_max_level: Option<unsafe extern "C" fn(ctx: *mut c_void) -> u32>,
}

// ---------------------------------------------------------------- root table

/// The plugin's root table. Plugin-owned; valid for the rest of the process.
///
/// The first four fields are frozen in every ABI major, so any host can read
/// a plugin's version and refusal whatever major it speaks.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxPluginApi {
    // --- frozen header ---
    pub struct_size: usize,
    /// The ABI version the plugin was built for.
    pub abi_version: RlxAbiVersion,
    /// 0 when the plugin accepts the host. Otherwise a `StatusCode` number:
    /// the plugin refused (host ABI too old or too new, or its entry failed)
    /// and the fields after the header must not be used.
    pub refusal_code: u32,
    /// Why, when `refusal_code != 0`. Plugin-owned, static.
    pub refusal_message: RlxStr,

    // --- 1.0 ---
    /// `"abi_stable 0.11"` when `rust_layout` is set; empty otherwise.
    /// Plugin-owned, static.
    pub rust_layout_tag: RlxStr,
    /// A Rust plugin's `&'static abi_stable::type_layout::TypeLayout` of
    /// `RlxPluginApi` (and so of every type reachable from it). Null for
    /// plugins not written in Rust. Plugin-owned, static.
    pub rust_layout: *const c_void,
    /// Plugin-owned, static. Required.
    pub descriptor: *const RlxPluginDescriptor,
    /// Make a status. `message` is copied. Required. Any party that must
    /// hand this plugin an error (a host custom-op kernel) makes it here.
    pub status_new: Option<unsafe extern "C" fn(code: u32, message: RlxStr) -> *mut RlxStatus>,
    /// Required.
    pub status_code: Option<unsafe extern "C" fn(status: *const RlxStatus) -> u32>,
    /// Borrowed from `status`; valid until `status_free(status)`. Required.
    pub status_message: Option<unsafe extern "C" fn(status: *const RlxStatus) -> RlxStr>,
    /// Release a status (null is a no-op). Required.
    pub status_free: Option<unsafe extern "C" fn(status: *mut RlxStatus)>,
    /// Registration: the plugin fills its op list, lowering table and
    /// custom-op registry. Called once by the host after the handshake and
    /// before any function below. Required.
    pub init: Option<unsafe extern "C" fn() -> *mut RlxStatus>,
    /// The supported ops (derived from the lowering table). `*out` is
    /// written with plugin-owned memory valid for the rest of the process.
    /// Required.
    pub supported_ops: Option<unsafe extern "C" fn(out: *mut RlxOpList) -> *mut RlxStatus>,
    /// The lowering table; as for `supported_ops`. Required.
    pub lowering_table: Option<unsafe extern "C" fn(out: *mut RlxLoweringTable) -> *mut RlxStatus>,
    /// Compile `.rlxmodel` text (borrowed for the call). On success `*out`
    /// is a new executable owned by the caller, released with
    /// `executable_destroy`. Required.
    pub compile: Option<
        unsafe extern "C" fn(
            graph: RlxStr,
            options: *const RlxCompileOptions,
            out: *mut *mut RlxExecutable,
        ) -> *mut RlxStatus,
    >,
    /// Release an executable (null is a no-op). Required.
    pub executable_destroy: Option<unsafe extern "C" fn(exe: *mut RlxExecutable)>,
    /// Call `visitor.visit` once per input, param and output, in that
    /// order. Required.
    pub executable_signature: Option<
        unsafe extern "C" fn(
            exe: *const RlxExecutable,
            visitor: *const RlxValueVisitor,
        ) -> *mut RlxStatus,
    >,
    /// Bind a param by name. `tensor.ownership` says whether the plugin must
    /// copy (`BORROWED`), may alias (`BORROWED_PERSISTENT`) or now owns it
    /// (`OWNED`; released by the plugin even when the call fails). Required.
    pub executable_bind_param: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            name: RlxStr,
            tensor: *const RlxTensor,
        ) -> *mut RlxStatus,
    >,
    /// Run with named inputs (borrowed for the call). `outputs` points at
    /// `n_outputs` slots, exactly the executable's output count; on success
    /// each is an `OWNED` tensor the caller releases; on error none is.
    /// Required.
    pub executable_run: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            inputs: *const RlxNamedTensor,
            n_inputs: usize,
            outputs: *mut RlxTensor,
            n_outputs: usize,
        ) -> *mut RlxStatus,
    >,

    // --- 1.1 ---
    /// The custom-op registry. Plugin-owned, static. Null: none.
    pub custom_ops: *const RlxCustomOpApi,
}

// Pointers in these tables are immutable, process-lifetime data.
unsafe impl Sync for RlxPluginApi {}
unsafe impl Send for RlxPluginApi {}
unsafe impl Sync for RlxHostApi {}
unsafe impl Send for RlxHostApi {}

/// Size of the frozen header of `RlxPluginApi`.
pub const PLUGIN_API_HEADER_SIZE: usize = offset_of!(RlxPluginApi, rust_layout_tag);

/// The smallest `RlxPluginApi::struct_size` a plugin of ABI `1.minor` may
/// declare: every field that minor defines. A minor newer than this build
/// knows must at least cover this build's fields.
pub fn plugin_api_min_size(minor: u32) -> usize {
    match minor {
        0 => offset_of!(RlxPluginApi, custom_ops),
        _ => size_of::<RlxPluginApi>(),
    }
}

/// Opaque compiled graph. Created by `compile`, released by
/// `executable_destroy`. Not thread-safe: one call at a time per executable.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxExecutable {
    _private: [u8; 0],
}

/// A key/value pair of strings (build info).
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxKeyValue {
    pub key: RlxStr,
    pub value: RlxStr,
}

/// Who the plugin is. Plugin-owned; every pointer is static.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxPluginDescriptor {
    pub struct_size: usize,
    /// Unique plugin name (`"mlx"`). Two plugins with one name shadow.
    pub name: RlxStr,
    /// The plugin's own semver version.
    pub version: RlxStr,
    pub description: RlxStr,
    /// Device names it runs on (`"cpu"`, `"mlx"`), `n_devices` of them.
    pub devices: *const RlxStr,
    pub n_devices: usize,
    /// Free-form build facts (`mlx.version`, `blas`), `n_build_info` pairs.
    pub build_info: *const RlxKeyValue,
    pub n_build_info: usize,
    /// The `.rlxmodel` opsets it reads, `n_opsets` of them.
    pub opsets: *const u32,
    pub n_opsets: usize,
}

/// One supported op kind and the dtypes it takes.
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
/// inputs in order. Up to `out_capacity` `OWNED` tensors are written to
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
    /// (graph inputs and params).
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

/// Execution modes for `compile`.
pub mod mode {
    /// Build the whole graph, evaluate once per run.
    pub const LAZY: u32 = 0;
    /// Evaluate node by node; errors name the node.
    pub const EAGER: u32 = 1;
    /// Trace once and run the backend's compiled form.
    pub const COMPILED: u32 = 2;
}

/// Random-number policies (rlx-ir's `RngBackend`, by number).
pub mod rng_policy {
    /// Philox4x32-10 (rlx's default).
    pub const PHILOX: u32 = 0;
    /// ONNX Runtime's CPU generators.
    pub const ORT: u32 = 1;
    /// Apple BNNS AES-CTR.
    pub const BNNS: u32 = 2;
    /// All zeros.
    pub const ZERO: u32 = 3;
}

/// The RNG seed rlx uses when none is given.
pub const DEFAULT_RNG_SEED: u64 = 42;

/// Options for `compile`. Borrowed for the call; null means defaults.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxCompileOptions {
    pub struct_size: usize,
    /// One of [`mode`].
    pub mode: u32,
    /// (1.2) One of [`rng_policy`] for the graph's random ops. Absent
    /// (an older host) = `PHILOX`.
    pub rng_policy: u32,
    /// (1.2) The global seed mixed into every random op's key. Absent =
    /// [`DEFAULT_RNG_SEED`].
    pub rng_seed: u64,
}

impl Default for RlxCompileOptions {
    fn default() -> Self {
        RlxCompileOptions {
            struct_size: size_of::<RlxCompileOptions>(),
            mode: mode::LAZY,
            rng_policy: rng_policy::PHILOX,
            rng_seed: DEFAULT_RNG_SEED,
        }
    }
}

/// Roles in an executable's signature.
pub mod role {
    pub const INPUT: u32 = 0;
    pub const PARAM: u32 = 1;
    pub const OUTPUT: u32 = 2;
}

/// One input, param or output. Borrowed for the visitor call.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxValueInfo {
    pub struct_size: usize,
    /// One of [`role`].
    pub role: u32,
    pub name: RlxStr,
    pub dtype: RlxDataType,
    pub ndim: i32,
    /// `ndim` sizes; -1 for a size known only at run time.
    pub shape: *const i64,
}

/// A callback over an executable's signature (borrowed for the call that
/// receives it).
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxValueVisitor {
    pub struct_size: usize,
    /// Passed back to `visit`.
    pub ctx: *mut c_void,
    /// Required. `info` is borrowed for the call.
    pub visit: Option<unsafe extern "C" fn(ctx: *mut c_void, info: *const RlxValueInfo)>,
}

// ---------------------------------------------------------- custom ops (1.1)

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

/// A custom op to register. Borrowed for the `register` call, except
/// `kernel_ctx`, whose ownership moves to the plugin: it calls
/// `kernel_ctx_drop(kernel_ctx)` when the op is unregistered or replaced.
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
    pub register: Option<unsafe extern "C" fn(desc: *const RlxCustomOpDesc) -> *mut RlxStatus>,
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

unsafe impl Sync for RlxCustomOpApi {}
unsafe impl Send for RlxCustomOpApi {}

// ------------------------------------------------------ last-field checks
//
// PJRT-style: a field appended anywhere but at the end, or a padding change,
// fails the build here instead of silently shifting a peer's view.
macro_rules! last_field {
    ($t:ty, $f:ident, $ft:ty) => {
        const _: () = {
            let end = offset_of!($t, $f) + size_of::<$ft>();
            let align = std::mem::align_of::<$t>();
            assert!((end + align - 1) / align * align == size_of::<$t>());
        };
    };
}
last_field!(
    RlxHostApi,
    log_max_level,
    Option<unsafe extern "C" fn(*mut c_void) -> u32>
);
last_field!(RlxPluginApi, custom_ops, *const RlxCustomOpApi);
last_field!(RlxLogRecord, line, u32);
last_field!(RlxPluginDescriptor, n_opsets, usize);
last_field!(RlxOpSupport, n_dtypes, usize);
last_field!(RlxOpList, n_ops, usize);
last_field!(RlxLoweringEntry, execute_ctx, *const c_void);
last_field!(RlxLoweringTable, n_entries, usize);
last_field!(RlxCompileOptions, rng_seed, u64);
last_field!(RlxValueInfo, shape, *const i64);
last_field!(
    RlxCustomOpDesc,
    kernel_ctx_drop,
    Option<unsafe extern "C" fn(*mut c_void)>
);
last_field!(RlxCustomOpInfo, origin, u32);
last_field!(RlxCustomOpApi, execute, usize); // an Option<fn> is pointer-sized
last_field!(RlxValueVisitor, visit, usize);
last_field!(RlxCustomOpVisitor, visit, usize);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(PLUGIN_API_HEADER_SIZE == 40);

impl RlxPluginApi {
    /// A table with the given header and every other field absent.
    pub fn blank(abi_version: RlxAbiVersion) -> RlxPluginApi {
        RlxPluginApi {
            struct_size: size_of::<RlxPluginApi>(),
            abi_version,
            refusal_code: 0,
            refusal_message: RlxStr::EMPTY,
            rust_layout_tag: RlxStr::EMPTY,
            rust_layout: std::ptr::null(),
            descriptor: std::ptr::null(),
            status_new: None,
            status_code: None,
            status_message: None,
            status_free: None,
            init: None,
            supported_ops: None,
            lowering_table: None,
            compile: None,
            executable_destroy: None,
            executable_signature: None,
            executable_bind_param: None,
            executable_run: None,
            custom_ops: std::ptr::null(),
        }
    }
}

/// The tag a Rust plugin puts in `rust_layout_tag`.
pub const RUST_LAYOUT_TAG: &str = "abi_stable 0.11";
