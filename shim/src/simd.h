// What the plugin's CPU kernels need to know about the instruction set.
// The vector kernels are x86-64 (AVX2/FMA, AVX-512); elsewhere (Apple
// silicon, Linux aarch64) every kernel runs its portable loop, which
// computes the same formula. `RLX_MLX_PORTABLE_KERNELS=1` (or
// `set_portable_kernels`) makes an x86 CPU run the portable loops too, so
// that the code every arm64 user runs is exercised and compared here.
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

}  // namespace rlx
