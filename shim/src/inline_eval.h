// A CPU graph evaluated on the caller's thread (inline_eval.cc).
#pragma once

#include <vector>

#include "mlx/array.h"

namespace rlx {

// Evaluates `xs` on this thread when the ops left to compute are ones the
// shim can run here (the plugin's kernels, float32 add, subtract, multiply
// and divide, and views) on the CPU, but for a few of MLX's own (each then
// evaluated by MLX alone, in its turn); returns false, having changed
// nothing, when more are MLX's (MLX's eval then runs the graph).
// `RLX_MLX_INLINE=0` turns it off.
bool eval_inline(const mlx::core::array* xs, size_t n);
inline bool eval_inline(const std::vector<mlx::core::array>& xs) {
  return eval_inline(xs.data(), xs.size());
}

}  // namespace rlx
