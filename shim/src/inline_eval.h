// A CPU graph evaluated on the caller's thread (inline_eval.cc).
#pragma once

#include <vector>

#include "mlx/array.h"

namespace rlx {

// Evaluates `xs` on this thread when every op left to compute is one the
// shim can run here (the plugin's kernels, float32 add, subtract, multiply
// and divide, and views) on the CPU; returns false, having changed nothing,
// when one is not (MLX's eval then runs the graph). `RLX_MLX_INLINE=0`
// turns it off.
bool eval_inline(const std::vector<mlx::core::array>& xs);

}  // namespace rlx
