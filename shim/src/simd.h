// What the plugin's CPU kernels need to know about the instruction set.
// The vector kernels are x86-64 (AVX2/FMA, AVX-512); elsewhere (Apple
// silicon, Linux aarch64) every kernel runs its portable loop, which
// computes the same formula.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define RLX_X86 1
#include <immintrin.h>
#else
#define RLX_X86 0
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

// Whether this CPU runs the AVX2 + FMA kernels (never off x86).
inline bool has_avx2_fma() {
#if RLX_X86
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

// Whether this CPU runs the AVX-512 kernels (never off x86).
inline bool has_avx512f() {
#if RLX_X86
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
#else
  return false;
#endif
}

}  // namespace rlx
