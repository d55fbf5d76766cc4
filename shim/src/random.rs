//! `mlx::core::random` with explicit keys (deterministic: the same key gives
//! the same numbers).

use crate::array::{Array, ArrayList, DType};
use cxx::UniquePtr;
use ffi::*;

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/random.h");

        type Array = crate::array::ffi::Array;
        type ArrayList = crate::array::ffi::ArrayList;
        type DType = crate::array::ffi::DType;

        fn random_key(seed: u64) -> Result<UniquePtr<Array>>;
        fn random_seed(seed: u64) -> Result<()>;
        fn random_split(key: &Array) -> Result<UniquePtr<ArrayList>>;
        fn random_split_n(key: &Array, num: i32) -> Result<UniquePtr<Array>>;
        fn random_bits(shape: &[i32], width: i32, key: &Array) -> Result<UniquePtr<Array>>;
        fn random_uniform(
            low: f64,
            high: f64,
            shape: &[i32],
            dtype: DType,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        fn random_normal(
            shape: &[i32],
            dtype: DType,
            loc: f32,
            scale: f32,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        fn random_randint(
            low: i64,
            high: i64,
            shape: &[i32],
            dtype: DType,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        fn random_bernoulli(p: f64, shape: &[i32], key: &Array) -> Result<UniquePtr<Array>>;
        fn random_truncated_normal(
            lower: f64,
            upper: f64,
            shape: &[i32],
            dtype: DType,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        fn random_gumbel(shape: &[i32], dtype: DType, key: &Array) -> Result<UniquePtr<Array>>;
        fn random_categorical(
            logits: &Array,
            axis: i32,
            num_samples: i32,
            key: &Array,
        ) -> Result<UniquePtr<Array>>;
        fn random_permutation(x: &Array, axis: i32, key: &Array) -> Result<UniquePtr<Array>>;
    }
}

/// Wrappers named after MLX (`random::key`, `random::normal`, ...).
macro_rules! random_wrappers {
    ($( $(#[$m:meta])* fn $name:ident => $ffi:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty; )*) => {
        $(
            $(#[$m])*
            pub fn $name($($arg: $ty),*) -> Result<$ret, crate::ShimError> {
                $ffi($($arg),*)
                    .map_err(|e| crate::ShimError::new(concat!("random::", stringify!($name)), e))
            }
        )*
    };
}

random_wrappers! {
    /// A PRNG key (uint32 array of shape `[2]`) from a seed.
    fn key => random_key(seed: u64) -> UniquePtr<Array>;
    /// Seeds MLX's global key sequence (only used by key-less MLX calls).
    fn seed => random_seed(seed: u64) -> ();
    /// Splits a key into two new keys.
    fn split => random_split(key: &Array) -> UniquePtr<ArrayList>;
    /// Splits a key into `num` keys (array of shape `[num, 2]`).
    fn split_n => random_split_n(key: &Array, num: i32) -> UniquePtr<Array>;
    /// Random bits: uint32 (width 4), uint16 (2) or uint8 (1).
    fn bits => random_bits(shape: &[i32], width: i32, key: &Array) -> UniquePtr<Array>;
    /// Uniform in `[low, high)`.
    fn uniform => random_uniform(low: f64, high: f64, shape: &[i32], dtype: DType, key: &Array) -> UniquePtr<Array>;
    /// Standard normal samples.
    fn normal => random_normal_std(shape: &[i32], dtype: DType, key: &Array) -> UniquePtr<Array>;
    /// Normal samples with mean `loc` and standard deviation `scale`.
    fn normal_loc_scale => random_normal(shape: &[i32], dtype: DType, loc: f32, scale: f32, key: &Array) -> UniquePtr<Array>;
    /// Integers uniform in `[low, high)`.
    fn randint => random_randint(low: i64, high: i64, shape: &[i32], dtype: DType, key: &Array) -> UniquePtr<Array>;
    /// Booleans, true with probability `p`.
    fn bernoulli => random_bernoulli(p: f64, shape: &[i32], key: &Array) -> UniquePtr<Array>;
    fn truncated_normal => random_truncated_normal(lower: f64, upper: f64, shape: &[i32], dtype: DType, key: &Array) -> UniquePtr<Array>;
    fn gumbel => random_gumbel(shape: &[i32], dtype: DType, key: &Array) -> UniquePtr<Array>;
    /// `num_samples` category indices per row of `logits` along `axis`.
    fn categorical => random_categorical(logits: &Array, axis: i32, num_samples: i32, key: &Array) -> UniquePtr<Array>;
    /// Random permutation of `x` along `axis`.
    fn permutation => random_permutation(x: &Array, axis: i32, key: &Array) -> UniquePtr<Array>;
}

fn random_normal_std(
    shape: &[i32],
    dtype: DType,
    key: &Array,
) -> Result<UniquePtr<Array>, cxx::Exception> {
    ffi::random_normal(shape, dtype, 0.0, 1.0, key)
}
