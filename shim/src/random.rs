//! `mlx::core::random` with explicit keys (deterministic: the same key gives
//! the same numbers).

use crate::array::{Array, ArrayList, DType};
use cxx::UniquePtr;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/random.h");

        type Array = crate::array::ffi::Array;
        type ArrayList = crate::array::ffi::ArrayList;
        type DType = crate::array::ffi::DType;

        /// A PRNG key (uint32 array of shape `[2]`) from a seed.
        #[cxx_name = "random_key"]
        fn key(seed: u64) -> Result<UniquePtr<Array>>;
        /// Seeds MLX's global key sequence (only used by key-less MLX calls).
        #[cxx_name = "random_seed"]
        fn seed(seed: u64) -> Result<()>;
        /// Splits a key into two new keys.
        #[cxx_name = "random_split"]
        fn split(key: &Array) -> Result<UniquePtr<ArrayList>>;
        /// Splits a key into `num` keys (array of shape `[num, 2]`).
        #[cxx_name = "random_split_n"]
        fn split_n(key: &Array, num: i32) -> Result<UniquePtr<Array>>;
        /// Random bits: uint32 (width 4), uint16 (2) or uint8 (1).
        #[cxx_name = "random_bits"]
        fn bits(shape: &[i32], width: i32, key: &Array) -> Result<UniquePtr<Array>>;
        /// Uniform in `[low, high)`.
        #[cxx_name = "random_uniform"]
        fn uniform(
            low: f64,
            high: f64,
            shape: &[i32],
            dtype: DType,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        /// Normal samples with mean `loc` and standard deviation `scale`.
        #[cxx_name = "random_normal"]
        fn normal_loc_scale(
            shape: &[i32],
            dtype: DType,
            loc: f32,
            scale: f32,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        /// Integers uniform in `[low, high)`.
        #[cxx_name = "random_randint"]
        fn randint(
            low: i64,
            high: i64,
            shape: &[i32],
            dtype: DType,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        /// Booleans, true with probability `p`.
        #[cxx_name = "random_bernoulli"]
        fn bernoulli(p: f64, shape: &[i32], key: &Array) -> Result<UniquePtr<Array>>;
        #[cxx_name = "random_truncated_normal"]
        fn truncated_normal(
            lower: f64,
            upper: f64,
            shape: &[i32],
            dtype: DType,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        #[cxx_name = "random_gumbel"]
        fn gumbel(shape: &[i32], dtype: DType, key: &Array) -> Result<UniquePtr<Array>>;
        /// `num_samples` category indices per row of `logits` along `axis`.
        #[cxx_name = "random_categorical"]
        fn categorical(
            logits: &Array,
            axis: i32,
            num_samples: i32,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        /// Random permutation of `x` along `axis`.
        #[cxx_name = "random_permutation"]
        fn permutation(x: &Array, axis: i32, key: &Array) -> Result<UniquePtr<Array>>;
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op (`random::name`).
include!(concat!(env!("OUT_DIR"), "/random_wrappers.rs"));

/// Standard normal samples.
pub fn normal(
    shape: &[i32],
    dtype: DType,
    key: &Array,
) -> Result<UniquePtr<Array>, crate::ShimError> {
    ffi::normal_loc_scale(shape, dtype, 0.0, 1.0, key)
        .map_err(|e| crate::ShimError::new("random::normal", e))
}
