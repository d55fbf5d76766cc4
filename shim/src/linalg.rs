//! `mlx::core::linalg`, run on the CPU stream (where MLX implements it).

use crate::array::{Array, ArrayList};
use cxx::UniquePtr;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/linalg.h");

        type Array = crate::array::ffi::Array;
        type ArrayList = crate::array::ffi::ArrayList;

        /// Solves `a x = b`.
        #[cxx_name = "linalg_solve"]
        fn solve(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        #[cxx_name = "linalg_solve_triangular"]
        fn solve_triangular(a: &Array, b: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        #[cxx_name = "linalg_inv"]
        fn inv(a: &Array) -> Result<UniquePtr<Array>>;
        #[cxx_name = "linalg_tri_inv"]
        fn tri_inv(a: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        #[cxx_name = "linalg_pinv"]
        fn pinv(a: &Array) -> Result<UniquePtr<Array>>;
        /// Cholesky factor (lower unless `upper`).
        #[cxx_name = "linalg_cholesky"]
        fn cholesky(a: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        #[cxx_name = "linalg_cholesky_inv"]
        fn cholesky_inv(a: &Array, upper: bool) -> Result<UniquePtr<Array>>;
        /// `[Q, R]`.
        #[cxx_name = "linalg_qr"]
        fn qr(a: &Array) -> Result<UniquePtr<ArrayList>>;
        /// `[U, S, Vt]` if `compute_uv`, else `[S]`.
        #[cxx_name = "linalg_svd"]
        fn svd(a: &Array, compute_uv: bool) -> Result<UniquePtr<ArrayList>>;
        /// `[eigenvalues, eigenvectors]`; `uplo` is `"L"` or `"U"`.
        #[cxx_name = "linalg_eigh"]
        fn eigh(a: &Array, uplo: &str) -> Result<UniquePtr<ArrayList>>;
        #[cxx_name = "linalg_eigvalsh"]
        fn eigvalsh(a: &Array, uplo: &str) -> Result<UniquePtr<Array>>;
        /// `[P, L, U]`.
        #[cxx_name = "linalg_lu"]
        fn lu(a: &Array) -> Result<UniquePtr<ArrayList>>;
        #[cxx_name = "linalg_det"]
        fn det(a: &Array) -> Result<UniquePtr<Array>>;
        /// `[sign, log|det|]`.
        #[cxx_name = "linalg_slogdet"]
        fn slogdet(a: &Array) -> Result<UniquePtr<ArrayList>>;
        /// 2-norm of the flattened array (empty `axes`) or vector/Frobenius norm
        /// over `axes`.
        #[cxx_name = "linalg_norm"]
        fn norm(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        #[cxx_name = "linalg_norm_ord"]
        fn norm_ord(a: &Array, ord: f64, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        #[cxx_name = "linalg_cross"]
        fn cross(a: &Array, b: &Array, axis: i32) -> Result<UniquePtr<Array>>;
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op (`linalg::name`).
include!(concat!(env!("OUT_DIR"), "/linalg_wrappers.rs"));
