//! Header §4: the host table and logging (`RlxHostApi`, `RlxLogRecord`).

use crate::strings::RlxStr;
use crate::version::RlxAbiVersion;
use abi_stable::StableAbi;
use std::ffi::c_void;

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
    /// Written as 0, never read: fills the bytes that would be tail padding,
    /// which writers count in `struct_size`, so that a later field cannot start
    /// inside them.
    pub reserved0: u32,
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
    /// Opaque to the plugin; passed back to `log`, `log_max_level` and
    /// `setting`.
    pub log_ctx: *mut c_void,
    /// Deliver one record. Optional: without it the plugin logs nothing.
    pub log: Option<unsafe extern "C" fn(ctx: *mut c_void, record: *const RlxLogRecord)>,
    /// The most verbose level the host wants now (`log_level::*`). Asked
    /// at handshake and may be asked again; optional (absent = `TRACE`).
    pub log_max_level: Option<unsafe extern "C" fn(ctx: *mut c_void) -> u32>,

    // --- 1.10 ---
    /// The host's value of the setting `key` (an `RLX_*` switch): copies at
    /// most `cap` bytes of the value (UTF-8, no terminator) into `buf` and
    /// returns the value's whole length in bytes, or -1 when the setting is
    /// unset. A length above `cap` means the copy was cut: ask again with a
    /// larger buffer. `key` is borrowed for the call; `buf` may be null when
    /// `cap` is 0. Optional (absent: the plugin reads its own process
    /// environment). The Rust host answers with `rlx_ir::env` (in-process
    /// overrides first, then the process environment). Callable from any
    /// thread.
    pub setting: Option<
        unsafe extern "C" fn(ctx: *mut c_void, key: RlxStr, buf: *mut u8, cap: usize) -> i64,
    >,
}

// SAFETY: the host table is immutable and its functions callable from any thread (docs/ABI.md, threading).
unsafe impl Sync for RlxHostApi {}
// SAFETY: as for Sync.
unsafe impl Send for RlxHostApi {}

/// Size of the host table's frozen header (`struct_size`, `abi_version`,
/// `host_name`): the least a plugin of any major must be able to read.
pub const HOST_API_HEADER_SIZE: usize = std::mem::offset_of!(RlxHostApi, log_ctx);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(HOST_API_HEADER_SIZE == 40);

/// What a host before 1.10 writes in `struct_size`: the end of `log_max_level`,
/// where `setting` begins.
pub const HOST_API_SIZE_1_0: usize = std::mem::offset_of!(RlxHostApi, setting);
const _: () = assert!(
    HOST_API_SIZE_1_0
        == std::mem::offset_of!(RlxHostApi, log_max_level)
            + std::mem::size_of::<Option<unsafe extern "C" fn(*mut c_void) -> u32>>()
);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(HOST_API_SIZE_1_0 == 64);

crate::abi_struct!(RlxLogRecord, reserved0: u32);
crate::abi_struct!(
    RlxHostApi,
    setting: Option<unsafe extern "C" fn(*mut c_void, RlxStr, *mut u8, usize) -> i64>
);
