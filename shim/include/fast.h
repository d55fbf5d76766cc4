// mlx::core::fast: fused kernels (normalisation, RoPE, attention).
#pragma once

#include <optional>

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

inline std::optional<mx::array> opt(const Array* a) {
  if (a == nullptr) {
    return std::nullopt;
  }
  return a->a;
}

// weight may be null (no scaling).
inline std::unique_ptr<Array> rms_norm(
    const Array& x,
    const Array* weight,
    float eps) {
  return wrap(mx::fast::rms_norm(x.a, opt(weight), eps, target()));
}

// weight and bias may each be null.
inline std::unique_ptr<Array> layer_norm(
    const Array& x,
    const Array* weight,
    const Array* bias,
    float eps) {
  return wrap(
      mx::fast::layer_norm(x.a, opt(weight), opt(bias), eps, target()));
}

inline std::unique_ptr<Array> rope(
    const Array& x,
    int32_t dims,
    bool traditional,
    float base,
    float scale,
    int32_t offset) {
  return wrap(mx::fast::rope(
      x.a, dims, traditional, base, scale, offset, std::nullopt, target()));
}

// Offset given as an array (scalar, or one per batch entry).
inline std::unique_ptr<Array> rope_offset_array(
    const Array& x,
    int32_t dims,
    bool traditional,
    float base,
    float scale,
    const Array& offset) {
  return wrap(mx::fast::rope(
      x.a, dims, traditional, base, scale, offset.a, std::nullopt, target()));
}

// Custom frequencies instead of a base.
inline std::unique_ptr<Array> rope_freqs(
    const Array& x,
    int32_t dims,
    bool traditional,
    float scale,
    int32_t offset,
    const Array& freqs) {
  return wrap(mx::fast::rope(
      x.a, dims, traditional, std::nullopt, scale, offset,
      std::optional<mx::array>(freqs.a), target()));
}

// mask_mode: "" (use `mask` if non-null) or "causal"; mask and sinks may be
// null.
inline std::unique_ptr<Array> scaled_dot_product_attention(
    const Array& queries,
    const Array& keys,
    const Array& values,
    float scale,
    rust::Str mask_mode,
    const Array* mask,
    const Array* sinks) {
  return wrap(mx::fast::scaled_dot_product_attention(
      queries.a, keys.a, values.a, scale, std::string(mask_mode), opt(mask),
      opt(sinks), false, target()));
}

}  // namespace rlx
