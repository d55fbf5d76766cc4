//! `mlx::core` ops. Each function runs on the CPU device and returns a new
//! lazy array; errors carry MLX's own message and name the op.
//!
//! Semantics are MLX's own (see `mlx/ops.h`), with these conventions:
//! shapes and axes are `&[i32]`; reductions reduce exactly the listed `axes`
//! (an empty list reduces nothing, as in MLX's C++ API); `transpose` with an
//! empty `axes` reverses the axes; `clip` takes NaN for "no bound".

#![allow(clippy::too_many_arguments)]
// The raw bridge's unsafe fn (quantized_matmul) documents its contract;
// cxx's generated items around it do not carry the docs.
#![allow(clippy::missing_safety_doc)]

use crate::array::{Array, ArrayList, DType};
use cxx::UniquePtr;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/ops.h");

        type Array = crate::array::ffi::Array;
        type ArrayList = crate::array::ffi::ArrayList;
        type DType = crate::array::ffi::DType;

        /// Converts to `dtype` (numeric conversion).
        fn astype(a: &Array, dtype: DType) -> Result<UniquePtr<Array>>;
        /// Reinterprets the bytes as `dtype`.
        fn view(a: &Array, dtype: DType) -> Result<UniquePtr<Array>>;
        fn copy(a: &Array) -> Result<UniquePtr<Array>>;
        /// A row-major contiguous version of `a`.
        fn contiguous(a: &Array) -> Result<UniquePtr<Array>>;

        // unary
        fn abs(a: &Array) -> Result<UniquePtr<Array>>;
        fn negative(a: &Array) -> Result<UniquePtr<Array>>;
        fn exp(a: &Array) -> Result<UniquePtr<Array>>;
        fn expm1(a: &Array) -> Result<UniquePtr<Array>>;
        fn log(a: &Array) -> Result<UniquePtr<Array>>;
        fn log1p(a: &Array) -> Result<UniquePtr<Array>>;
        fn log2(a: &Array) -> Result<UniquePtr<Array>>;
        fn log10(a: &Array) -> Result<UniquePtr<Array>>;
        fn sqrt(a: &Array) -> Result<UniquePtr<Array>>;
        fn rsqrt(a: &Array) -> Result<UniquePtr<Array>>;
        fn square(a: &Array) -> Result<UniquePtr<Array>>;
        fn reciprocal(a: &Array) -> Result<UniquePtr<Array>>;
        fn sin(a: &Array) -> Result<UniquePtr<Array>>;
        fn cos(a: &Array) -> Result<UniquePtr<Array>>;
        fn tan(a: &Array) -> Result<UniquePtr<Array>>;
        fn arcsin(a: &Array) -> Result<UniquePtr<Array>>;
        fn arccos(a: &Array) -> Result<UniquePtr<Array>>;
        fn arctan(a: &Array) -> Result<UniquePtr<Array>>;
        fn sinh(a: &Array) -> Result<UniquePtr<Array>>;
        fn cosh(a: &Array) -> Result<UniquePtr<Array>>;
        fn tanh(a: &Array) -> Result<UniquePtr<Array>>;
        fn arcsinh(a: &Array) -> Result<UniquePtr<Array>>;
        fn arccosh(a: &Array) -> Result<UniquePtr<Array>>;
        fn arctanh(a: &Array) -> Result<UniquePtr<Array>>;
        fn sigmoid(a: &Array) -> Result<UniquePtr<Array>>;
        fn erf(a: &Array) -> Result<UniquePtr<Array>>;
        fn erfinv(a: &Array) -> Result<UniquePtr<Array>>;
        fn floor(a: &Array) -> Result<UniquePtr<Array>>;
        fn ceil(a: &Array) -> Result<UniquePtr<Array>>;
        fn trunc(a: &Array) -> Result<UniquePtr<Array>>;
        /// Rounds half to even, to `decimals` decimal places.
        fn round(a: &Array, decimals: i32) -> Result<UniquePtr<Array>>;
        fn sign(a: &Array) -> Result<UniquePtr<Array>>;
        fn logical_not(a: &Array) -> Result<UniquePtr<Array>>;
        fn stop_gradient(a: &Array) -> Result<UniquePtr<Array>>;
        fn isnan(a: &Array) -> Result<UniquePtr<Array>>;
        fn isinf(a: &Array) -> Result<UniquePtr<Array>>;
        fn isfinite(a: &Array) -> Result<UniquePtr<Array>>;
        fn bitwise_invert(a: &Array) -> Result<UniquePtr<Array>>;
        fn real(a: &Array) -> Result<UniquePtr<Array>>;
        fn imag(a: &Array) -> Result<UniquePtr<Array>>;
        fn conjugate(a: &Array) -> Result<UniquePtr<Array>>;

        // binary
        fn add(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn subtract(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn multiply(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn divide(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn maximum(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn minimum(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn power(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        /// Remainder with the sign of the divisor (Python `%`).
        fn remainder(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn floor_divide(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn arctan2(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn logaddexp(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn logical_and(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn logical_or(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn logical_xor(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn bitwise_and(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn bitwise_or(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn bitwise_xor(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn left_shift(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn right_shift(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn equal(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn not_equal(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn less(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn less_equal(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn greater(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn greater_equal(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn matmul(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn outer(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn inner(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        fn kron(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;

        /// `cond ? a : b`, broadcasting.
        fn where_(cond: &Array, a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        /// Clamps to `[lo, hi]`; a NaN bound means "no bound" on that side.
        fn clip(a: &Array, lo: f64, hi: f64) -> Result<UniquePtr<Array>>;
        /// `beta * c + alpha * (a @ b)`.
        fn addmm(
            c: &Array,
            a: &Array,
            b: &Array,
            alpha: f32,
            beta: f32,
        ) -> Result<UniquePtr<Array>>;

        // shape manipulation
        /// Reshape; one entry may be -1.
        fn reshape(a: &Array, shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn flatten(a: &Array, start_axis: i32, end_axis: i32) -> Result<UniquePtr<Array>>;
        /// Permutes axes; an empty `axes` reverses them.
        fn transpose(a: &Array, axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn swapaxes(a: &Array, axis1: i32, axis2: i32) -> Result<UniquePtr<Array>>;
        fn moveaxis(a: &Array, source: i32, destination: i32) -> Result<UniquePtr<Array>>;
        /// Strided slice `a[start:stop:strides]` over all axes.
        fn slice(
            a: &Array,
            start: &[i32],
            stop: &[i32],
            strides: &[i32],
        ) -> Result<UniquePtr<Array>>;
        fn slice_update(
            src: &Array,
            update: &Array,
            start: &[i32],
            stop: &[i32],
            strides: &[i32],
        ) -> Result<UniquePtr<Array>>;
        /// `update` written into `src` at the offsets held by `start` (an
        /// integer array, one per axis in `axes`), read when the graph runs.
        fn slice_update_dynamic(
            src: &Array,
            update: &Array,
            start: &Array,
            axes: &[i32],
        ) -> Result<UniquePtr<Array>>;
        fn concatenate(arrays: &ArrayList, axis: i32) -> Result<UniquePtr<Array>>;
        fn stack(arrays: &ArrayList, axis: i32) -> Result<UniquePtr<Array>>;
        /// Splits into `num_splits` equal parts along `axis`.
        fn split_sections(a: &Array, num_splits: i32, axis: i32) -> Result<UniquePtr<ArrayList>>;
        /// Splits at the given indices along `axis`.
        fn split_indices(a: &Array, indices: &[i32], axis: i32) -> Result<UniquePtr<ArrayList>>;
        fn broadcast_to(a: &Array, shape: &[i32]) -> Result<UniquePtr<Array>>;
        fn expand_dims(a: &Array, axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn squeeze(a: &Array, axes: &[i32]) -> Result<UniquePtr<Array>>;
        /// Removes every singleton axis.
        fn squeeze_all(a: &Array) -> Result<UniquePtr<Array>>;
        fn flip(a: &Array, axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn roll(a: &Array, shift: &[i32], axes: &[i32]) -> Result<UniquePtr<Array>>;
        fn repeat(a: &Array, repeats: i32, axis: i32) -> Result<UniquePtr<Array>>;
        fn tile(a: &Array, reps: &[i32]) -> Result<UniquePtr<Array>>;
        /// Constant padding of `axes` by `low`/`high` with `value`.
        fn pad(
            a: &Array,
            axes: &[i32],
            low: &[i32],
            high: &[i32],
            value: f64,
        ) -> Result<UniquePtr<Array>>;
        /// Padding with an MLX mode (`"constant"`, `"edge"`, ...).
        fn pad_mode(
            a: &Array,
            axes: &[i32],
            low: &[i32],
            high: &[i32],
            value: f64,
            mode: &str,
        ) -> Result<UniquePtr<Array>>;
        fn tril(a: &Array, k: i32) -> Result<UniquePtr<Array>>;
        fn triu(a: &Array, k: i32) -> Result<UniquePtr<Array>>;
        /// A view with explicit element strides and offset (no bounds checks
        /// beyond MLX's own).
        fn as_strided(
            a: &Array,
            shape: &[i32],
            strides: &[i64],
            offset: usize,
        ) -> Result<UniquePtr<Array>>;
        fn diagonal(a: &Array, offset: i32, axis1: i32, axis2: i32) -> Result<UniquePtr<Array>>;

        // indexing
        /// Slices at `indices` along `axis`.
        fn take(a: &Array, indices: &Array, axis: i32) -> Result<UniquePtr<Array>>;
        /// Elements at `indices` of the flattened array.
        fn take_flat(a: &Array, indices: &Array) -> Result<UniquePtr<Array>>;
        fn take_along_axis(a: &Array, indices: &Array, axis: i32) -> Result<UniquePtr<Array>>;
        fn put_along_axis(
            a: &Array,
            indices: &Array,
            values: &Array,
            axis: i32,
        ) -> Result<UniquePtr<Array>>;
        /// Like `put_along_axis` but adds (`values` has the shape of `indices`).
        fn scatter_add_axis(
            a: &Array,
            indices: &Array,
            values: &Array,
            axis: i32,
        ) -> Result<UniquePtr<Array>>;
        /// `mx::scatter` with one index array on one axis (`updates` has shape
        /// `indices.shape + a.shape` with the `axis` entry 1).
        fn scatter(
            a: &Array,
            indices: &Array,
            updates: &Array,
            axis: i32,
        ) -> Result<UniquePtr<Array>>;
        /// `mx::scatter_add` with one index array on one axis.
        fn scatter_add(
            a: &Array,
            indices: &Array,
            updates: &Array,
            axis: i32,
        ) -> Result<UniquePtr<Array>>;
        fn scatter_prod(
            a: &Array,
            indices: &Array,
            updates: &Array,
            axis: i32,
        ) -> Result<UniquePtr<Array>>;
        fn scatter_max(
            a: &Array,
            indices: &Array,
            updates: &Array,
            axis: i32,
        ) -> Result<UniquePtr<Array>>;
        fn scatter_min(
            a: &Array,
            indices: &Array,
            updates: &Array,
            axis: i32,
        ) -> Result<UniquePtr<Array>>;
        /// `mx::gather` with one index array on one axis.
        fn gather(
            a: &Array,
            indices: &Array,
            axis: i32,
            slice_sizes: &[i32],
        ) -> Result<UniquePtr<Array>>;

        // reductions
        fn sum(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn mean(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn max(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn min(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn prod(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn logsumexp(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn all(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn any(a: &Array, axes: &[i32], keepdims: bool) -> Result<UniquePtr<Array>>;
        fn var(a: &Array, axes: &[i32], keepdims: bool, ddof: i32) -> Result<UniquePtr<Array>>;
        /// Standard deviation (`mx::std`).
        fn std_(a: &Array, axes: &[i32], keepdims: bool, ddof: i32) -> Result<UniquePtr<Array>>;
        fn argmax(a: &Array, axis: i32, keepdims: bool) -> Result<UniquePtr<Array>>;
        fn argmin(a: &Array, axis: i32, keepdims: bool) -> Result<UniquePtr<Array>>;
        fn softmax(a: &Array, axes: &[i32], precise: bool) -> Result<UniquePtr<Array>>;

        // scans
        fn cumsum(a: &Array, axis: i32, reverse: bool, inclusive: bool)
            -> Result<UniquePtr<Array>>;
        fn cumprod(
            a: &Array,
            axis: i32,
            reverse: bool,
            inclusive: bool,
        ) -> Result<UniquePtr<Array>>;
        fn cummax(a: &Array, axis: i32, reverse: bool, inclusive: bool)
            -> Result<UniquePtr<Array>>;
        fn cummin(a: &Array, axis: i32, reverse: bool, inclusive: bool)
            -> Result<UniquePtr<Array>>;
        fn logcumsumexp(
            a: &Array,
            axis: i32,
            reverse: bool,
            inclusive: bool,
        ) -> Result<UniquePtr<Array>>;

        // sorting
        fn sort(a: &Array, axis: i32) -> Result<UniquePtr<Array>>;
        fn argsort(a: &Array, axis: i32) -> Result<UniquePtr<Array>>;
        fn partition(a: &Array, kth: i32, axis: i32) -> Result<UniquePtr<Array>>;
        fn argpartition(a: &Array, kth: i32, axis: i32) -> Result<UniquePtr<Array>>;
        /// The `k` largest elements along `axis` (unsorted, as MLX returns them).
        fn topk(a: &Array, k: i32, axis: i32) -> Result<UniquePtr<Array>>;

        // convolution / contraction
        /// `mx::conv_general`: input `(N, *spatial, C_in)`, weight
        /// `(C_out, *kernel, C_in / groups)` (MLX's channels-last layout).
        fn conv_general(
            input: &Array,
            weight: &Array,
            stride: &[i32],
            padding_lo: &[i32],
            padding_hi: &[i32],
            kernel_dilation: &[i32],
            input_dilation: &[i32],
            groups: i32,
            flip: bool,
        ) -> Result<UniquePtr<Array>>;
        fn conv_transpose1d(
            input: &Array,
            weight: &Array,
            stride: i32,
            padding: i32,
            dilation: i32,
            output_padding: i32,
            groups: i32,
        ) -> Result<UniquePtr<Array>>;
        /// `stride`, `padding`, `dilation`, `output_padding` each have 2 entries.
        fn conv_transpose2d(
            input: &Array,
            weight: &Array,
            stride: &[i32],
            padding: &[i32],
            dilation: &[i32],
            output_padding: &[i32],
            groups: i32,
        ) -> Result<UniquePtr<Array>>;
        fn tensordot(
            a: &Array,
            b: &Array,
            axes_a: &[i32],
            axes_b: &[i32],
        ) -> Result<UniquePtr<Array>>;
        fn einsum(subscripts: &str, operands: &ArrayList) -> Result<UniquePtr<Array>>;
        /// `biases` may be null.
        ///
        /// # Safety
        /// `biases` is null or points to a live `Array`.
        unsafe fn quantized_matmul(
            x: &Array,
            w: &Array,
            scales: &Array,
            biases: *const Array,
            transpose: bool,
            group_size: i32,
            bits: i32,
            mode: &str,
        ) -> Result<UniquePtr<Array>>;
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op.
include!(concat!(env!("OUT_DIR"), "/ops_wrappers.rs"));

/// `mx::quantized_matmul`: `x @ dequantize(w)` (or `x @ dequantize(w)^T`
/// with `transpose`), `w` packed as `mx::quantize` packs it (uint32 words
/// along the last axis), `scales` (and, for "affine", `biases`) one per
/// `group_size` elements. `mode`: "affine", "mxfp4", "mxfp8", "nvfp4".
pub fn quantized_matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: Option<&Array>,
    transpose: bool,
    group_size: i32,
    bits: i32,
    mode: &str,
) -> Result<UniquePtr<Array>, crate::ShimError> {
    let b = biases.map_or(std::ptr::null(), |a| a as *const Array);
    // SAFETY: the pointer is null or comes from a live reference.
    unsafe { ffi::quantized_matmul(x, w, scales, b, transpose, group_size, bits, mode) }
        .map_err(|e| crate::ShimError::new("quantized_matmul", e))
}
