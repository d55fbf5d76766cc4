// Host <-> GPU copies for the CUDA build of MLX (src/cuda_copy.cc says why).
// Internal to the shim's C++: no bridge declares these.
#pragma once

#include <cstddef>

#include "mlx/mlx.h"

namespace rlx::cuda_copy {

namespace mx = mlx::core;

// Copies the evaluated, row-contiguous `x` (n bytes) into `dst` with one
// DMA when its buffer is in GPU memory; false, copying nothing, otherwise.
bool to_host(const mx::array& x, void* dst, std::size_t n);

// Writes n bytes from `src` into the buffer of the freshly allocated `x`
// with one DMA; false, writing nothing, when the driver copies are off.
bool from_host(const mx::array& x, const void* src, std::size_t n);

}  // namespace rlx::cuda_copy
