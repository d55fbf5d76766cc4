// Shared helpers for every bridge of rlx-mlx-shim.
//
// Every header of the shim includes this one, so the custom
// `rust::behavior::trycatch` below is seen by all cxx bridges: it turns any
// C++ exception (MLX throws std::invalid_argument / std::runtime_error /
// std::out_of_range, all std::exception) into an `Err(cxx::Exception)` whose
// message is the exception's own `what()`. Non-std exceptions are caught
// too, so nothing can escape into Rust.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/mlx.h"
#include "rust/cxx.h"

namespace rust {
namespace behavior {
template <typename Try, typename Fail>
static void trycatch(Try&& func, Fail&& fail) noexcept try {
  func();
} catch (const std::exception& e) {
  fail(e.what());
} catch (...) {
  fail("unknown C++ exception (not derived from std::exception)");
}
}  // namespace behavior
}  // namespace rust

namespace rlx {

namespace mx = mlx::core;

// Makes MLX's default device the CPU (idempotent, thread-safe). Every op
// in the shim names its device explicitly (target() or cpu()), so nothing
// depends on this having run.
void ensure_init();

// The device this thread's shim ops run on: the CPU unless the plugin set
// another around building and running an executable (set_thread_device).
// Per thread, because executables on different devices may be built and
// run concurrently.
mx::Device& thread_device();

// The device of an ordinary op: this thread's device.
inline mx::StreamOrDevice target() { return thread_device(); }

// The device of an op MLX implements only on the CPU (LAPACK-backed
// linalg, float64 read-outs), whatever this thread's device is.
inline mx::StreamOrDevice cpu() {
  return mx::Device(mx::Device::DeviceType::cpu);
}

inline std::vector<int> to_ints(rust::Slice<const int32_t> s) {
  return std::vector<int>(s.begin(), s.end());
}

inline mx::Shape to_shape(rust::Slice<const int32_t> s) {
  for (auto d : s) {
    if (d < 0) {
      throw std::invalid_argument(
          "[rlx shim] shape dimensions must be non-negative");
    }
  }
  return mx::Shape(s.begin(), s.end());
}

// Shape argument that may legitimately hold negative entries (e.g. -1 in
// reshape, negative slice bounds).
inline mx::Shape to_shape_any(rust::Slice<const int32_t> s) {
  return mx::Shape(s.begin(), s.end());
}

}  // namespace rlx
