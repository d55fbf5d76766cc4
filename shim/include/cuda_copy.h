// Host <-> GPU copies for the CUDA build of MLX (src/cuda_copy.cc says why).
// Internal to the shim's C++: no bridge declares these.
#pragma once

#include <cstddef>

#include "mlx/mlx.h"

namespace rlx::cuda_copy {

namespace mx = mlx::core;

// Whether the copies below are done by the CUDA driver (a CUDA build of
// MLX on a machine with a GPU, and `RLX_MLX_CUDA_COPY` not 0).
bool enabled();

// Whether `x`'s buffer is device memory (not managed memory, which the
// host can read and write in place).
bool in_device_memory(const mx::array& x);

// Copies the evaluated, row-contiguous `x` (n bytes) into `dst` with one
// DMA when its buffer is in GPU memory; false, copying nothing, otherwise.
bool to_host(const mx::array& x, void* dst, std::size_t n);

// Writes n bytes from `src` into the buffer of the freshly allocated `x`
// with one DMA; false, writing nothing, when the driver copies are off.
bool from_host(const mx::array& x, const void* src, std::size_t n);

// What pin did.
enum class Pinned { kOff, kYes, kOutOfMemory };

// Page-locks the n bytes at p for the GPU's DMA engine (host memory a host
// mapped, src/host_memory.cc): kYes; kOff, changing nothing, when the
// driver copies are off; kOutOfMemory when the driver cannot lock that
// much. Throws what the driver says when it refuses otherwise.
Pinned pin(void* p, std::size_t n);

// Undoes pin(p, n).
void unpin(void* p);

}  // namespace rlx::cuda_copy
