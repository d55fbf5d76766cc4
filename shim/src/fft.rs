//! `mlx::core::fft` (backward normalisation: forward unscaled, inverse
//! scaled by `1/n`).

use crate::array::Array;
use cxx::UniquePtr;
use ffi::*;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/fft.h");

        type Array = crate::array::ffi::Array;

        fn fft_fft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        fn fft_ifft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        fn fft_rfft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        fn fft_irfft(a: &Array, n: i32, axis: i32) -> Result<UniquePtr<Array>>;
        fn fft_fftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn fft_ifftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn fft_rfftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn fft_irfftn(a: &Array, n: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
    }
}

macro_rules! fft_wrappers {
    ($( $(#[$m:meta])* fn $name:ident => $ffi:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty; )*) => {
        $(
            $(#[$m])*
            pub fn $name($($arg: $ty),*) -> Result<$ret, crate::ShimError> {
                $ffi($($arg),*)
                    .map_err(|e| crate::ShimError::new(concat!("fft::", stringify!($name)), e))
            }
        )*
    };
}

fft_wrappers! {
    /// 1-D FFT along `axis`; `n < 1` keeps the input length.
    fn fft => fft_fft(a: &Array, n: i32, axis: i32) -> UniquePtr<Array>;
    fn ifft => fft_ifft(a: &Array, n: i32, axis: i32) -> UniquePtr<Array>;
    /// Real-input FFT (output length `n / 2 + 1`).
    fn rfft => fft_rfft(a: &Array, n: i32, axis: i32) -> UniquePtr<Array>;
    /// Inverse of `rfft`; `n < 1` gives `2 * (m - 1)` outputs.
    fn irfft => fft_irfft(a: &Array, n: i32, axis: i32) -> UniquePtr<Array>;
    /// n-D FFT over `axes`; empty `n` keeps the input sizes.
    fn fftn => fft_fftn(a: &Array, n: &[i32], axes: &[i32]) -> UniquePtr<Array>;
    fn ifftn => fft_ifftn(a: &Array, n: &[i32], axes: &[i32]) -> UniquePtr<Array>;
    fn rfftn => fft_rfftn(a: &Array, n: &[i32], axes: &[i32]) -> UniquePtr<Array>;
    fn irfftn => fft_irfftn(a: &Array, n: &[i32], axes: &[i32]) -> UniquePtr<Array>;
}
