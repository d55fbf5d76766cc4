// A region of elementwise steps, all of one shape, made into ONE of MLX's
// `Compiled` primitives with as many outputs as the region has values used
// outside it: the fused kernel mx::compile builds, but over a region that
// MLX's own fuser would split. MLX's fuser grows a kernel from one output
// backwards and stops at any value with a consumer outside the kernel, so
// a value read by two outputs' chains (an optimizer's new moment, read by
// the parameter's update and by the moment kept) ends its own kernel and
// travels through memory. Built here, the region's values stay in
// registers; MLX generates and caches the kernel as for its own (C++ on the
// CPU, CUDA through NVRTC, Metal), and the primitive is an ordinary node of
// the graph (MLX's fuser leaves a `Compiled` alone).
//
// Built while mx::compile traces (the region's inputs are then tracers) or
// on real arrays: MLX's `Compiled` keeps the arrays it was made with only
// to name the kernel's arguments and read constants.

#include "rlx-mlx-shim/include/fusion.h"

#include <unordered_set>

#include "mlx/primitives.h"  // mx::Compiled (exported, unlike the op primitives)

namespace rlx {

namespace {

// The step codes of rlx-mlx-shim's `fusion::Step` (src/fusion.rs).
enum Code : uint32_t { kAdd = 0, kSubtract, kMultiply, kDivide, kSqrt, kNegative };

// MLX's primitive classes are not exported from libmlx (only the ops
// are), so each step's primitive is taken from the op building it on two
// scalars (no broadcast to insert), then reused on the region's operands.
std::shared_ptr<mx::Primitive> primitive(uint32_t code, const mx::Stream& s) {
  const mx::array z(0.0f);
  switch (code) {
    case kAdd: return mx::add(z, z, s).primitive_ptr();
    case kSubtract: return mx::subtract(z, z, s).primitive_ptr();
    case kMultiply: return mx::multiply(z, z, s).primitive_ptr();
    case kDivide: return mx::divide(z, z, s).primitive_ptr();
    case kSqrt: return mx::sqrt(z, s).primitive_ptr();
    case kNegative: return mx::negative(z, s).primitive_ptr();
  }
  throw std::invalid_argument("[rlx fusion] unknown step code " + std::to_string(code));
}

bool unary(uint32_t code) { return code == kSqrt || code == kNegative; }

}  // namespace

std::unique_ptr<ArrayList> fuse_elementwise(
    const ArrayList& inputs,
    rust::Slice<const uint8_t> constant,
    rust::Slice<const uint32_t> steps,
    rust::Slice<const uint32_t> outputs,
    rust::Slice<const int32_t> shape) {
  const mx::Shape out_shape = to_shape(shape);
  const std::size_t n_in = inputs.v.size();
  if (constant.size() != n_in || steps.size() % 3 != 0 || steps.empty() || outputs.empty()) {
    throw std::invalid_argument("[rlx fusion] malformed region");
  }
  mx::Stream s = mx::default_stream(thread_device());

  // Inputs: float32, of the region's shape or one element (a scalar, read
  // once per kernel call; made 0-d, which MLX's kernels read as a scalar).
  std::vector<mx::array> ins;
  std::unordered_set<uintptr_t> constant_ids;
  for (std::size_t i = 0; i < n_in; ++i) {
    mx::array x = inputs.v[i];
    if (x.dtype() != mx::float32) {
      throw std::invalid_argument("[rlx fusion] inputs must be float32");
    }
    if (x.size() == 1 && x.ndim() != 0) {
      x = mx::reshape(x, {}, s);
    } else if (x.size() != 1 && x.shape() != out_shape) {
      throw std::invalid_argument("[rlx fusion] an input is neither the region's shape nor a scalar");
    }
    // A constant is inlined into the kernel's source: only an array that
    // holds its value now (not a tracer, not yet to be computed).
    if (constant[i] && x.ndim() == 0 && !x.has_primitive() && !x.is_tracer() &&
        x.is_available()) {
      constant_ids.insert(x.id());
    }
    ins.push_back(std::move(x));
  }

  // The tape: one array per step, over the inputs and earlier steps.
  std::vector<mx::array> tape;
  auto operand = [&](uint32_t k) -> const mx::array& {
    if (k < n_in) return ins[k];
    if (k - n_in < tape.size()) return tape[k - n_in];
    throw std::invalid_argument("[rlx fusion] a step reads a later step");
  };
  for (std::size_t i = 0; i < steps.size(); i += 3) {
    uint32_t code = steps[i];
    std::vector<mx::array> args{operand(steps[i + 1])};
    if (!unary(code)) args.push_back(operand(steps[i + 2]));
    tape.emplace_back(out_shape, mx::float32, primitive(code, s), std::move(args));
  }
  std::vector<mx::array> outs;
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (uint32_t o : outputs) {
    if (o >= tape.size()) {
      throw std::invalid_argument("[rlx fusion] an output is not a step");
    }
    outs.push_back(tape[o]);
    shapes.push_back(out_shape);
    dtypes.push_back(mx::float32);
  }
  auto compiled = std::make_shared<mx::Compiled>(s, ins, outs, tape, std::move(constant_ids));
  return std::make_unique<ArrayList>(
      mx::array::make_arrays(std::move(shapes), dtypes, compiled, ins));
}

}  // namespace rlx
