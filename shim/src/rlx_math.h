// rlx-runtime's CPU formulas the plugin's own kernels share, so that the
// plugin and the reference agree to rounding (rlx-cpu 0.2.19 `kernels.rs`,
// MIT OR Apache-2.0).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace rlx {

// rlx-cpu's exp_poly: clamp, n = round(x log2 e), r = x - n ln2 (split),
// degree-6 Taylor polynomial, 2^n through the exponent field.
inline float exp_poly(float x) {
  x = std::isnan(x) ? x : std::fmin(std::fmax(x, -87.3f), 88.7f);
  const float magic = 12582912.0f;  // 1.5 * 2^23: rounds to nearest even
  float v = x * 1.44269504088896341f;
  float n = (v + magic) - magic;
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-6f;
  float p = 0.001388888888888889f;
  p = p * r + 0.008333333333333333f;
  p = p * r + 0.041666666666666664f;
  p = p * r + 0.16666666666666666f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  uint32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += static_cast<uint32_t>(static_cast<int32_t>(n)) << 23;
  std::memcpy(&p, &bits, 4);
  return p;
}

}  // namespace rlx
