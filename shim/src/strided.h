// What the plugin's CPU kernels share as MLX primitives: starting a task
// on the CPU stream, and reading an array's elements row-major inside it
// whatever its layout (views, broadcast, transposed, sliced, are taken
// without a copy op in the graph).
#pragma once

#include <cstdint>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "rlx-mlx-shim/include/common.h"

namespace rlx {

// Allocates `out` (a fresh buffer: the kernels read their inputs while
// writing) and registers the task's arrays with the stream's encoder, to
// which the caller then dispatches the task.
inline mx::cpu::CommandEncoder& start_task(mx::Stream s, const std::vector<mx::array>& in,
                                           mx::array& out) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& enc = mx::cpu::get_command_encoder(s);
  for (const auto& a : in) enc.set_input_array(a);
  enc.set_output_array(out);
  return enc;
}

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
