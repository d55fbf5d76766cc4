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
        /// Whether the vector (AVX2 + FMA) kernels run on this CPU.
        fn kernels_vectorized() -> bool;
    }
}

wrappers! {
    /// Erf-GELU of a float32 array on the CPU stream (errors for other
    /// dtypes): `x/2 * (1 + erf(x/sqrt 2))` with A&S 7.1.26's erf.
    fn gelu_erf_cpu(x: &Array) -> UniquePtr<Array>;
}

pub use ffi::kernels_vectorized;
