//! The plugin's own CPU kernels, run inside MLX's graph as primitives
//! (`src/kernels.cc` says why): erf-GELU in the approximation rlx-runtime's
//! CPU backend uses, vectorised with AVX2/FMA where the CPU has them; the
//! matrix product (`src/gemm.cc`); RmsNorm / LayerNorm and rotary
//! embedding, one primitive per node (`src/row_kernels.cc`).

use crate::array::{Array, ArrayList};
use cxx::UniquePtr;

// `rope_cpu` takes eight arguments across the bridge; Rust callers use the
// wrapper below, which takes them as a `RopeSpec`.
#[allow(clippy::too_many_arguments)]
#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/kernels.h");

        type Array = crate::array::ffi::Array;
        type ArrayList = crate::array::ffi::ArrayList;

        /// Erf-GELU of a float32 array, on the CPU stream.
        fn gelu_erf_cpu(x: &Array) -> Result<UniquePtr<Array>>;
        /// rlx-runtime's saturating exp of a float32 array (its clamp and
        /// polynomial), on the CPU stream as one primitive.
        fn exp_rlx_cpu(x: &Array) -> Result<UniquePtr<Array>>;
        /// `1/(1 + e^-x)` over the saturating exp, one primitive.
        fn sigmoid_rlx_cpu(x: &Array) -> Result<UniquePtr<Array>>;
        /// `x/(1 + e^-x)` over the saturating exp, one primitive.
        fn silu_rlx_cpu(x: &Array) -> Result<UniquePtr<Array>>;
        /// SwiGLU of float32 rows `[.., 2N]` holding the gate and up halves
        /// (`gate_first` says which half comes first): `up * silu(gate)`
        /// as rlx-cpu's `swiglu_rows` computes it, `[.., N]`, one primitive.
        fn swiglu_cpu(x: &Array, gate_first: bool) -> Result<UniquePtr<Array>>;
        /// `a * b + c` with one rounding (`std::fma`), elementwise over
        /// three float32 or three float64 arrays of one shape, on the CPU
        /// stream as one primitive (`src/fma.cc`).
        fn fma_cpu(a: &Array, b: &Array, c: &Array) -> Result<UniquePtr<Array>>;
        /// A float32 matrix product `[..., M, K] x [K, N]` on the CPU stream,
        /// with the plugin's own kernel for a few rows and its own threads
        /// around the BLAS.
        fn matmul_cpu(a: &Array, b: &Array) -> Result<UniquePtr<Array>>;
        /// How many threads `matmul_cpu` would use now for one
        /// `[m, k] x [k, n]` product (its own, times the BLAS's where the
        /// BLAS does the work): a diagnostic of what a host left us.
        fn matmul_cpu_threads(m: i64, k: i64, n: i64) -> i64;
        /// `x [..., K]` times an affine-quantized weight `[N, K]` (uint32
        /// words of `bits`-wide codes; float32 scales and biases `[N, K /
        /// group]`), as MLX's `quantized_matmul` with transpose, on the CPU
        /// stream with the plugin's own threads (src/quantized.cc).
        fn quantized_matmul_cpu(
            x: &Array,
            w: &Array,
            scales: &Array,
            biases: &Array,
            group: i32,
            bits: i32,
        ) -> Result<UniquePtr<Array>>;
        /// Whether `quantized_matmul_cpu` takes these operands (4 or 8
        /// bits, groups of 32, 64 or 128, the dtypes and shapes above).
        fn quantized_matmul_cpu_takes(
            x: &Array,
            w: &Array,
            scales: &Array,
            biases: &Array,
            group: i32,
            bits: i32,
        ) -> bool;
        /// RmsNorm (`rms`) or LayerNorm of a float32 array over its last
        /// axis, `* gamma + beta`, on the CPU stream as one primitive.
        fn norm_last_cpu(
            x: &Array,
            gamma: &Array,
            beta: &Array,
            eps: f32,
            rms: bool,
        ) -> Result<UniquePtr<Array>>;
        /// Rotary embedding of a float32 `x [..., S, H * head_dim]` on the CPU
        /// stream as one primitive: the first `n_rot` dims of each head
        /// rotated by cos/sin tables of `stride`-wide rows (row = position,
        /// or token with `per_token`), NeoX pairs or GPT-J with `gptj`.
        fn rope_cpu(
            x: &Array,
            cos: &Array,
            sin: &Array,
            head_dim: usize,
            n_rot: usize,
            stride: usize,
            per_token: bool,
            gptj: bool,
        ) -> Result<UniquePtr<Array>>;
        /// Rows of a float32 `table [E, ...]` picked by float32 indices as
        /// rlx-cpu's Gather on axis 0 reads them (NaN and negatives read
        /// row 0, truncated; an index >= E gives zeros), one primitive:
        /// `idx.shape ++ table.shape[1..]`.
        fn gather_rows_cpu(table: &Array, idx: &Array) -> Result<UniquePtr<Array>>;
        /// Scaled dot-product attention of float32 `q [B, H, Lq, D]`,
        /// `k [B, Hkv, Lk, D]`, `v [B, Hkv, Lk, Dv]`, no mask or causal, on
        /// the CPU stream as one primitive: `[B, H, Lq, Dv]`; with `bshd`
        /// every tensor, the output too, is `[B, L, H, D]` instead.
        fn attention_cpu(
            q: &Array,
            k: &Array,
            v: &Array,
            scale: f32,
            causal: bool,
            bshd: bool,
        ) -> Result<UniquePtr<Array>>;
        /// [`attention_cpu`] with a float32 `bias` of `B * H * Lq * Lk`
        /// elements, read as `[B, H, Lq, Lk]` in either layout, added to
        /// the scaled scores (the bias is the mask: no causal one).
        fn attention_bias_cpu(
            q: &Array,
            k: &Array,
            v: &Array,
            bias: &Array,
            scale: f32,
            bshd: bool,
        ) -> Result<UniquePtr<Array>>;
        /// A Scan whose body is elementwise float32 arithmetic, as one
        /// primitive on the CPU stream: `operands` the initial carry, the
        /// `n_bcast` broadcast operands, then each xs; `code` the body as
        /// `[op, dst, a, b]` groups over `n_regs` registers (src/scan_kernel.cc
        /// numbers them), the carry after a step in `result`; `rows` the
        /// steps whose carry the output keeps (empty: the final carry).
        fn scan_elementwise_cpu(
            operands: &ArrayList,
            n_bcast: usize,
            code: &[i32],
            n_regs: usize,
            result: usize,
            len: usize,
            rows: &[i64],
        ) -> Result<UniquePtr<Array>>;
        /// Whether the vector kernels (AVX2 + FMA on x86, NEON on arm64)
        /// run on this CPU (and are not switched off by
        /// [`set_portable_kernels`]).
        fn kernels_vectorized() -> bool;
        /// Every kernel of the plugin's takes its portable loop when
        /// `on`, on any CPU; process-wide. Starts as
        /// `RLX_MLX_PORTABLE_KERNELS=1` says.
        fn set_portable_kernels(on: bool);
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op.
include!(concat!(env!("OUT_DIR"), "/kernels_wrappers.rs"));

pub use ffi::{
    kernels_vectorized, matmul_cpu_threads, quantized_matmul_cpu_takes, set_portable_kernels,
};

/// How [`rope_cpu`] rotates: `x` is `[..., S, H * head_dim]`; the first
/// `n_rot` dims of each head turn by tables of `stride`-wide rows (row =
/// position, or token with `per_token`); NeoX pairs, GPT-J with `gptj`.
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec {
    pub head_dim: usize,
    pub n_rot: usize,
    pub stride: usize,
    pub per_token: bool,
    pub gptj: bool,
}

/// Rotary embedding of a float32 `x` on the CPU stream as one primitive
/// ([`RopeSpec`] says how).
pub fn rope_cpu(
    x: &Array,
    cos: &Array,
    sin: &Array,
    spec: &RopeSpec,
) -> Result<UniquePtr<Array>, crate::ShimError> {
    use crate::ResultExt;
    ffi::rope_cpu(
        x,
        cos,
        sin,
        spec.head_dim,
        spec.n_rot,
        spec.stride,
        spec.per_token,
        spec.gptj,
    )
    .op("rope_cpu")
}
