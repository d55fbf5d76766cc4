//! `mlx::core::fft` (backward normalisation: forward unscaled, inverse
//! scaled by `1/n`).

use crate::array::Array;
use cxx::UniquePtr;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/fft.h");

        type Array = crate::array::ffi::Array;

        /// 1-D FFT along `axis`; `n < 1` keeps the input length.
        #[cxx_name = "fft_fft"]
        fn fft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        #[cxx_name = "fft_ifft"]
        fn ifft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        /// Real-input FFT (output length `n / 2 + 1`).
        #[cxx_name = "fft_rfft"]
        fn rfft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        /// Inverse of `rfft`; `n < 1` gives `2 * (m - 1)` outputs.
        #[cxx_name = "fft_irfft"]
        fn irfft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        /// n-D FFT over `axes`; empty `n` keeps the input sizes.
        #[cxx_name = "fft_fftn"]
        fn fftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
        #[cxx_name = "fft_ifftn"]
        fn ifftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
        #[cxx_name = "fft_rfftn"]
        fn rfftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
        #[cxx_name = "fft_irfftn"]
        fn irfftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op (`fft::name`).
include!(concat!(env!("OUT_DIR"), "/fft_wrappers.rs"));
