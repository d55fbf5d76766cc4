// The plugin's own float32 matrix product on the CPU, an MLX primitive.
//
// Why, in two cases MLX's matmul (one cblas_sgemm call) handles badly:
//
// - Few rows (a decode step's x [1, d] times a weight [d, n]): OpenBLAS's
//   sgemm packs the whole weight matrix before it multiplies one row by
//   it, reading the weights twice; a one-token step is bound by reading
//   its weights once. Up to kSkinnyRows rows run a kernel of our own that
//   streams each weight row once (four at a time), vectorised with AVX-512
//   or AVX2/FMA, split by columns over our threads.
// - A BLAS the host pinned: the OpenBLAS MLX calls is the process's, and a
//   host that runs rlx-runtime's CPU backend pins it to one thread. The
//   plugin reads (never sets) that thread count; when the BLAS would run
//   single-threaded (pinned, or the reference BLAS), a large product is
//   split by rows over our own threads, each calling sgemm on its block.
//   The host's setting and its results are untouched either way.
//
// Every output element is one dot product over k in order, so splitting by
// rows or columns changes no value.

#include "rlx-mlx-shim/include/kernels.h"

#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/src/pool.h"
#include "rlx-mlx-shim/src/simd.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/include/symbols.h"

namespace rlx {

namespace {

// Products with at most this many rows take the skinny kernel.
constexpr int64_t kSkinnyRows = 8;

// ---- the skinny kernel: C[m, n0:n1] = sum_k A[m, k] B[k, n0:n1] ---------

[[maybe_unused]] bool has_avx512() { return has_avx512f(); }
[[maybe_unused]] bool has_avx2() { return has_avx2_fma(); }

// The last K % 4 steps of the kernels below, one k at a time (the same for
// every instruction set: too few to vectorise across k).
template <int R>
inline void skinny_k_tail(const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                          int64_t ldc, int64_t k, int64_t K, int64_t n0, int64_t n1) {
  for (; k < K; ++k) {
    const float* b0 = B + k * ldb;
    for (int r = 0; r < R; ++r) {
      float a = A[r * lda + k];
      for (int64_t n = n0; n < n1; ++n) C[r * ldc + n] = std::fma(a, b0[n], C[r * ldc + n]);
    }
  }
}

// The columns [n, n1) a kernel's vectors left, for its four steps of k
// from k (B's rows from b0): one k at a time, in order, as the vectors do.
template <int R>
inline void skinny_n_tail(const float* A, int64_t lda, const float* b0, int64_t ldb, float* C,
                          int64_t ldc, int64_t k, int64_t n, int64_t n1) {
  for (; n < n1; ++n)
    for (int r = 0; r < R; ++r) {
      float c = C[r * ldc + n];
      for (int j = 0; j < 4; ++j) c = std::fma(A[r * lda + k + j], b0[j * ldb + n], c);
      C[r * ldc + n] = c;
    }
}

// One pass over k for R rows of A (R <= 8) and columns [n0, n1) of a
// row-major B: C's rows stay in L1, B's rows stream four at a time.
#if RLX_X86
template <int R>
__attribute__((target("avx512f"))) void skinny_n_avx512(
    const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
    int64_t ldc, int64_t K, int64_t n0, int64_t n1) {
  for (int r = 0; r < R; ++r) std::memset(C + r * ldc + n0, 0, (n1 - n0) * 4);
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const float* b0 = B + k * ldb;
    __m512 a[R][4];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j) a[r][j] = _mm512_set1_ps(A[r * lda + k + j]);
    int64_t n = n0;
    for (; n + 16 <= n1; n += 16) {
      __m512 b[4];
      for (int j = 0; j < 4; ++j) b[j] = _mm512_loadu_ps(b0 + j * ldb + n);
      for (int r = 0; r < R; ++r) {
        __m512 c = _mm512_loadu_ps(C + r * ldc + n);
        for (int j = 0; j < 4; ++j) c = _mm512_fmadd_ps(a[r][j], b[j], c);
        _mm512_storeu_ps(C + r * ldc + n, c);
      }
    }
    if (n < n1) {
      __mmask16 m = (__mmask16)((1u << (n1 - n)) - 1);
      __m512 b[4];
      for (int j = 0; j < 4; ++j) b[j] = _mm512_maskz_loadu_ps(m, b0 + j * ldb + n);
      for (int r = 0; r < R; ++r) {
        __m512 c = _mm512_maskz_loadu_ps(m, C + r * ldc + n);
        for (int j = 0; j < 4; ++j) c = _mm512_fmadd_ps(a[r][j], b[j], c);
        _mm512_mask_storeu_ps(C + r * ldc + n, m, c);
      }
    }
  }
  skinny_k_tail<R>(A, lda, B, ldb, C, ldc, k, K, n0, n1);
}

// The same product for R >= 4 rows, C kept in registers: a block of R
// rows by 32 columns accumulates over the whole of k, B read once per
// block, C written once (the kernel above loads and stores C every four
// k, which bound it at about a quarter of the FMA rate on [8, 64] x
// [64, 256]). Each element is still one FMA chain over k in order: the
// values are those of the kernel above, bit for bit.
template <int R>
__attribute__((target("avx512f"))) void blocked_n_avx512(
    const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
    int64_t ldc, int64_t K, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 32 <= n1; n += 32) {
    __m512 c[R][2];
    for (int r = 0; r < R; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
    const float* b = B + n;
    for (int64_t k = 0; k < K; ++k, b += ldb) {
      __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
      for (int r = 0; r < R; ++r) {
        __m512 a = _mm512_set1_ps(A[r * lda + k]);
        c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
        c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(C + r * ldc + n, c[r][0]);
      _mm512_storeu_ps(C + r * ldc + n + 16, c[r][1]);
    }
  }
  for (; n < n1; n += 16) {
    const int64_t w = std::min<int64_t>(16, n1 - n);
    const __mmask16 m = (__mmask16)(w == 16 ? 0xffffu : (1u << w) - 1);
    __m512 c[R];
    for (int r = 0; r < R; ++r) c[r] = _mm512_setzero_ps();
    const float* b = B + n;
    for (int64_t k = 0; k < K; ++k, b += ldb) {
      __m512 b0 = _mm512_maskz_loadu_ps(m, b);
      for (int r = 0; r < R; ++r) c[r] = _mm512_fmadd_ps(_mm512_set1_ps(A[r * lda + k]), b0, c[r]);
    }
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(C + r * ldc + n, m, c[r]);
  }
}

template <int R>
__attribute__((target("avx2,fma"))) void skinny_n_avx2(
    const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
    int64_t ldc, int64_t K, int64_t n0, int64_t n1) {
  for (int r = 0; r < R; ++r) std::memset(C + r * ldc + n0, 0, (n1 - n0) * 4);
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const float* b0 = B + k * ldb;
    int64_t n = n0;
    for (; n + 8 <= n1; n += 8) {
      __m256 b[4];
      for (int j = 0; j < 4; ++j) b[j] = _mm256_loadu_ps(b0 + j * ldb + n);
      for (int r = 0; r < R; ++r) {
        __m256 c = _mm256_loadu_ps(C + r * ldc + n);
        for (int j = 0; j < 4; ++j)
          c = _mm256_fmadd_ps(_mm256_set1_ps(A[r * lda + k + j]), b[j], c);
        _mm256_storeu_ps(C + r * ldc + n, c);
      }
    }
    skinny_n_tail<R>(A, lda, b0, ldb, C, ldc, k, n, n1);
  }
  skinny_k_tail<R>(A, lda, B, ldb, C, ldc, k, K, n0, n1);
}

#endif  // RLX_X86

template <int R>
void skinny_n_scalar(const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                     int64_t ldc, int64_t K, int64_t n0, int64_t n1) {
  for (int r = 0; r < R; ++r)
    for (int64_t n = n0; n < n1; ++n) {
      float c = 0.0f;
      for (int64_t k = 0; k < K; ++k) c = std::fma(A[r * lda + k], B[k * ldb + n], c);
      C[r * ldc + n] = c;
    }
}

#if RLX_NEON
// skinny_n_scalar four columns at a time, as the x86 kernels split it: up
// to three rows stream B four rows of k at a time with C's rows in L1
// (skinny_n_avx2's loop); from four rows on, a block of C stays in
// registers over the whole of k (blocked_n_avx512's). Each element is
// still one fused chain over k in order (vfmaq rounds once, as std::fma):
// skinny_n_scalar's bits. GCC 12 does not vectorise that loop for aarch64.
template <int R>
void skinny_n_neon(const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                   int64_t ldc, int64_t K, int64_t n0, int64_t n1) {
  for (int r = 0; r < R; ++r) std::memset(C + r * ldc + n0, 0, (n1 - n0) * 4);
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const float* b0 = B + k * ldb;
    float32x4_t a[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) a[r] = vld1q_f32(A + r * lda + k);
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
      float32x4_t b[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) b[j] = vld1q_f32(b0 + j * ldb + n);
      // Unrolled, so that a[] stays in registers.
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        float32x4_t c = vld1q_f32(C + r * ldc + n);
        c = vfmaq_laneq_f32(c, b[0], a[r], 0);
        c = vfmaq_laneq_f32(c, b[1], a[r], 1);
        c = vfmaq_laneq_f32(c, b[2], a[r], 2);
        c = vfmaq_laneq_f32(c, b[3], a[r], 3);
        vst1q_f32(C + r * ldc + n, c);
      }
    }
    skinny_n_tail<R>(A, lda, b0, ldb, C, ldc, k, n, n1);
  }
  skinny_k_tail<R>(A, lda, B, ldb, C, ldc, k, K, n0, n1);
}

// C[0:R, n:n + 4W] accumulated in R x W registers over the whole of k.
// The loops over R and W unrolled (GCC's -O2 keeps them, and with them
// the accumulators in memory: checked in the disassembly).
template <int R, int W>
inline void block_neon(const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                       int64_t ldc, int64_t K, int64_t n) {
  float32x4_t c[R][W];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) c[r][w] = vdupq_n_f32(0.0f);
  const float* b = B + n;
  for (int64_t k = 0; k < K; ++k, b += ldb) {
    float32x4_t bv[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) bv[w] = vld1q_f32(b + 4 * w);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float32x4_t a = vdupq_n_f32(A[r * lda + k]);
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) c[r][w] = vfmaq_f32(c[r][w], a, bv[w]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) vst1q_f32(C + r * ldc + n + 4 * w, c[r][w]);
}

// R >= 4 rows: blocks of 16 columns (four rows) or 8 (more), at most 16
// accumulators of NEON's 32 registers; then 4 columns; the last one to
// three columns as skinny_n_scalar.
template <int R>
void blocked_n_neon(const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                    int64_t ldc, int64_t K, int64_t n0, int64_t n1) {
  constexpr int W = R <= 4 ? 4 : 2;
  int64_t n = n0;
  for (; n + 4 * W <= n1; n += 4 * W) block_neon<R, W>(A, lda, B, ldb, C, ldc, K, n);
  for (; n + 4 <= n1; n += 4) block_neon<R, 1>(A, lda, B, ldb, C, ldc, K, n);
  if (n < n1) skinny_n_scalar<R>(A, lda, B, ldb, C, ldc, K, n, n1);
}
#endif  // RLX_NEON

// The same product with B given transposed (Bt: N x K row-major, a weight
// used as x · W^T): each output a dot product of two contiguous rows.
#if RLX_X86
// dot_scalar of x with four rows of Bt at once, as dot4_neon below: each
// lane one output's fused chain over k in order (the same bits as
// dot_scalar), the rows' 4 x 4 blocks transposed into columns of k. Four
// outputs a pass keep the weights streaming from memory, which bounds a
// decode step; summing a row in vector lanes instead (two 16-lane
// accumulators, then the lanes) was no faster there and gave other bits
// than the portable loop and the arm64 kernels.
__attribute__((target("avx2,fma"))) void dot4_fma(const float* x, const float* y, int64_t ld,
                                                  int64_t K, float* out) {
  const float* y0 = y;
  const float* y1 = y + ld;
  const float* y2 = y + 2 * ld;
  const float* y3 = y + 3 * ld;
  __m128 s = _mm_setzero_ps();
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    __m128 r0 = _mm_loadu_ps(y0 + k), r1 = _mm_loadu_ps(y1 + k);
    __m128 r2 = _mm_loadu_ps(y2 + k), r3 = _mm_loadu_ps(y3 + k);
    // Columns k .. k + 3 of the four rows.
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    s = _mm_fmadd_ps(_mm_set1_ps(x[k]), r0, s);
    s = _mm_fmadd_ps(_mm_set1_ps(x[k + 1]), r1, s);
    s = _mm_fmadd_ps(_mm_set1_ps(x[k + 2]), r2, s);
    s = _mm_fmadd_ps(_mm_set1_ps(x[k + 3]), r3, s);
  }
  _mm_storeu_ps(out, s);
  for (; k < K; ++k) {
    out[0] = std::fma(x[k], y0[k], out[0]);
    out[1] = std::fma(x[k], y1[k], out[1]);
    out[2] = std::fma(x[k], y2[k], out[2]);
    out[3] = std::fma(x[k], y3[k], out[3]);
  }
}
#endif  // RLX_X86

float dot_scalar(const float* x, const float* y, int64_t K) {
  float s = 0.0f;
  for (int64_t k = 0; k < K; ++k) s = std::fma(x[k], y[k], s);
  return s;
}

#if RLX_NEON
// dot_scalar of x with four rows of Bt (y, y + ld, ...) at once: each lane
// one output's fused chain over k in order, as dot_scalar's (the same
// bits), the rows' 4 x 4 blocks transposed into columns of k.
void dot4_neon(const float* x, const float* y, int64_t ld, int64_t K, float* out) {
  const float* y0 = y;
  const float* y1 = y + ld;
  const float* y2 = y + 2 * ld;
  const float* y3 = y + 3 * ld;
  float32x4_t s = vdupq_n_f32(0.0f);
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    float32x4x2_t t01 = vtrnq_f32(vld1q_f32(y0 + k), vld1q_f32(y1 + k));
    float32x4x2_t t23 = vtrnq_f32(vld1q_f32(y2 + k), vld1q_f32(y3 + k));
    float32x4_t xk = vld1q_f32(x + k);
    // Columns k, k + 1, k + 2, k + 3 of the four rows.
    float32x4_t c0 = vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0]));
    float32x4_t c1 = vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1]));
    float32x4_t c2 = vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0]));
    float32x4_t c3 = vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1]));
    s = vfmaq_laneq_f32(s, c0, xk, 0);
    s = vfmaq_laneq_f32(s, c1, xk, 1);
    s = vfmaq_laneq_f32(s, c2, xk, 2);
    s = vfmaq_laneq_f32(s, c3, xk, 3);
  }
  vst1q_f32(out, s);
  for (; k < K; ++k) {
    out[0] = std::fma(x[k], y0[k], out[0]);
    out[1] = std::fma(x[k], y1[k], out[1]);
    out[2] = std::fma(x[k], y2[k], out[2]);
    out[3] = std::fma(x[k], y3[k], out[3]);
  }
}
#endif  // RLX_NEON

using SkinnyFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t,
                          int64_t, int64_t, int64_t);

template <int R>
SkinnyFn skinny_for() {
#if RLX_X86
  // A few rows (a decode step) stream B once for all of them; from four
  // rows on, C's block fits the registers.
  if (has_avx512()) return R >= 4 ? blocked_n_avx512<R> : skinny_n_avx512<R>;
  if (has_avx2()) return skinny_n_avx2<R>;
#elif RLX_NEON
  if (has_neon()) return R >= 4 ? blocked_n_neon<R> : skinny_n_neon<R>;
#endif
  return skinny_n_scalar<R>;
}

SkinnyFn skinny(int rows) {
  switch (rows) {
    case 1: return skinny_for<1>();
    case 2: return skinny_for<2>();
    case 3: return skinny_for<3>();
    case 4: return skinny_for<4>();
    case 5: return skinny_for<5>();
    case 6: return skinny_for<6>();
    case 7: return skinny_for<7>();
    default: return skinny_for<8>();
  }
}

// ---- the BLAS, called by us ------------------------------------------------

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                         int, float, float*, int);
using ThreadsFn = int (*)();

SgemmFn cblas_sgemm() {
  static const SgemmFn f = reinterpret_cast<SgemmFn>(find_symbol("cblas_sgemm"));
  return f;
}

// How many threads the BLAS would use for one call: OpenBLAS's own count
// (whatever the host set it to), 1 for a BLAS that does not say (the
// reference BLAS).
int blas_threads() {
  static const ThreadsFn f = reinterpret_cast<ThreadsFn>(find_symbol("openblas_get_num_threads"));
  return f != nullptr ? f() : 1;
}

// ---- the product ----------------------------------------------------------

// A right operand as the kernels read it: row-major K x N with row stride
// `ld` (`t` false), or its transpose, row-major N x K with row stride `ld`
// (`t` true: a weight used as W^T, or attention's keys).
struct RightOp {
  const float* p;
  int64_t ld;
  bool t;
};

// Batch `i`'s right operand of a [batch.., K, N] array with any strides:
// in place when one of its last two axes is contiguous, else gathered into
// `scratch` (each task its own).
RightOp right(const mx::array& b, int64_t i, std::vector<float>& scratch) {
  const int nd = static_cast<int>(b.ndim());
  const int64_t K = b.shape(nd - 2), N = b.shape(nd - 1);
  const auto& st = b.strides();
  const int64_t rs = st[nd - 2], cs = st[nd - 1];
  int64_t off = 0, rest = i;
  for (int d = nd - 3; d >= 0; --d) {
    off += (rest % b.shape(d)) * st[d];
    rest /= b.shape(d);
  }
  const float* p = b.data<float>() + off;
  if (cs == 1 && (rs >= N || K == 1)) return {p, std::max<int64_t>(rs, N), false};
  if (rs == 1 && (cs >= K || N == 1)) return {p, std::max<int64_t>(cs, K), true};
  scratch.resize(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) scratch[k * N + n] = p[k * rs + n * cs];
  return {scratch.data(), N, false};
}

// C[m0:m0+rows, n0:n1] for one batch, on this thread.
void skinny_part(const float* A, int64_t K, const RightOp& B, float* C, int64_t N, int64_t rows,
                 int64_t n0, int64_t n1) {
  if (B.t) {
    // Four outputs at a time, each an in-order chain (the same bits on
    // every path), the last ones as dot_scalar.
    using Dot4 = void (*)(const float*, const float*, int64_t, int64_t, float*);
    Dot4 dot4 = nullptr;
#if RLX_X86
    if (has_avx2()) dot4 = dot4_fma;
#elif RLX_NEON
    if (has_neon()) dot4 = dot4_neon;
#endif
    int64_t n = n0;
    if (dot4 != nullptr) {
      for (; n + 4 <= n1; n += 4)
        for (int64_t r = 0; r < rows; ++r) {
          float out[4];
          dot4(A + r * K, B.p + n * B.ld, B.ld, K, out);
          std::memcpy(C + r * N + n, out, sizeof out);
        }
    }
    for (; n < n1; ++n)
      for (int64_t r = 0; r < rows; ++r) C[r * N + n] = dot_scalar(A + r * K, B.p + n * B.ld, K);
  } else {
    skinny(static_cast<int>(rows))(A, K, B.p, B.ld, C, N, K, n0, n1);
  }
}

// Whether OpenBLAS takes a product of a few rows better than our kernels:
// from four rows on, a product of at most 64^3 multiply-adds on an AVX-512
// machine, where OpenBLAS's small-matrix kernels (SkylakeX, Cooper Lake)
// multiply without packing: [8, 64] x [64, 256] ran 2.5x faster there than
// our blocked kernel (docs/PERFORMANCE.md). Past that size OpenBLAS packs
// and may wake its threads: an LSTM step's [8, 128] x [128, 512] took
// longer there than in ours. One to three rows stream the weights once in
// ours.
bool small_for_openblas([[maybe_unused]] int64_t M, [[maybe_unused]] int64_t K,
                        [[maybe_unused]] int64_t N) {
#if RLX_X86
  static const bool openblas = find_symbol("openblas_get_num_threads") != nullptr;
  return openblas && has_avx512() && M >= 4 && M * K * N <= (int64_t(1) << 18);
#else
  // Only ours has an AVX-512 kernel to prefer over the BLAS.
  return false;
#endif
}

// How a product of `batches` [M, K] x [K, N] is spread: the skinny
// kernel's column chunks per batch, or the BLAS calls' row parts per batch.
struct Split {
  bool skinny;
  int64_t per_batch;
};

Split split(int64_t batches, int64_t M, int64_t K, int64_t N) {
  const int64_t pool = static_cast<int64_t>(Pool::get().size());
  if ((M <= kSkinnyRows && !small_for_openblas(M, K, N)) || cblas_sgemm() == nullptr) {
    // Each batch's columns in chunks of ~64 KiB of B (64-column
    // multiples), at least one a participant where there is enough work.
    int64_t min_cols = std::max<int64_t>(64, ((1 << 14) / std::max<int64_t>(K, 1) + 63) / 64 * 64);
    return {true, std::max<int64_t>(1, std::min<int64_t>(N / min_cols, pool))};
  }
  int64_t parts = 1;
  if (blas_threads() <= 1 && batches * M * N * K >= (int64_t(1) << 21)) {
    parts = std::min<int64_t>(pool, std::max<int64_t>(1, M / 16));
  }
  return {false, parts};
}

// C = A B for `batches` products (A: [batches, M, K] row-major; C:
// [batches, M, N]; B as `right` reads it), on the pool: the skinny kernel
// (kSkinnyRows rows at a time) when M is small or there is no BLAS, else
// the BLAS, split by rows over our threads when it would run on one.
void product(const float* A, const mx::array& b, float* C, int64_t batches, int64_t M,
             int64_t K, int64_t N) {
  auto& pool = Pool::get();
  auto sgemm = cblas_sgemm();
  const Split sp = split(batches, M, K, N);
  if (sp.skinny) {
    const int64_t chunks = sp.per_batch;
    int64_t width = (N + chunks - 1) / chunks;
    pool.run(static_cast<size_t>(batches * chunks), [&](size_t task) {
      int64_t i = static_cast<int64_t>(task) / chunks, ch = static_cast<int64_t>(task) % chunks;
      int64_t n0 = ch * width, n1 = std::min(N, n0 + width);
      if (n0 >= n1) return;
      std::vector<float> scratch;
      RightOp B = right(b, i, scratch);
      for (int64_t m0 = 0; m0 < M; m0 += kSkinnyRows) {
        skinny_part(A + (i * M + m0) * K, K, B, C + (i * M + m0) * N, N,
                    std::min(kSkinnyRows, M - m0), n0, n1);
      }
    });
    return;
  }
  const int64_t parts = sp.per_batch;
  int64_t rows = (M + parts - 1) / parts;
  pool.run(static_cast<size_t>(batches * parts), [&](size_t task) {
    int64_t i = static_cast<int64_t>(task) / parts, p = static_cast<int64_t>(task) % parts;
    int64_t m0 = p * rows, m = std::min(M - m0, rows);
    if (m <= 0) return;
    std::vector<float> scratch;
    RightOp B = right(b, i, scratch);
    sgemm(kRowMajor, kNoTrans, B.t ? kTrans : kNoTrans, static_cast<int>(m),
          static_cast<int>(N), static_cast<int>(K), 1.0f, A + (i * M + m0) * K,
          static_cast<int>(K), B.p, static_cast<int>(B.ld), 0.0f, C + (i * M + m0) * N,
          static_cast<int>(N));
  });
}

// [batch.., M, K] x [batch.., K, N] (the same batch dims, or a 2-D right
// operand shared by every batch, folded into the rows).
class Matmul : public mx::UnaryPrimitive, public RunsInline {
 public:
  explicit Matmul(mx::Stream stream) : mx::UnaryPrimitive(stream) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    run_task(stream(), inputs, out, [c = out.data<float>()](const std::vector<mx::array>& in) {
      const auto& a = in[0];
      const auto& b = in[1];
      const int nd = static_cast<int>(a.ndim());
      const int64_t K = a.shape(nd - 1), N = b.shape(-1);
      // A 2-D right operand serves every row: the batch folds into M.
      const bool shared = b.ndim() == 2;
      const int64_t batches = shared ? 1 : static_cast<int64_t>(b.size() / (K * N));
      const int64_t M = static_cast<int64_t>(a.size()) / std::max<int64_t>(K, 1) / batches;
      if (M == 0 || N == 0 || batches == 0) return;
      if (K == 0) {
        std::memset(c, 0, static_cast<size_t>(batches * M * N) * 4);
        return;
      }
      std::vector<float> sa;
      product(row_major(a, sa), b, c, batches, M, K, N);
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[rlx matmul] is a CPU kernel; the GPU uses mx::matmul");
  }

  std::vector<mx::array> vjp(const std::vector<mx::array>& primals,
                             const std::vector<mx::array>& cotangents,
                             const std::vector<int>& argnums,
                             const std::vector<mx::array>&) override {
    std::vector<mx::array> out;
    for (int i : argnums) {
      out.push_back(i == 0 ? mx::matmul(cotangents[0], mx::swapaxes(primals[1], -1, -2, stream()),
                                        stream())
                           : mx::matmul(mx::swapaxes(primals[0], -1, -2, stream()),
                                        cotangents[0], stream()));
    }
    return out;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = inputs[1].shape(-1);
    return {shape};
  }

  const char* name() const override { return "RlxMatmul"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
};

}  // namespace

bool matmul_cpu_takes(const Array& a, const Array& b) {
  const auto& x = a.a;
  const auto& w = b.a;
  if (x.dtype() != mx::float32 || w.dtype() != mx::float32 || x.ndim() < 2 || w.ndim() < 2 ||
      x.shape(-1) != w.shape(-2)) {
    return false;
  }
  // The same batch dims on both sides, or a shared 2-D right operand.
  if (w.ndim() == 2) return true;
  if (w.ndim() != x.ndim()) return false;
  for (size_t d = 0; d + 2 < x.ndim(); ++d)
    if (x.shape(d) != w.shape(d)) return false;
  return true;
}

std::unique_ptr<Array> matmul_cpu(const Array& a, const Array& b) {
  if (!matmul_cpu_takes(a, b)) {
    throw std::invalid_argument(
        "[rlx matmul] needs float32 [..., M, K] times [K, N] or the same batch of [K, N]");
  }
  auto s = mx::default_stream(mx::Device(mx::Device::DeviceType::cpu));
  auto shape = a.a.shape();
  shape.back() = b.a.shape(-1);
  return wrap(mx::array(shape, mx::float32, std::make_shared<Matmul>(s), {a.a, b.a}));
}

// How many threads a product [m, k] x [k, n] would run on now: ours,
// times the BLAS's own where it is the BLAS's (src/gemm.cc's split).
int64_t matmul_cpu_threads(int64_t m, int64_t k, int64_t n) {
  if (m <= 0 || k <= 0 || n <= 0) return 0;
  // `per_batch` is at most the pool's size: one task per participant.
  const Split sp = split(1, m, k, n);
  return sp.skinny ? sp.per_batch : sp.per_batch * std::max(1, blas_threads());
}

}  // namespace rlx
