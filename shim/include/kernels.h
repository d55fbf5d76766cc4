// The plugin's own CPU kernels, run inside MLX's graph as primitives (see
// src/kernels.cc for why and how).
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// Erf-GELU of a float32 array, x/2 * (1 + erf(x/sqrt 2)), on the CPU
// stream, with the same approximation rlx-runtime's CPU backend uses.
// Throws for other dtypes.
std::unique_ptr<Array> gelu_erf_cpu(const Array& x);

// Whether this CPU has the vector kernel (AVX2 + FMA); otherwise the
// kernels run their scalar loop (same formula).
bool kernels_vectorized();

}  // namespace rlx
