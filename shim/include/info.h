// Build/runtime information: MLX version, which BLAS/LAPACK got loaded,
// memory counters.
#pragma once

#include "rlx-mlx-shim/include/common.h"

namespace rlx {

rust::String mlx_version();
rust::String mlx_library_path();
rust::String blas_library_path();
rust::String lapack_library_path();
rust::String blas_info();

inline std::size_t active_memory() {
  return mx::get_active_memory();
}
inline std::size_t peak_memory() {
  return mx::get_peak_memory();
}
inline void reset_peak_memory() {
  mx::reset_peak_memory();
}
inline std::size_t cache_memory() {
  return mx::get_cache_memory();
}
inline void clear_cache() {
  mx::clear_cache();
}
inline std::size_t set_memory_limit(std::size_t limit) {
  return mx::set_memory_limit(limit);
}
inline std::size_t set_cache_limit(std::size_t limit) {
  return mx::set_cache_limit(limit);
}

}  // namespace rlx
