// A kernel of the plugin's host (or another Rust caller) as an MLX
// primitive: see src/host_kernel.cc.
#pragma once

#include "rlx-mlx-shim/include/array.h"
#include "rust/cxx.h"

namespace rlx {

struct HostCall;

// A node computing `call` on `inputs`, of this shape and dtype, on the CPU
// stream. The inputs are made row-contiguous first (a no-op for those that
// already are).
std::unique_ptr<Array> host_kernel_node(const ArrayList& inputs, rust::Box<HostCall> call,
                                        rust::Slice<const int32_t> shape, DType dtype);

}  // namespace rlx
