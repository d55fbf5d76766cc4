//! Header §7: executables (compile options, signature values).

use crate::strings::RlxStr;
use crate::tensor::RlxDataType;
use abi_stable::StableAbi;
use std::ffi::c_void;

/// `executable_destroy`. Not thread-safe: one call at a time per executable.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxExecutable {
    _private: [u8; 0],
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
    /// One of [`rng_policy`] for the graph's random ops. Absent (see
    /// [`RlxCompileOptions::read`]) = `PHILOX`.
    pub rng_policy: u32,
    /// The global seed mixed into every random op's key. Absent =
    /// [`DEFAULT_RNG_SEED`].
    pub rng_seed: u64,
    /// One of `device_kind`: the device to compile for. Absent or `DEFAULT` =
    /// the plugin's default device (its first `device_infos`).
    pub device_kind: u32,
    /// The index among devices of that kind.
    pub device_ordinal: u32,
    /// The most bytes any one tensor of the graph may take; 0 (or absent) = no
    /// limit from the host.
    pub memory_limit_bytes: u64,
}

impl Default for RlxCompileOptions {
    fn default() -> Self {
        RlxCompileOptions {
            struct_size: <RlxCompileOptions as crate::sized::AbiStruct>::STRUCT_SIZE,
            mode: mode::LAZY,
            rng_policy: rng_policy::PHILOX,
            rng_seed: DEFAULT_RNG_SEED,
            device_kind: super::device_kind::DEFAULT,
            device_ordinal: 0,
            memory_limit_bytes: 0,
        }
    }
}

/// What 1.0 and 1.1 hosts wrote in `struct_size`: `sizeof` of
/// `{struct_size, mode}`, four bytes of tail padding included.
pub const COMPILE_OPTIONS_SIZE_1_0: usize = 16;
/// What 1.2 and 1.3 hosts wrote: through `rng_seed`.
pub const COMPILE_OPTIONS_SIZE_1_2: usize = 24;
/// What 1.4 hosts write: through `device_ordinal`.
pub const COMPILE_OPTIONS_SIZE_1_4: usize = 32;
/// What 1.7 hosts write: through `memory_limit_bytes`.
pub const COMPILE_OPTIONS_SIZE_1_7: usize = 40;

impl RlxCompileOptions {
    /// Read a peer's options (null = defaults): `rng_policy` and `rng_seed` are
    /// one group, taken only when `struct_size` reaches the end of `rng_seed`.
    /// A `struct_size` of [`COMPILE_OPTIONS_SIZE_1_0`] (16) covers
    /// `rng_policy`'s bytes, but as the writer's tail padding, whatever a stack
    /// held there: read alone, they would be a garbage policy (docs/ABI.md
    /// §3.1).
    ///
    /// # Safety
    /// `p` is null or points at options readable for their `struct_size`.
    pub unsafe fn read(p: *const RlxCompileOptions) -> RlxCompileOptions {
        let defaults = RlxCompileOptions::default();
        // SAFETY: the caller's promise.
        let Some(declared) = (unsafe { crate::sized::declared_size(p) }) else {
            return defaults;
        };
        // SAFETY: the caller's promise; every field is an integer.
        let mut o = unsafe { crate::sized::read_over(p, defaults) };
        if declared < COMPILE_OPTIONS_SIZE_1_2 {
            o.rng_policy = defaults.rng_policy;
            o.rng_seed = defaults.rng_seed;
        }
        o.struct_size = declared;
        o
    }
}

/// Roles in an executable's signature.
pub mod role {
    pub const INPUT: u32 = 0;
    pub const PARAM: u32 = 1;
    pub const OUTPUT: u32 = 2;
    /// A state tensor (`RlxStateApi::list` only; never in a signature).
    pub const STATE: u32 = 3;
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

crate::abi_struct!(RlxCompileOptions, memory_limit_bytes: u64);
crate::abi_struct!(RlxValueInfo, shape: *const i64);
crate::abi_struct!(RlxValueVisitor, visit: usize); // an Option<fn> is pointer-sized

#[cfg(test)]
mod tests {
    use super::*;

    /// `bytes` as a peer wrote them, read by this build.
    fn read_bytes(bytes: &[u8]) -> RlxCompileOptions {
        let mut buf = [0u64; 8];
        // SAFETY: buf is 64 aligned bytes; bytes.len() <= 64.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_mut_ptr() as *mut u8, bytes.len());
            RlxCompileOptions::read(buf.as_ptr() as *const RlxCompileOptions)
        }
    }

    fn head(size: usize, mode: u32, fill: u8) -> Vec<u8> {
        let mut b = vec![fill; size];
        b[..8].copy_from_slice(&size.to_ne_bytes());
        b[8..12].copy_from_slice(&mode.to_ne_bytes());
        b
    }

    #[test]
    fn a_1_1_hosts_padding_is_never_read_as_a_policy() {
        // {struct_size = 16, mode = compiled}, then 0xAB where rng_policy sits:
        // read alone, those bytes are policy 2880154539.
        let o = read_bytes(&head(COMPILE_OPTIONS_SIZE_1_0, mode::COMPILED, 0xAB));
        assert_eq!(o.mode, mode::COMPILED);
        assert_eq!(o.rng_policy, rng_policy::PHILOX);
        assert_eq!(o.rng_seed, DEFAULT_RNG_SEED);
    }

    #[test]
    fn a_1_2_hosts_options_are_read_whole() {
        let mut b = head(COMPILE_OPTIONS_SIZE_1_2, mode::EAGER, 0xAB);
        b[12..16].copy_from_slice(&rng_policy::ZERO.to_ne_bytes());
        b[16..24].copy_from_slice(&7u64.to_ne_bytes());
        let o = read_bytes(&b);
        assert_eq!(
            (o.mode, o.rng_policy, o.rng_seed),
            (mode::EAGER, rng_policy::ZERO, 7)
        );
    }

    #[test]
    fn a_newer_hosts_bytes_beyond_this_build_are_ignored() {
        let mut b = head(48, mode::LAZY, 0xCD);
        b[12..16].copy_from_slice(&rng_policy::PHILOX.to_ne_bytes());
        b[16..24].copy_from_slice(&9u64.to_ne_bytes());
        b[24..28].copy_from_slice(&super::super::device_kind::GPU.to_ne_bytes());
        b[28..32].copy_from_slice(&1u32.to_ne_bytes());
        let o = read_bytes(&b);
        assert_eq!(
            (o.mode, o.rng_policy, o.rng_seed),
            (mode::LAZY, rng_policy::PHILOX, 9)
        );
        assert_eq!(
            (o.device_kind, o.device_ordinal),
            (super::super::device_kind::GPU, 1)
        );
        // Options through rng_seed only: no device, so the default one.
        let o = read_bytes(&head(COMPILE_OPTIONS_SIZE_1_2, mode::LAZY, 0));
        assert_eq!(o.device_kind, super::super::device_kind::DEFAULT);
        // Null means defaults.
        // SAFETY: null is allowed.
        let d = unsafe { RlxCompileOptions::read(std::ptr::null()) };
        assert_eq!((d.mode, d.rng_seed), (mode::LAZY, DEFAULT_RNG_SEED));
    }
}
