// rlx-runtime's CPU formulas the plugin's own kernels share, so that the
// plugin and the reference agree to rounding (rlx-cpu 0.2.19 `kernels.rs`,
// MIT OR Apache-2.0).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "rlx-mlx-shim/src/simd.h"

namespace rlx {

// The reduction and the polynomial of a clamped x, on one float or on the
// NEON kernels' four lanes (neon::F4, whose operators are the scalar ones
// lane by lane): the power of two goes to `n` (a whole number), e^r is
// returned. One body, so the NEON kernels round as exp_poly does.
template <typename T>
inline T exp_poly_reduced(T x, T& n) {
  const T magic = 12582912.0f;  // 1.5 * 2^23: rounds to nearest even
  T v = x * 1.44269504088896341f;
  n = (v + magic) - magic;
  T r = x - n * 0.693145751953125f - n * 1.428606765330187e-6f;
  T p = 0.001388888888888889f;
  p = p * r + 0.008333333333333333f;
  p = p * r + 0.041666666666666664f;
  p = p * r + 0.16666666666666666f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p;
}

// rlx-cpu's exp_poly: clamp, n = round(x log2 e), r = x - n ln2 (split),
// degree-6 Taylor polynomial, 2^n through the exponent field.
inline float exp_poly(float x) {
  // Comparisons, not fmin/fmax (library calls without -ffast-math, which
  // keep loops scalar); a NaN fails both and stays NaN.
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  float n;
  float p = exp_poly_reduced(x, n);
  uint32_t bits;
  std::memcpy(&bits, &p, 4);
  bits += static_cast<uint32_t>(static_cast<int32_t>(n)) << 23;
  std::memcpy(&p, &bits, 4);
  return p;
}

#if RLX_X86
// exp_poly on eight lanes (rlx-cpu's AVX2 arm).
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.7f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-6f),
                              _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x));
  __m256 one = _mm256_set1_ps(1.0f);
  __m256 p = _mm256_set1_ps(0.001388888888888889f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.008333333333333333f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.041666666666666664f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.16666666666666666f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, one);
  p = _mm256_fmadd_ps(p, r, one);
  __m256i shifted = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), shifted));
}
#endif  // RLX_X86

#if RLX_NEON
namespace neon {
// exp_poly on four lanes, through its own body (no fused multiply-add:
// the same bits as exp_poly, which the NEON kernels are held to).
inline F4 exp4(F4 x) {
  x = select(x < -87.3f, -87.3f, select(x > 88.7f, 88.7f, x));
  F4 n;
  F4 p = exp_poly_reduced(x, n);
  // n is a whole number here: truncation is exact, as static_cast's.
  uint32x4_t shifted = vshlq_n_u32(vreinterpretq_u32_s32(vcvtq_s32_f32(n.v)), 23);
  return vreinterpretq_f32_u32(vaddq_u32(vreinterpretq_u32_f32(p.v), shifted));
}
}  // namespace neon
#endif  // RLX_NEON

}  // namespace rlx
