// The plugin's own CPU kernel for MLX's affine-quantized matrix product,
// an MLX primitive: y = x W^T with W [N, K] stored as mlx-lm stores it,
// `bits`-wide codes packed low bits first in uint32 words (row by row),
// and a scale and a bias per group of `group` codes along K: w = s q + b.
//
// Why: MLX 0.32.4's CPU `quantized_matmul` runs on one thread and
// dequantises one code at a time, so a 4-bit model decodes no faster than
// its f32 copy and its prompt runs ten times slower (docs/PERFORMANCE.md).
// Two cases:
//
// - Few rows (a decode step): the weight is read once, its codes unpacked
//   into vectors and multiplied as they stream, the columns split over our
//   threads. Each output is sum_g s_g (q . x)_g + b_g (sum x)_g: the group
//   sums of x are made once per call, so a code costs a multiply-add.
// - More rows (a prompt): blocks of W's rows are dequantised into f32 (the
//   values MLX's `dequantize` makes) and multiplied by the BLAS, the blocks
//   spread over our threads when the BLAS runs on one.
//
// 4- and 8-bit codes with groups of 32, 64 or 128 (what mlx-community
// checkpoints use); the lowering sends MLX's own op everything else.

#include "rlx-mlx-shim/include/kernels.h"

#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/src/pool.h"
#include "rlx-mlx-shim/src/simd.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/include/symbols.h"

namespace rlx {

namespace {

// Products with at most this many rows stream the packed weight.
constexpr int64_t kFewRows = 8;
// Rows of W dequantised at a time for the BLAS.
constexpr int64_t kBlockRows = 64;

struct Q {
  int bits;
  int64_t group;
  int64_t K, N;
};

// ---- x as the streaming kernels read it ------------------------------------

// For 4 bits, a 16-byte run of codes holds 32 elements: the low nibbles
// are the even ones, the high nibbles the odd ones. Each 32-element block
// of x is laid out [evens, odds] to match, so that a vector of unpacked
// low (high) nibbles multiplies a contiguous vector of x.
void lay_out_x(const float* x, int64_t K, int bits, float* out) {
  if (bits != 4) {
    std::memcpy(out, x, size_t(K) * 4);
    return;
  }
  for (int64_t b = 0; b < K; b += 32)
    for (int j = 0; j < 16; ++j) {
      out[b + j] = x[b + 2 * j];
      out[b + 16 + j] = x[b + 2 * j + 1];
    }
}

// ---- the streaming kernels: y[r, n0:n1] for R rows of x ---------------------

// The dot product of one packed row's group `g` with x's (laid-out) group.
inline float group_dot_scalar(const uint8_t* codes, const float* xl, int bits, int64_t group) {
  float t = 0.0f;
  if (bits == 8) {
    for (int64_t j = 0; j < group; ++j) t = std::fma(float(codes[j]), xl[j], t);
    return t;
  }
  for (int64_t b = 0; b < group; b += 32) {
    const uint8_t* c = codes + b / 2;
    for (int j = 0; j < 16; ++j) t = std::fma(float(c[j] & 15), xl[b + j], t);
    for (int j = 0; j < 16; ++j) t = std::fma(float(c[j] >> 4), xl[b + 16 + j], t);
  }
  return t;
}

template <int R>
void rows_scalar(const uint8_t* w, const float* s, const float* bi, const float* xl,
                 const float* xs, float* y, const Q& q, int64_t n0, int64_t n1) {
  const int64_t G = q.K / q.group, row_bytes = q.K * q.bits / 8, gbytes = q.group * q.bits / 8;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wr = w + n * row_bytes;
    for (int r = 0; r < R; ++r) {
      float acc = 0.0f, bias = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        acc = std::fma(s[n * G + g],
                       group_dot_scalar(wr + g * gbytes, xl + r * q.K + g * q.group, q.bits,
                                        q.group),
                       acc);
        bias = std::fma(bi[n * G + g], xs[r * G + g], bias);
      }
      y[r * q.N + n] = acc + bias;
    }
  }
}

#if RLX_X86
__attribute__((target("avx512f"))) inline float hsum512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float out = 0.0f;
  for (float l : lanes) out += l;
  return out;
}

// 16 codes (uint8 in a __m128i) as floats. (The zero-masked forms of
// the conversions: GCC 12 warns that the unmasked ones read an
// uninitialised register of their own.)
__attribute__((target("avx512f"))) inline __m512 codes16(__m128i c) {
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepu8_epi32(0xffff, c));
}

template <int R>
__attribute__((target("avx512f"))) void rows_avx512(const uint8_t* w, const float* s,
                                                    const float* bi, const float* xl,
                                                    const float* xs, float* y, const Q& q,
                                                    int64_t n0, int64_t n1) {
  const int64_t G = q.K / q.group, row_bytes = q.K * q.bits / 8, gbytes = q.group * q.bits / 8;
  const __m128i low = _mm_set1_epi8(15);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wr = w + n * row_bytes;
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* c = wr + g * gbytes;
      __m512 t[R];
      for (int r = 0; r < R; ++r) t[r] = _mm512_setzero_ps();
      if (q.bits == 4) {
        for (int64_t b = 0; b < q.group; b += 32) {
          __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + b / 2));
          __m512 lo = codes16(_mm_and_si128(v, low));
          __m512 hi = codes16(_mm_and_si128(_mm_srli_epi16(v, 4), low));
          for (int r = 0; r < R; ++r) {
            const float* xr = xl + r * q.K + g * q.group + b;
            t[r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xr), t[r]);
            t[r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), t[r]);
          }
        }
      } else {
        for (int64_t b = 0; b < q.group; b += 16) {
          __m512 v = codes16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + b)));
          for (int r = 0; r < R; ++r)
            t[r] = _mm512_fmadd_ps(v, _mm512_loadu_ps(xl + r * q.K + g * q.group + b), t[r]);
        }
      }
      const __m512 sg = _mm512_set1_ps(s[n * G + g]);
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(sg, t[r], acc[r]);
    }
    for (int r = 0; r < R; ++r) {
      float bias = 0.0f;
      for (int64_t g = 0; g < G; ++g) bias = std::fma(bi[n * G + g], xs[r * G + g], bias);
      y[r * q.N + n] = hsum512(acc[r]) + bias;
    }
  }
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

// 8 codes (the low 8 bytes of a __m128i) as floats.
__attribute__((target("avx2,fma"))) inline __m256 codes8(__m128i c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
}

template <int R>
__attribute__((target("avx2,fma"))) void rows_avx2(const uint8_t* w, const float* s,
                                                   const float* bi, const float* xl,
                                                   const float* xs, float* y, const Q& q,
                                                   int64_t n0, int64_t n1) {
  const int64_t G = q.K / q.group, row_bytes = q.K * q.bits / 8, gbytes = q.group * q.bits / 8;
  const __m128i low = _mm_set1_epi8(15);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wr = w + n * row_bytes;
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* c = wr + g * gbytes;
      __m256 t[R];
      for (int r = 0; r < R; ++r) t[r] = _mm256_setzero_ps();
      if (q.bits == 4) {
        for (int64_t b = 0; b < q.group; b += 32) {
          __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + b / 2));
          __m128i lo = _mm_and_si128(v, low), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low);
          __m256 l0 = codes8(lo), l1 = codes8(_mm_srli_si128(lo, 8));
          __m256 h0 = codes8(hi), h1 = codes8(_mm_srli_si128(hi, 8));
          for (int r = 0; r < R; ++r) {
            const float* xr = xl + r * q.K + g * q.group + b;
            t[r] = _mm256_fmadd_ps(l0, _mm256_loadu_ps(xr), t[r]);
            t[r] = _mm256_fmadd_ps(l1, _mm256_loadu_ps(xr + 8), t[r]);
            t[r] = _mm256_fmadd_ps(h0, _mm256_loadu_ps(xr + 16), t[r]);
            t[r] = _mm256_fmadd_ps(h1, _mm256_loadu_ps(xr + 24), t[r]);
          }
        }
      } else {
        for (int64_t b = 0; b < q.group; b += 8) {
          __m256 v = codes8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + b)));
          for (int r = 0; r < R; ++r)
            t[r] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xl + r * q.K + g * q.group + b), t[r]);
        }
      }
      const __m256 sg = _mm256_set1_ps(s[n * G + g]);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(sg, t[r], acc[r]);
    }
    for (int r = 0; r < R; ++r) {
      float bias = 0.0f;
      for (int64_t g = 0; g < G; ++g) bias = std::fma(bi[n * G + g], xs[r * G + g], bias);
      y[r * q.N + n] = hsum256(acc[r]) + bias;
    }
  }
}
#endif  // RLX_X86

using RowsFn = void (*)(const uint8_t*, const float*, const float*, const float*, const float*,
                        float*, const Q&, int64_t, int64_t);

template <int R>
RowsFn rows_for() {
#if RLX_X86
  if (has_avx512f()) return rows_avx512<R>;
  if (has_avx2_fma()) return rows_avx2<R>;
#endif
  return rows_scalar<R>;
}

RowsFn rows(int64_t r) {
  switch (r) {
    case 1: return rows_for<1>();
    case 2: return rows_for<2>();
    case 3: return rows_for<3>();
    case 4: return rows_for<4>();
    case 5: return rows_for<5>();
    case 6: return rows_for<6>();
    case 7: return rows_for<7>();
    default: return rows_for<8>();
  }
}

// y [M, N] for M <= kFewRows: x laid out and its group sums made once,
// then column chunks over the pool.
void few_rows(const float* x, const uint8_t* w, const float* s, const float* bi, float* y,
              int64_t M, const Q& q) {
  const int64_t G = q.K / q.group;
  std::vector<float> xl(size_t(M * q.K)), xs(size_t(M * G));
  for (int64_t r = 0; r < M; ++r) {
    lay_out_x(x + r * q.K, q.K, q.bits, xl.data() + r * q.K);
    for (int64_t g = 0; g < G; ++g) {
      float t = 0.0f;
      for (int64_t j = 0; j < q.group; ++j) t += x[r * q.K + g * q.group + j];
      xs[size_t(r * G + g)] = t;
    }
  }
  auto& pool = Pool::get();
  // Chunks of at least ~64 KiB of codes, one a participant at most.
  const int64_t row_bytes = q.K * q.bits / 8;
  const int64_t min_rows = std::max<int64_t>(16, (int64_t(1) << 16) / std::max<int64_t>(row_bytes, 1));
  const int64_t chunks =
      std::max<int64_t>(1, std::min<int64_t>(q.N / min_rows, int64_t(pool.size())));
  const int64_t width = (q.N + chunks - 1) / chunks;
  const RowsFn f = rows(M);
  pool.run(size_t(chunks), [&](size_t c) {
    const int64_t n0 = int64_t(c) * width, n1 = std::min(q.N, n0 + width);
    if (n0 < n1) f(w, s, bi, xl.data(), xs.data(), y, q, n0, n1);
  });
}

// ---- many rows: dequantised blocks through the BLAS -------------------------

void dequant_rows(const uint8_t* w, const float* s, const float* bi, const Q& q, int64_t n0,
                  int64_t n1, float* out) {
  const int64_t G = q.K / q.group, row_bytes = q.K * q.bits / 8;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* wr = w + n * row_bytes;
    float* o = out + (n - n0) * q.K;
    for (int64_t k = 0; k < q.K; ++k) {
      const int64_t g = n * G + k / q.group;
      const uint32_t code = q.bits == 8 ? wr[k] : (wr[k / 2] >> (4 * (k % 2))) & 15;
      o[k] = std::fma(s[g], float(code), bi[g]);
    }
  }
}

enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                         int, float, float*, int);
using ThreadsFn = int (*)();

SgemmFn sgemm() {
  static const SgemmFn f = reinterpret_cast<SgemmFn>(find_symbol("cblas_sgemm"));
  return f;
}

int blas_threads() {
  static const ThreadsFn f = reinterpret_cast<ThreadsFn>(find_symbol("openblas_get_num_threads"));
  return f != nullptr ? f() : 1;
}

// y[:, n0:n1] = x · dequant(W[n0:n1])^T.
void block_product(const float* x, int64_t M, const float* wf, int64_t n0, int64_t n1,
                   float* y, const Q& q) {
  sgemm()(kRowMajor, kNoTrans, kTrans, int(M), int(n1 - n0), int(q.K), 1.0f, x, int(q.K), wf,
          int(q.K), 0.0f, y + n0, int(q.N));
}

void many_rows(const float* x, const uint8_t* w, const float* s, const float* bi, float* y,
               int64_t M, const Q& q) {
  auto& pool = Pool::get();
  const int64_t blocks = (q.N + kBlockRows - 1) / kBlockRows;
  if (blas_threads() <= 1) {
    // One block at a time per participant: dequantised, then multiplied.
    pool.run(size_t(blocks), [&](size_t b) {
      const int64_t n0 = int64_t(b) * kBlockRows, n1 = std::min(q.N, n0 + kBlockRows);
      std::vector<float> wf(size_t((n1 - n0) * q.K));
      dequant_rows(w, s, bi, q, n0, n1, wf.data());
      block_product(x, M, wf.data(), n0, n1, y, q);
    });
    return;
  }
  // The BLAS has threads of its own: the dequantisation on ours, one
  // product call per block group on its.
  constexpr int64_t kGroupRows = 512;
  std::vector<float> wf(size_t(std::min(q.N, kGroupRows) * q.K));
  for (int64_t n0 = 0; n0 < q.N; n0 += kGroupRows) {
    const int64_t n1 = std::min(q.N, n0 + kGroupRows);
    const int64_t parts = (n1 - n0 + kBlockRows - 1) / kBlockRows;
    pool.run(size_t(parts), [&](size_t p) {
      const int64_t a = n0 + int64_t(p) * kBlockRows, b = std::min(n1, a + kBlockRows);
      dequant_rows(w, s, bi, q, a, b, wf.data() + (a - n0) * q.K);
    });
    block_product(x, M, wf.data(), n0, n1, y, q);
  }
}

class QuantizedMatmul : public mx::UnaryPrimitive, public RunsInline {
 public:
  QuantizedMatmul(mx::Stream stream, int bits, int group)
      : mx::UnaryPrimitive(stream), bits_(bits), group_(group) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    run_task(stream(), inputs, out,
             [c = out.data<float>(), bits = bits_, group = group_](
                 const std::vector<mx::array>& in) {
               const auto& x = in[0];
               const Q q{bits, group, x.shape(-1), in[1].shape(0)};
               const int64_t M = int64_t(x.size()) / std::max<int64_t>(q.K, 1);
               if (M == 0 || q.N == 0) return;
               std::vector<float> tx, ts, tb;
               std::vector<uint32_t> tw;
               const float* xp = row_major(x, tx);
               const uint8_t* wp = reinterpret_cast<const uint8_t*>(row_major(in[1], tw));
               const float* sp = row_major(in[2], ts);
               const float* bp = row_major(in[3], tb);
               if (M <= kFewRows || sgemm() == nullptr) {
                 for (int64_t m0 = 0; m0 < M; m0 += kFewRows)
                   few_rows(xp + m0 * q.K, wp, sp, bp, c + m0 * q.N,
                            std::min(kFewRows, M - m0), q);
               } else {
                 many_rows(xp, wp, sp, bp, c, M, q);
               }
             });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(
        "[rlx quantized_matmul] is a CPU kernel; the GPU uses mx::quantized_matmul");
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    auto shape = inputs[0].shape();
    shape.back() = inputs[1].shape(0);
    return {shape};
  }

  const char* name() const override { return "RlxQuantizedMatmul"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const QuantizedMatmul&>(other);
    return bits_ == o.bits_ && group_ == o.group_;
  }

 private:
  int bits_;
  int group_;
};

}  // namespace

bool quantized_matmul_cpu_takes(const Array& x, const Array& w, const Array& scales,
                                const Array& biases, int group, int bits) {
  const auto &xa = x.a, &wa = w.a, &sa = scales.a, &ba = biases.a;
  if ((bits != 4 && bits != 8) || (group != 32 && group != 64 && group != 128)) return false;
  if (xa.dtype() != mx::float32 || wa.dtype() != mx::uint32 || sa.dtype() != mx::float32 ||
      ba.dtype() != mx::float32 || xa.ndim() < 1 || wa.ndim() != 2 || sa.ndim() != 2 ||
      ba.ndim() != 2) {
    return false;
  }
  const int64_t K = xa.shape(-1), N = wa.shape(0);
  return K > 0 && K % group == 0 && wa.shape(1) * 32 == K * bits && sa.shape(0) == N &&
         sa.shape(1) * group == K && ba.shape(0) == N && ba.shape(1) == sa.shape(1);
}

std::unique_ptr<Array> quantized_matmul_cpu(const Array& x, const Array& w, const Array& scales,
                                            const Array& biases, int group, int bits) {
  if (!quantized_matmul_cpu_takes(x, w, scales, biases, group, bits)) {
    throw std::invalid_argument(
        "[rlx quantized_matmul] needs float32 x [..., K], uint32 w [N, K * bits / 32] and "
        "float32 scales and biases [N, K / group], 4 or 8 bits, groups of 32, 64 or 128");
  }
  auto s = mx::default_stream(mx::Device(mx::Device::DeviceType::cpu));
  auto shape = x.a.shape();
  shape.back() = w.a.shape(0);
  return wrap(mx::array(shape, mx::float32, std::make_shared<QuantizedMatmul>(s, bits, group),
                        {x.a, w.a, scales.a, biases.a}));
}

}  // namespace rlx
