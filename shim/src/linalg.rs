//! `mlx::core::linalg`, run on the CPU stream (where MLX implements it).

use crate::array::{Array, ArrayList};
use cxx::UniquePtr;
use ffi::*;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/linalg.h");

        type Array = crate::array::ffi::Array;
        type ArrayList = crate::array::ffi::ArrayList;

        fn linalg_solve(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn linalg_solve_triangular(a: &Array, b: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        fn linalg_inv(a: &Array) -> Result<UniquePtr<Array>>;
        fn linalg_tri_inv(a: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        fn linalg_pinv(a: &Array) -> Result<UniquePtr<Array>>;
        fn linalg_cholesky(a: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        fn linalg_cholesky_inv(a: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        fn linalg_qr(a: &Array) -> Result<UniquePtr<ArrayList>>;
        fn linalg_svd(a: &Array, compute_uv: bool) -> Result<UniquePtr<ArrayList>>;
        fn linalg_eigh(a: &Array, uplo: &str) -> Result<UniquePtr<ArrayList>>;
        fn linalg_eigvalsh(a: &Array, uplo: &str) -> Result<UniquePtr<Array>>;
        fn linalg_lu(a: &Array) -> Result<UniquePtr<ArrayList>>;
        fn linalg_det(a: &Array) -> Result<UniquePtr<Array>>;
        fn linalg_slogdet(a: &Array) -> Result<UniquePtr<ArrayList>>;
        fn linalg_norm(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn linalg_norm_ord(
            a: &Array,
            ord: f64,
            axes: &[i32],
            keepdims: bool,
        ) -> Result<UniquePtr<Array>>;
        fn linalg_cross(a: &Array, b: &Array, axis: i32) -> Result<UniquePtr<Array>>;
    }
}

macro_rules! linalg_wrappers {
    ($( $(#[$m:meta])* fn $name:ident => $ffi:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty; )*) => {
        $(
            $(#[$m])*
            pub fn $name($($arg: $ty),*) -> Result<$ret, crate::ShimError> {
                $ffi($($arg),*)
                    .map_err(|e| crate::ShimError::new(concat!("linalg::", stringify!($name)), e))
            }
        )*
    };
}

linalg_wrappers! {
    /// Solves `a x = b`.
    fn solve => linalg_solve(a: &Array, b: &Array) -> UniquePtr<Array>;
    fn solve_triangular => linalg_solve_triangular(a: &Array, b: &Array, upper: bool) -> UniquePtr<Array>;
    fn inv => linalg_inv(a: &Array) -> UniquePtr<Array>;
    fn tri_inv => linalg_tri_inv(a: &Array, upper: bool) -> UniquePtr<Array>;
    fn pinv => linalg_pinv(a: &Array) -> UniquePtr<Array>;
    /// Cholesky factor (lower unless `upper`).
    fn cholesky => linalg_cholesky(a: &Array, upper: bool) -> UniquePtr<Array>;
    fn cholesky_inv => linalg_cholesky_inv(a: &Array, upper: bool) -> UniquePtr<Array>;
    /// `[Q, R]`.
    fn qr => linalg_qr(a: &Array) -> UniquePtr<ArrayList>;
    /// `[U, S, Vt]` if `compute_uv`, else `[S]`.
    fn svd => linalg_svd(a: &Array, compute_uv: bool) -> UniquePtr<ArrayList>;
    /// `[eigenvalues, eigenvectors]`; `uplo` is `"L"` or `"U"`.
    fn eigh => linalg_eigh(a: &Array, uplo: &str) -> UniquePtr<ArrayList>;
    fn eigvalsh => linalg_eigvalsh(a: &Array, uplo: &str) -> UniquePtr<Array>;
    /// `[P, L, U]`.
    fn lu => linalg_lu(a: &Array) -> UniquePtr<ArrayList>;
    fn det => linalg_det(a: &Array) -> UniquePtr<Array>;
    /// `[sign, log|det|]`.
    fn slogdet => linalg_slogdet(a: &Array) -> UniquePtr<ArrayList>;
    /// 2-norm of the flattened array (empty `axes`) or vector/Frobenius norm
    /// over `axes`.
    fn norm => linalg_norm(a: &Array, axes: &[i32], keepdims: bool) -> UniquePtr<Array>;
    fn norm_ord => linalg_norm_ord(a: &Array, ord: f64, axes: &[i32], keepdims: bool) -> UniquePtr<Array>;
    fn cross => linalg_cross(a: &Array, b: &Array, axis: i32) -> UniquePtr<Array>;
}
