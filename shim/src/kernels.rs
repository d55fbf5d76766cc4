//! The plugin's own CPU kernels, run inside MLX's graph as primitives
//! (`src/kernels.cc` says why): erf-GELU in the approximation rlx-runtime's
//! CPU backend uses, vectorised with AVX2/FMA where the CPU has them.

use crate::array::Array;
use cxx::UniquePtr;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/kernels.h");

        type Array = crate::array::ffi::Array;

        /// Erf-GELU of a float32 array, on the CPU stream.
        fn gelu_erf_cpu(x: &Array) -> Result<UniquePtr<Array>>;
        /// A float32 matrix product `[..., M, K] x [K, N]` on the CPU stream,
        /// with the plugin's own kernel for a few rows and its own threads
        /// around the BLAS.
        fn matmul_cpu(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        /// How many threads `matmul_cpu` would use now for one
        /// `[m, k] x [k, n]` product (its own, times the BLAS's where the
        /// BLAS does the work): a diagnostic of what a host left us.
        fn matmul_cpu_threads(m: i64, k: i64, n: i64) -> i64;
        /// Whether the vector (AVX2 + FMA) kernels run on this CPU.
        fn kernels_vectorized() -> bool;
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op.
include!(concat!(env!("OUT_DIR"), "/kernels_wrappers.rs"));

pub use ffi::{kernels_vectorized, matmul_cpu_threads};
