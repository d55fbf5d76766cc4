//! The plugin's own CUDA kernels, run inside MLX's graph through MLX's
//! custom-kernel JIT (`src/cuda_kernels.cc` says why): the rotary embedding
//! from cos/sin tables, attention of one query row with an additive bias,
//! and rlx's saturating exp, sigmoid and SiLU, one MLX node each. Only for
//! a CUDA build of MLX on a GPU stream; callers check the device first.

use crate::array::Array;
use crate::kernels::RopeSpec;
use cxx::UniquePtr;

// `rope_cuda` takes eight arguments across the bridge; Rust callers use the
// wrapper below, which takes them as a `RopeSpec`.
#[allow(clippy::too_many_arguments)]
#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/cuda_kernels.h");

        type Array = crate::array::ffi::Array;

        /// Rotary embedding of `x [..., S, H * head_dim]` (float32, float16
        /// or bfloat16) with cos/sin tables of `stride`-wide rows, as
        /// `rope_cpu` computes it, on the GPU as one node.
        fn rope_cuda(
            x: &Array,
            cos: &Array,
            sin: &Array,
            head_dim: usize,
            n_rot: usize,
            stride: usize,
            per_token: bool,
            gptj: bool,
        ) -> Result<UniquePtr<Array>>;
        /// Whether [`attention_row_cuda`] takes these operands.
        fn attention_row_cuda_takes(q: &Array, k: &Array, v: &Array, bias: &Array) -> bool;
        /// `softmax(q k^T * scale + bias) v` of one query row: `q [B, H, 1,
        /// D]`, `k [B, HK, LK, D]`, `v [B, HK, LK, DV]` (query head `h`
        /// reads KV head `h / (H / HK)`), `bias` of `B * H * LK` elements
        /// read as `[B, H, 1, LK]`; `[B, H, 1, DV]` as one node.
        fn attention_row_cuda(
            q: &Array,
            k: &Array,
            v: &Array,
            bias: &Array,
            scale: f32,
        ) -> Result<UniquePtr<Array>>;
        /// rlx-runtime's saturating exp (`kind` 0), sigmoid (1) or SiLU (2)
        /// over it, elementwise, as one node.
        fn activation_rlx_cuda(x: &Array, kind: i32) -> Result<UniquePtr<Array>>;
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`).
include!(concat!(env!("OUT_DIR"), "/cuda_kernels_wrappers.rs"));

pub use ffi::attention_row_cuda_takes;

/// Rotary embedding of `x` on the GPU as one node ([`RopeSpec`] says how).
pub fn rope_cuda(
    x: &Array,
    cos: &Array,
    sin: &Array,
    spec: &RopeSpec,
) -> Result<UniquePtr<Array>, crate::ShimError> {
    use crate::ResultExt;
    ffi::rope_cuda(
        x,
        cos,
        sin,
        spec.head_dim,
        spec.n_rot,
        spec.stride,
        spec.per_token,
        spec.gptj,
    )
    .op("rope_cuda")
}

/// Which of rlx's saturating-exp activations [`activation_rlx_cuda`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpActivation {
    Exp = 0,
    Sigmoid = 1,
    Silu = 2,
}

/// rlx-runtime's saturating exp, sigmoid or SiLU of `x` on the GPU as one node.
pub fn activation_rlx_cuda(
    x: &Array,
    kind: ExpActivation,
) -> Result<UniquePtr<Array>, crate::ShimError> {
    use crate::ResultExt;
    ffi::activation_rlx_cuda(x, kind as i32).op("activation_rlx_cuda")
}
