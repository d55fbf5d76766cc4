// The shape a rotary embedding of x [..., S, H * head_dim] with cos/sin
// tables of `stride`-wide rows reads, checked: one reading for the CPU
// kernel (row_kernels.cc) and the CUDA one (cuda_kernels.cc).
#pragma once

#include <cstddef>
#include <stdexcept>

#include "mlx/array.h"

namespace rlx {

// The leading axes are the batch: x is read as [B, S, H, D] as it lies.
struct RopeShape {
  size_t b, s, h;
};

inline RopeShape rope_shape(const mlx::core::array& x, const mlx::core::array& cos,
                            const mlx::core::array& sin, size_t head_dim, size_t n_rot,
                            size_t stride, bool per_token) {
  const auto& sh = x.shape();
  int r = x.ndim();
  if (r < 2 || head_dim == 0 || size_t(sh[r - 1]) % head_dim != 0) {
    throw std::invalid_argument("[rlx rope] needs x as [..., S, H * head_dim]");
  }
  RopeShape p{1, size_t(sh[r - 2]), size_t(sh[r - 1]) / head_dim};
  for (int i = 0; i < r - 2; ++i) p.b *= size_t(sh[i]);
  size_t rows = per_token ? p.b * p.s : p.s;
  if (n_rot > head_dim || n_rot % 2 != 0 || n_rot / 2 > stride || cos.size() < rows * stride ||
      sin.size() != cos.size()) {
    throw std::invalid_argument("[rlx rope] tables too small for the rotation asked");
  }
  return p;
}

}  // namespace rlx
