// Reading an MLX array's elements row-major inside a kernel's task,
// whatever its layout: the plugin's CPU kernels take views (broadcast,
// transposed, sliced) without a copy op in the graph.
#pragma once

#include <cstdint>
#include <vector>

#include "rlx-mlx-shim/include/common.h"

namespace rlx {

// `a`'s elements row-major: its own buffer when it lies that way, else
// copied into `tmp` (a view: broadcast, transposed, sliced). Called inside
// a task, when `a`'s data is computed.
inline const float* row_major(const mx::array& a, std::vector<float>& tmp) {
  if (a.flags().row_contiguous) return a.data<float>();
  const float* src = a.data<float>();
  const auto& shape = a.shape();
  const auto& st = a.strides();
  int nd = a.ndim();
  tmp.resize(a.size());
  std::vector<int> idx(nd, 0);
  for (size_t k = 0; k < tmp.size(); ++k) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) off += int64_t(idx[d]) * st[d];
    tmp[k] = src[off];
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return tmp.data();
}

}  // namespace rlx
