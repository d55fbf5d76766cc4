//! MLX version, the BLAS/LAPACK actually loaded, and memory counters.

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/info.h");

        /// `mlx::core::version()`, e.g. `"0.32.4"`.
        fn mlx_version() -> Result<String>;
        /// File of the loaded libmlx (via `dladdr`), empty if unknown.
        fn mlx_library_path() -> Result<String>;
        /// File of the loaded BLAS (the library defining `cblas_sgemm` /
        /// `sgemm_` as seen from libmlx, else from `/proc/self/maps`), empty
        /// if unknown.
        fn blas_library_path() -> Result<String>;
        /// File of the loaded LAPACK, empty if unknown.
        fn lapack_library_path() -> Result<String>;
        /// One line: BLAS and LAPACK paths and the vendor if identifiable.
        fn blas_info() -> Result<String>;

        fn active_memory() -> usize;
        fn peak_memory() -> usize;
        fn reset_peak_memory() -> Result<()>;
        fn cache_memory() -> usize;
        /// Frees MLX's buffer cache.
        fn clear_cache() -> Result<()>;
        /// Returns the previous limit.
        fn set_memory_limit(limit: usize) -> Result<usize>;
        /// Returns the previous limit.
        fn set_cache_limit(limit: usize) -> Result<usize>;
    }
}

pub use ffi::{active_memory, cache_memory, peak_memory};

/// The facts below are informational: a failure to find one (a C++
/// exception in the shim, caught by the bridge) reads as "unknown (…)"
/// rather than failing the caller.
macro_rules! info_strings {
    ($($(#[$m:meta])* fn $name:ident;)*) => {$(
        $(#[$m])*
        pub fn $name() -> String {
            ffi::$name().unwrap_or_else(|e| format!("unknown ({e})"))
        }
    )*};
}

info_strings! {
    /// `mlx::core::version()`, e.g. `"0.32.4"`.
    fn mlx_version;
    /// File of the loaded libmlx, empty if unknown.
    fn mlx_library_path;
    /// File of the loaded BLAS, empty if unknown.
    fn blas_library_path;
    /// File of the loaded LAPACK, empty if unknown.
    fn lapack_library_path;
    /// One line: BLAS and LAPACK paths and the vendor if identifiable.
    fn blas_info;
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op.
include!(concat!(env!("OUT_DIR"), "/info_wrappers.rs"));
