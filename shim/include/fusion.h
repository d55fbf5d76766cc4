// Several elementwise outputs as one MLX `Compiled` primitive: see
// src/fusion.cc.
#pragma once

#include "rlx-mlx-shim/include/array.h"
#include "rust/cxx.h"

namespace rlx {

std::unique_ptr<ArrayList> fuse_elementwise(
    const ArrayList& inputs,
    rust::Slice<const uint8_t> constant,
    rust::Slice<const uint32_t> steps,
    rust::Slice<const uint32_t> outputs,
    rust::Slice<const int32_t> shape);

}  // namespace rlx
