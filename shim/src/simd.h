// What the plugin's CPU kernels need to know about the instruction set.
// The vector kernels are x86-64 (AVX2/FMA, AVX-512) and arm64 (NEON, four
// lanes); any other CPU runs each kernel's portable loop, which computes
// the same formula. `RLX_MLX_PORTABLE_KERNELS=1` (or `set_portable_kernels`)
// makes any CPU run the portable loops, so that the two are compared: on
// x86 with the AVX2 kernels (within stated tolerances), on arm64 with the
// NEON kernels, which give the portable loops' bits.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#define RLX_X86 1
#include <immintrin.h>
#else
#define RLX_X86 0
#endif

// NEON is part of every aarch64 CPU (Apple silicon, Graviton, Grace): no
// run-time probe. GCC 12 does not vectorise the portable loops for aarch64
// (checked in the cross-built objects: no `.4s` arithmetic in the products,
// the unary, row, elementwise and Fma kernels), hence kernels of their own.
#if defined(__aarch64__)
#define RLX_NEON 1
#include <arm_neon.h>
#else
#define RLX_NEON 0
#endif

namespace rlx {

// A spin-wait hint for polling loops.
inline void cpu_pause() {
#if RLX_X86
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether every kernel takes its portable loop, whatever the CPU offers
// (process-wide; read from RLX_MLX_PORTABLE_KERNELS once, then set by
// set_portable_kernels).
inline std::atomic<bool>& portable_only() {
  static std::atomic<bool> on = [] {
    const char* v = std::getenv("RLX_MLX_PORTABLE_KERNELS");
    return v != nullptr && *v != 0 && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Whether this CPU runs the AVX2 + FMA kernels (never off x86).
inline bool has_avx2_fma() {
#if RLX_X86
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes && !portable_only().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// Whether this CPU runs the AVX-512 kernels (never off x86).
inline bool has_avx512f() {
#if RLX_X86
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes && !portable_only().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// Whether this CPU runs the NEON kernels (every arm64 CPU, unless the
// portable loops are asked for).
inline bool has_neon() {
#if RLX_NEON
  return !portable_only().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

#if RLX_NEON
// Four float lanes with the scalar operators, so that a NEON kernel reads
// as its portable loop, statement for statement. Each operator rounds once,
// as the scalar one does: the shim is built with -ffp-contract=off, so
// `a * b + c` stays a multiply and an add here too (GCC's vmulq_f32 and
// vaddq_f32 are plain vector `*` and `+`, which it would otherwise fuse);
// a fused multiply-add is written `fma`, where the portable loop writes
// std::fma. Same operations in the same order: the same bits. In a
// namespace of their own, found by argument-dependent lookup: `abs` or
// `fma` of a scalar elsewhere in rlx never resolves to these.
namespace neon {

struct F4 {
  float32x4_t v;
  F4() = default;
  F4(float32x4_t x) : v(x) {}
  F4(float x) : v(vdupq_n_f32(x)) {}  // a broadcast, as a scalar operand
  static F4 load(const float* p) { return vld1q_f32(p); }
  void store(float* p) const { vst1q_f32(p, v); }
  float lane(int i) const {
    alignas(16) float l[4];
    vst1q_f32(l, v);
    return l[i];
  }
};

inline F4 operator+(F4 a, F4 b) { return vaddq_f32(a.v, b.v); }
inline F4 operator-(F4 a, F4 b) { return vsubq_f32(a.v, b.v); }
inline F4 operator*(F4 a, F4 b) { return vmulq_f32(a.v, b.v); }
inline F4 operator/(F4 a, F4 b) { return vdivq_f32(a.v, b.v); }
inline F4 operator-(F4 a) { return vnegq_f32(a.v); }
// a * b + c, one rounding (std::fma).
inline F4 fma(F4 a, F4 b, F4 c) { return vfmaq_f32(c.v, a.v, b.v); }
inline F4 abs(F4 a) { return vabsq_f32(a.v); }
// The magnitude of `mag` with the sign of `sgn` (std::copysign).
inline F4 copysign(F4 mag, F4 sgn) {
  return vbslq_f32(vdupq_n_u32(0x80000000u), sgn.v, mag.v);
}

// Lane masks of the scalar comparisons (false where either side is NaN).
using M4 = uint32x4_t;
inline M4 operator<(F4 a, F4 b) { return vcltq_f32(a.v, b.v); }
inline M4 operator>(F4 a, F4 b) { return vcgtq_f32(a.v, b.v); }
inline M4 operator>=(F4 a, F4 b) { return vcgeq_f32(a.v, b.v); }
// `m ? a : b`, lane by lane.
inline F4 select(M4 m, F4 a, F4 b) { return vbslq_f32(m, a.v, b.v); }

}  // namespace neon
#endif  // RLX_NEON

}  // namespace rlx
