// The plugin's own CUDA kernels, run inside MLX's graph through MLX's
// custom-kernel JIT (see src/cuda_kernels.cc for why). Each takes float32,
// float16 or bfloat16 operands, computes in float32, and runs only on a
// CUDA build of MLX with a GPU stream; callers check the device first.
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// Rotary embedding of x [..., S, H * head_dim] with cos/sin tables of
// `stride`-wide rows (row = position, or token with `per_token`): the first
// `n_rot` dims of each head rotated, NeoX pairs or GPT-J with `gptj`, the
// rest copied. One node.
std::unique_ptr<Array> rope_cuda(const Array& x, const Array& cos, const Array& sin,
                                 size_t head_dim, size_t n_rot, size_t stride, bool per_token,
                                 bool gptj);

// Whether attention_row_cuda takes these operands.
bool attention_row_cuda_takes(const Array& q, const Array& k, const Array& v, const Array& bias);
// softmax(q k^T * scale + bias) v for one query row: q [B, H, 1, D], k
// [B, HK, LK, D], v [B, HK, LK, DV] (query head h reads KV head
// h / (H / HK)), bias of B * H * LK elements read as [B, H, 1, LK]. One node.
std::unique_ptr<Array> attention_row_cuda(const Array& q, const Array& k, const Array& v,
                                          const Array& bias, float scale);

// rlx-runtime's saturating exp (kind 0), sigmoid 1/(1 + e^-x) (1) and SiLU
// x/(1 + e^-x) (2) over it, elementwise. One node.
std::unique_ptr<Array> activation_rlx_cuda(const Array& x, int32_t kind);

}  // namespace rlx
