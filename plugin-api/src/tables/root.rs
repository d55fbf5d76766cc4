//! Header §5: the root table (`RlxPluginApi`) and the descriptor.

use super::custom_ops::RlxCustomOpApi;
use super::executable::{RlxCompileOptions, RlxExecutable, RlxValueVisitor};
use super::graph_forms::RlxGraphFormApi;
use super::host::RlxHostApi;
use super::host_memory::RlxHostMemoryApi;
use super::registration::{RlxLoweringTable, RlxOpList};
use super::sharing::RlxSharingApi;
use super::state::RlxStateApi;
use super::submit::RlxSubmitApi;
use crate::error::RlxStatus;
use crate::strings::{RlxKeyValue, RlxStr};
use crate::tensor::{RlxNamedTensor, RlxTensor};
use crate::version::RlxAbiVersion;
use abi_stable::StableAbi;
use std::ffi::c_void;
use std::mem::offset_of;

/// The one symbol a plugin exports.
pub const ENTRY_SYMBOL: &str = "rlx_plugin_entry";

/// The entry's type. The host passes its table (host-owned, valid for the
/// rest of the process) and receives the plugin's root table (plugin-owned,
/// valid for the rest of the process), or null on a failure the plugin could
/// not even describe.
pub type RlxEntryFn = unsafe extern "C" fn(host: *const RlxHostApi) -> *const RlxPluginApi;

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
    /// Compile `.rlxmodel` text (borrowed for the call; other forms of a graph:
    /// `graph_forms`). On success `*out` is a new executable owned by the
    /// caller, released with `executable_destroy`. Required.
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

    // --- 1.4 ---
    /// Which device an executable runs on, written into the out-struct
    /// `*out` (the caller sets its struct_size; the name is plugin-owned,
    /// valid until `executable_destroy`). Optional.
    pub executable_device: Option<
        unsafe extern "C" fn(exe: *const RlxExecutable, out: *mut RlxDeviceInfo) -> *mut RlxStatus,
    >,

    // --- 1.8 ---
    /// As `executable_run`, with outputs written into the caller's memory
    /// where it lends some. `outputs` points at `n_outputs` slots, exactly
    /// the executable's output count. A slot whose `dl.data` is non-null is
    /// the caller's: a `BORROWED` tensor, compact row-major, of the
    /// output's dtype and exact shape, writable for the call; the plugin
    /// writes the output's bytes there and leaves the slot as it was. A
    /// slot whose `dl.data` is null receives an `OWNED` tensor, as from
    /// `executable_run`. On error no slot holds an `OWNED` tensor and the
    /// lent buffers' bytes are unspecified. Optional: a host calls
    /// `executable_run` (and copies) when it is absent.
    pub executable_run_into: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            inputs: *const RlxNamedTensor,
            n_inputs: usize,
            outputs: *mut RlxTensor,
            n_outputs: usize,
        ) -> *mut RlxStatus,
    >,

    // --- 1.9 ---
    /// Executable state (header §9). Plugin-owned, static. Null: none.
    pub state: *const RlxStateApi,
    /// Clones and shared params (header §10). Plugin-owned, static. Null:
    /// none.
    pub sharing: *const RlxSharingApi,
    /// Submitted runs (header §11). Plugin-owned, static. Null: none.
    pub submits: *const RlxSubmitApi,
    /// Overwrite `len` bytes of the bound param `name`, starting
    /// `byte_offset` bytes into its compact row-major storage, with `data`
    /// (borrowed for the call): a whole number of elements, inside the
    /// param. Optional.
    pub executable_bind_param_range: Option<
        unsafe extern "C" fn(
            exe: *mut RlxExecutable,
            name: RlxStr,
            byte_offset: u64,
            data: *const c_void,
            len: usize,
        ) -> *mut RlxStatus,
    >,
    /// Use the RNG policy `policy` (an `rng_policy`) and `seed` for the
    /// graph's random ops from the next run on, as if compiled with them.
    /// Optional.
    pub executable_set_rng: Option<
        unsafe extern "C" fn(exe: *mut RlxExecutable, policy: u32, seed: u64) -> *mut RlxStatus,
    >,
    /// From the next run on, compute only the first `active` of `upper`
    /// rows along axis 0 of every input whose axis 0 is `upper` (a
    /// bucketed graph with fewer live rows); `active == upper == 0`
    /// clears it. Outputs keep their declared shapes; their rows past
    /// `active` are unspecified. A plugin that cannot narrow a graph runs
    /// it whole. Optional.
    pub executable_set_active_extent: Option<
        unsafe extern "C" fn(exe: *mut RlxExecutable, active: u64, upper: u64) -> *mut RlxStatus,
    >,
    /// The memory the plugin's tensors hold now, as the out-struct `*out`.
    /// Optional.
    pub memory_usage: Option<unsafe extern "C" fn(out: *mut RlxMemoryUsage) -> *mut RlxStatus>,

    // --- 1.11 ---
    /// Host memory mapped for transfers (header §12). Plugin-owned,
    /// static. Null: the plugin has no use for it.
    pub host_memory: *const RlxHostMemoryApi,

    // --- 1.12 ---
    /// Graph forms besides `.rlxmodel` text (header §13). Plugin-owned,
    /// static. Null: the plugin reads text only.
    pub graph_forms: *const RlxGraphFormApi,
}

/// What the plugin's tensors hold, in bytes, across all its executables
/// (params, state, run buffers). An out-struct.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default)]
pub struct RlxMemoryUsage {
    pub struct_size: usize,
    /// Held by live tensors now.
    pub active_bytes: u64,
    /// The most held at once since the plugin loaded.
    pub peak_bytes: u64,
    /// Freed by tensors but kept by the plugin's allocator for reuse.
    pub cached_bytes: u64,
}

// Pointers in these tables are immutable, process-lifetime data.

// SAFETY: the root table's pointers are immutable, process-lifetime data and its functions are callable from any thread.
unsafe impl Sync for RlxPluginApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxPluginApi {}

/// Size of the frozen header of `RlxPluginApi`.
pub const PLUGIN_API_HEADER_SIZE: usize = offset_of!(RlxPluginApi, rust_layout_tag);

/// The smallest `RlxPluginApi::struct_size` a plugin of ABI `1.minor` may
/// declare: every field that minor defines. A minor newer than this build
/// knows must at least cover this build's fields.
pub fn plugin_api_min_size(minor: u32) -> usize {
    match minor {
        0 => offset_of!(RlxPluginApi, custom_ops),
        1..=3 => offset_of!(RlxPluginApi, executable_device),
        4..=7 => offset_of!(RlxPluginApi, executable_run_into),
        8 => offset_of!(RlxPluginApi, state),
        9 | 10 => offset_of!(RlxPluginApi, host_memory),
        11 => offset_of!(RlxPluginApi, graph_forms),
        _ => <RlxPluginApi as crate::sized::AbiStruct>::STRUCT_SIZE,
    }
}

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

    // --- 1.4 ---
    /// The devices the plugin can run on now (found when it loaded), as an
    /// array of pointers (the element can grow). The first is the default
    /// device: the one a compile without a device asks for.
    pub device_infos: *const *const RlxDeviceInfo,
    pub n_device_infos: usize,
}

/// Kinds of device (`RlxDeviceInfo::kind`, `RlxCompileOptions::device_kind`).
pub mod device_kind {
    /// Compile options only: the plugin's default device.
    pub const DEFAULT: u32 = 0;
    pub const CPU: u32 = 1;
    pub const GPU: u32 = 2;
}

/// One device a plugin can run on. Plugin-owned, static in the descriptor; an
/// out-struct of `executable_device`.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxDeviceInfo {
    pub struct_size: usize,
    /// One of [`device_kind`] (`CPU` or `GPU`).
    pub kind: u32,
    /// The index among devices of its kind.
    pub ordinal: u32,
    /// A name for people (`"NVIDIA H200"`, `"cpu"`). Plugin-owned, static.
    pub name: RlxStr,
    /// Total memory in bytes; 0 when unknown.
    pub memory_bytes: u64,
}

crate::abi_struct!(RlxPluginApi, graph_forms: usize); // an Option<fn> is pointer-sized
crate::abi_struct!(RlxMemoryUsage, cached_bytes: u64);
crate::abi_struct!(RlxPluginDescriptor, n_device_infos: usize);
crate::abi_struct!(RlxDeviceInfo, memory_bytes: u64);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(PLUGIN_API_HEADER_SIZE == 40);

impl RlxPluginApi {
    /// A table with the given header and every other field absent.
    pub fn blank(abi_version: RlxAbiVersion) -> RlxPluginApi {
        RlxPluginApi {
            struct_size: <RlxPluginApi as crate::sized::AbiStruct>::STRUCT_SIZE,
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
            executable_device: None,
            executable_run_into: None,
            state: std::ptr::null(),
            sharing: std::ptr::null(),
            submits: std::ptr::null(),
            executable_bind_param_range: None,
            executable_set_rng: None,
            executable_set_active_extent: None,
            memory_usage: None,
            host_memory: std::ptr::null(),
            graph_forms: std::ptr::null(),
        }
    }
}

/// The tag a Rust plugin puts in `rust_layout_tag`.
pub const RUST_LAYOUT_TAG: &str = "abi_stable 0.11";
