//! `mlx::core::fast`: fused normalisation, RoPE and attention.

// The raw bridge's unsafe fns document their contract; cxx's generated
// items around them do not carry the docs.
#![allow(clippy::missing_safety_doc)]

use crate::array::Array;
use crate::ShimError;
use cxx::UniquePtr;
use std::ptr;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/fast.h");

        type Array = crate::array::ffi::Array;

        /// `weight` may be null.
        ///
        /// # Safety
        /// `weight` must be null or point to a live `Array`.
        unsafe fn rms_norm(x: &Array, weight: *const Array, eps: f32) -> Result<UniquePtr<Array>>;
        /// `weight` and `bias` may be null.
        ///
        /// # Safety
        /// `weight` and `bias` must each be null or point to a live `Array`.
        unsafe fn layer_norm(
            x: &Array,
            weight: *const Array,
            bias: *const Array,
            eps: f32,
        ) -> Result<UniquePtr<Array>>;
        /// Rotary position embedding on the last `dims` features
        /// (`traditional`: rotate adjacent pairs instead of the two halves).
        fn rope(
            x: &Array,
            dims: i32,
            traditional: bool,
            base: f32,
            scale: f32,
            offset: i32,
        ) -> Result<UniquePtr<Array>>;
        /// [`rope`] with the position offset given as an array.
        fn rope_offset_array(
            x: &Array,
            dims: i32,
            traditional: bool,
            base: f32,
            scale: f32,
            offset: &Array,
        ) -> Result<UniquePtr<Array>>;
        /// [`rope`] with explicit frequencies instead of a base.
        fn rope_freqs(
            x: &Array,
            dims: i32,
            traditional: bool,
            scale: f32,
            offset: i32,
            freqs: &Array,
        ) -> Result<UniquePtr<Array>>;
        /// `mask` and `sinks` may be null.
        ///
        /// # Safety
        /// `mask` and `sinks` must each be null or point to a live `Array`.
        unsafe fn scaled_dot_product_attention(
            queries: &Array,
            keys: &Array,
            values: &Array,
            scale: f32,
            mask_mode: &str,
            mask: *const Array,
            sinks: *const Array,
        ) -> Result<UniquePtr<Array>>;
    }
}

fn opt_ptr(a: Option<&Array>) -> *const Array {
    a.map_or(ptr::null(), |a| a as *const Array)
}

/// RMS normalisation over the last axis: `x / sqrt(mean(x^2) + eps) * weight`.
pub fn rms_norm(
    x: &Array,
    weight: Option<&Array>,
    eps: f32,
) -> Result<UniquePtr<Array>, ShimError> {
    // SAFETY: the pointer is null or comes from a live reference.
    unsafe { ffi::rms_norm(x, opt_ptr(weight), eps) }.map_err(|e| ShimError::new("rms_norm", e))
}

/// Layer normalisation over the last axis, with optional affine `weight`
/// and `bias`.
pub fn layer_norm(
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    eps: f32,
) -> Result<UniquePtr<Array>, ShimError> {
    // SAFETY: the pointers are null or come from live references.
    unsafe { ffi::layer_norm(x, opt_ptr(weight), opt_ptr(bias), eps) }
        .map_err(|e| ShimError::new("layer_norm", e))
}

/// Scaled dot-product attention `softmax(scale * q k^T + mask) v`.
/// Shapes: q `(B, Hq, Lq, D)`, k/v `(B, Hkv, Lk, D)`. `mask_mode` is `""`
/// (use `mask` if given: boolean keep-mask or additive float mask) or
/// `"causal"`.
pub fn scaled_dot_product_attention(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    mask_mode: &str,
    mask: Option<&Array>,
) -> Result<UniquePtr<Array>, ShimError> {
    scaled_dot_product_attention_sinks(queries, keys, values, scale, mask_mode, mask, None)
}

/// [`scaled_dot_product_attention`] with optional attention sinks (one
/// logit per head).
pub fn scaled_dot_product_attention_sinks(
    queries: &Array,
    keys: &Array,
    values: &Array,
    scale: f32,
    mask_mode: &str,
    mask: Option<&Array>,
    sinks: Option<&Array>,
) -> Result<UniquePtr<Array>, ShimError> {
    // SAFETY: the pointers are null or come from live references.
    unsafe {
        ffi::scaled_dot_product_attention(
            queries,
            keys,
            values,
            scale,
            mask_mode,
            opt_ptr(mask),
            opt_ptr(sinks),
        )
    }
    .map_err(|e| ShimError::new("scaled_dot_product_attention", e))
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op.
include!(concat!(env!("OUT_DIR"), "/fast_wrappers.rs"));
