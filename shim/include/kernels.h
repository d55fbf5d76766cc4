// The plugin's own CPU kernels, run inside MLX's graph as primitives (see
// src/kernels.cc for why and how).
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// Erf-GELU of a float32 array, x/2 * (1 + erf(x/sqrt 2)), on the CPU
// stream, with the same approximation rlx-runtime's CPU backend uses.
// Throws for other dtypes.
std::unique_ptr<Array> gelu_erf_cpu(const Array& x);
// rlx-runtime's saturating exp (clamped to [-87.3, 88.7], its polynomial),
// sigmoid 1/(1 + e^-x) and silu x/(1 + e^-x) over it, of a float32 array
// on the CPU stream, each one primitive. Throw for other dtypes.
std::unique_ptr<Array> exp_rlx_cpu(const Array& x);
std::unique_ptr<Array> sigmoid_rlx_cpu(const Array& x);
std::unique_ptr<Array> silu_rlx_cpu(const Array& x);
// up * silu(gate) of float32 rows [.., 2N] holding both halves (gate first
// when `gate_first`), as rlx-cpu's swiglu_rows: [.., N], one primitive.
std::unique_ptr<Array> swiglu_cpu(const Array& x, bool gate_first);
// a * b + c with one rounding (std::fma), elementwise over three float32
// or three float64 arrays of one shape, on the CPU stream, one primitive
// (src/fma.cc). Throws for other dtypes or unequal shapes.
std::unique_ptr<Array> fma_cpu(const Array& a, const Array& b, const Array& c);

// A float32 matrix product [..., M, K] x [K, N] (or x [..., K, N] with
// the same batch dims) on the CPU stream, with the plugin's own kernel for
// few rows and its own threads around the BLAS (src/gemm.cc says why). The
// operands may be any strided views. Throws for other dtypes and shapes.
std::unique_ptr<Array> matmul_cpu(const Array& a, const Array& b);
// How many threads matmul_cpu would use now for one [m, k] x [k, n]
// product: the plugin's own, times the BLAS's where the BLAS does the work
// (a diagnostic: what a host that pinned the process's BLAS left us).
int64_t matmul_cpu_threads(int64_t m, int64_t k, int64_t n);
// Whether matmul_cpu takes these operands.
bool matmul_cpu_takes(const Array& a, const Array& b);

// x [..., K] times an affine-quantized weight [N, K] (uint32 words of
// `bits`-wide codes, low bits first; float32 scales and biases [N, K /
// group]: w = scale * code + bias), as MLX's quantized_matmul with
// transpose, on the CPU stream with the plugin's own threads: streamed for
// a few rows, dequantised blocks through the BLAS for more
// (src/quantized.cc). 4 or 8 bits, groups of 32, 64 or 128; throws
// otherwise.
std::unique_ptr<Array> quantized_matmul_cpu(const Array& x, const Array& w, const Array& scales,
                                            const Array& biases, int group, int bits);
// Whether quantized_matmul_cpu takes these operands.
bool quantized_matmul_cpu_takes(const Array& x, const Array& w, const Array& scales,
                                const Array& biases, int group, int bits);

// RmsNorm (`rms`) or LayerNorm of a float32 array over its last axis,
// `* gamma + beta` (one value per feature each), on the CPU stream, as one
// primitive (src/row_kernels.cc says why). Throws for other dtypes.
std::unique_ptr<Array> norm_last_cpu(const Array& x, const Array& gamma, const Array& beta,
                                     float eps, bool rms);
// Rotary embedding of a float32 x [..., S, H * head_dim] (the leading axes
// the batch; [B, S, H, D] is one) on the CPU stream: the first
// `n_rot` dims of each head rotated by cos/sin tables whose rows are
// `stride` wide (row = position, or = token with `per_token`); NeoX
// (rotate-half) pairs, or GPT-J (interleaved) with `gptj`; the rest copied.
std::unique_ptr<Array> rope_cpu(const Array& x, const Array& cos, const Array& sin,
                                size_t head_dim, size_t n_rot, size_t stride, bool per_token,
                                bool gptj);

// Rows of a float32 table [E, ...] picked by float32 indices, as
// rlx-cpu's Gather on axis 0 reads them (NaN and negatives read row 0,
// truncated toward zero; an index >= E gives zeros), on the CPU stream as
// one primitive: idx.shape ++ table.shape[1:].
std::unique_ptr<Array> gather_rows_cpu(const Array& table, const Array& idx);

// Scaled dot-product attention of float32 q [B, H, Lq, D], k [B, Hkv, Lk,
// D], v [B, Hkv, Lk, Dv] (H a multiple of Hkv), with no mask or causal
// (queries at the end of the keys), on the CPU stream as one primitive:
// [B, H, Lq, Dv]. With `bshd` every tensor, the output too, is [B, L, H,
// D] instead. Throws for other dtypes and shapes.
std::unique_ptr<Array> attention_cpu(const Array& q, const Array& k, const Array& v, float scale,
                                     bool causal, bool bshd);
// The same with a float32 `bias` of B * H * Lq * Lk elements, read as [B,
// H, Lq, Lk] in either layout, added to the scaled scores (no causal mask:
// the bias is the mask).
std::unique_ptr<Array> attention_bias_cpu(const Array& q, const Array& k, const Array& v,
                                          const Array& bias, float scale, bool bshd);

// A Scan whose body is elementwise float32 arithmetic, run as one primitive
// on the CPU stream (src/scan_kernel.cc says why and how the program reads).
// operands: the initial carry, the n_bcast broadcast operands, then each xs
// ([len, carry shape...]); rows: the step whose carry each output row holds
// (ascending), or empty for the final carry alone. Throws on any operand or
// program that does not fit.
std::unique_ptr<Array> scan_elementwise_cpu(const ArrayList& operands, size_t n_bcast,
                                            rust::Slice<const int32_t> code, size_t n_regs,
                                            size_t result, size_t len,
                                            rust::Slice<const int64_t> rows);

// Whether this CPU has the vector kernel (AVX2 + FMA); otherwise the
// kernels run their scalar loop (same formula).
bool kernels_vectorized();
void set_portable_kernels(bool on);

}  // namespace rlx
