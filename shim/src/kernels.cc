// The plugin's own CPU kernels, run inside MLX's graph as primitives.
//
// Why: the mlx-cpu wheel is built for baseline x86-64, and its erf is a
// scalar loop; erf-GELU on [256, 4096] took ~27 ms where rlx-runtime's CPU
// backend takes ~1.4 ms. A primitive keeps the op an ordinary node of the
// lazy graph (and of mx::compile's trace), so nothing is split or copied:
// MLX schedules our kernel on its CPU stream like its own.
//
// The numbers: the Abramowitz & Stegun 7.1.26 erf (max abs error 1.5e-7)
// with a degree-6 polynomial exp, the formula rlx-runtime's CPU backend
// uses (rlx-cpu 0.2.19 `kernels.rs`, MIT OR Apache-2.0, whose AVX2 arm this
// ports), so the plugin and the reference agree to rounding.

#include "rlx-mlx-shim/include/kernels.h"
#include "rlx-mlx-shim/src/rlx_math.h"
#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/src/pool.h"


#include <algorithm>
#include <cmath>
#include <cstring>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/src/kernels.rs.h"

namespace rlx {

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;

inline float gelu_scalar(float x) {
  float e = x * kInvSqrt2;
  float sign = e >= 0.0f ? 1.0f : -1.0f;
  float xa = std::fabs(e);
  float t = 1.0f / (1.0f + 0.3275911f * xa);
  float y = t * (0.2548296f +
                 t * (-0.28449672f + t * (1.4214138f + t * (-1.4531521f + t * 1.0614054f))));
  float erf = sign * (1.0f - y * exp_poly(-xa * xa));
  return x * 0.5f * (1.0f + erf);
}

#if RLX_X86
__attribute__((target("avx2,fma"))) void gelu_avx2(const float* src, float* dst, size_t n) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 neg_one = _mm256_set1_ps(-1.0f), zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(src + i);
    __m256 e = _mm256_mul_ps(x, _mm256_set1_ps(kInvSqrt2));
    __m256 xa = _mm256_and_ps(e, abs_mask);
    __m256 sign = _mm256_blendv_ps(neg_one, one, _mm256_cmp_ps(e, zero, _CMP_GE_OQ));
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), xa, one));
    __m256 y = _mm256_set1_ps(1.061405429f);
    y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(-1.453152027f));
    y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(1.421413741f));
    y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(-0.284496736f));
    y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(0.254829592f));
    y = _mm256_mul_ps(y, t);
    __m256 ex = exp8(_mm256_sub_ps(zero, _mm256_mul_ps(xa, xa)));
    __m256 erf = _mm256_mul_ps(sign, _mm256_fnmadd_ps(y, ex, one));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(x, _mm256_mul_ps(half, _mm256_add_ps(one, erf))));
  }
  for (; i < n; ++i) dst[i] = gelu_scalar(src[i]);
}

#endif  // RLX_X86

#if RLX_NEON
// gelu_scalar on four lanes, statement for statement: the same bits.
void gelu_neon(const float* src, float* dst, size_t n) {
  using namespace neon;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 x = F4::load(src + i);
    F4 e = x * kInvSqrt2;
    F4 sign = select(e >= 0.0f, 1.0f, -1.0f);
    F4 xa = abs(e);
    F4 t = 1.0f / (1.0f + 0.3275911f * xa);
    F4 y = t * (0.2548296f +
                t * (-0.28449672f + t * (1.4214138f + t * (-1.4531521f + t * 1.0614054f))));
    F4 erf = sign * (1.0f - y * exp4(-xa * xa));
    (x * 0.5f * (1.0f + erf)).store(dst + i);
  }
  for (; i < n; ++i) dst[i] = gelu_scalar(src[i]);
}
#endif  // RLX_NEON

// rlx-cpu's saturating exp, sigmoid 1/(1 + e^-x) and silu x/(1 + e^-x),
// all over exp_poly (so silu(-inf) = -inf and exp(100) = 3.3e38, as there).
inline float exp_scalar(float x) { return exp_poly(x); }
inline float sigmoid_scalar(float x) { return 1.0f / (1.0f + exp_poly(-x)); }
inline float silu_scalar(float x) { return x / (1.0f + exp_poly(-x)); }

#if RLX_X86
__attribute__((target("avx2,fma"))) void exp_avx2(const float* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, exp8(_mm256_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = exp_scalar(src[i]);
}

// x / (1 + e^-x) (silu) or 1 / (1 + e^-x) (sigmoid).
template <bool kSilu>
__attribute__((target("avx2,fma"))) void logistic_avx2(const float* src, float* dst, size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(src + i);
    __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, x)));
    _mm256_storeu_ps(dst + i, _mm256_div_ps(kSilu ? x : one, d));
  }
  for (; i < n; ++i) dst[i] = kSilu ? silu_scalar(src[i]) : sigmoid_scalar(src[i]);
}
#endif  // RLX_X86

#if RLX_NEON
// exp_scalar, sigmoid_scalar and silu_scalar on four lanes: the same bits.
void exp_neon(const float* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) neon::exp4(neon::F4::load(src + i)).store(dst + i);
  for (; i < n; ++i) dst[i] = exp_scalar(src[i]);
}

template <bool kSilu>
void logistic_neon(const float* src, float* dst, size_t n) {
  using namespace neon;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 x = F4::load(src + i);
    ((kSilu ? x : F4(1.0f)) / (1.0f + exp4(-x))).store(dst + i);
  }
  for (; i < n; ++i) dst[i] = kSilu ? silu_scalar(src[i]) : sigmoid_scalar(src[i]);
}
#endif  // RLX_NEON

enum class Unary { GeluErf, Exp, Sigmoid, Silu };

const char* unary_name(Unary k) {
  switch (k) {
    case Unary::GeluErf: return "RlxGeluErf";
    case Unary::Exp: return "RlxExp";
    case Unary::Sigmoid: return "RlxSigmoid";
    case Unary::Silu: return "RlxSilu";
  }
  return "RlxUnary";
}

void unary_range(Unary k, const float* src, float* dst, size_t n) {
  [[maybe_unused]] const bool v = RLX_X86 && has_avx2_fma();
  [[maybe_unused]] const bool v4 = RLX_NEON && has_neon();
  switch (k) {
    case Unary::GeluErf:
#if RLX_X86
      if (v) return gelu_avx2(src, dst, n);
#elif RLX_NEON
      if (v4) return gelu_neon(src, dst, n);
#endif
      for (size_t i = 0; i < n; ++i) dst[i] = gelu_scalar(src[i]);
      return;
    case Unary::Exp:
#if RLX_X86
      if (v) return exp_avx2(src, dst, n);
#elif RLX_NEON
      if (v4) return exp_neon(src, dst, n);
#endif
      for (size_t i = 0; i < n; ++i) dst[i] = exp_scalar(src[i]);
      return;
    case Unary::Sigmoid:
#if RLX_X86
      if (v) return logistic_avx2<false>(src, dst, n);
#elif RLX_NEON
      if (v4) return logistic_neon<false>(src, dst, n);
#endif
      for (size_t i = 0; i < n; ++i) dst[i] = sigmoid_scalar(src[i]);
      return;
    case Unary::Silu:
#if RLX_X86
      if (v) return logistic_avx2<true>(src, dst, n);
#elif RLX_NEON
      if (v4) return logistic_neon<true>(src, dst, n);
#endif
      for (size_t i = 0; i < n; ++i) dst[i] = silu_scalar(src[i]);
      return;
  }
}

// Splits large tensors over the plugin's threads (MLX's CPU stream is one
// thread; rlx-runtime's CPU backend uses every core for these ops).
void unary_parallel(Unary k, const float* src, float* dst, size_t n) {
  constexpr size_t kMinPerThread = 1 << 16;
  auto& pool = Pool::get();
  size_t parts = std::min(pool.size(), std::max<size_t>(1, n / kMinPerThread));
  if (parts <= 1) {
    unary_range(k, src, dst, n);
    return;
  }
  size_t chunk = (n + parts - 1) / parts;
  chunk = (chunk + 7) & ~size_t(7);
  pool.run(parts, [&](size_t t) {
    size_t lo = t * chunk;
    if (lo < n) unary_range(k, src + lo, dst + lo, std::min(chunk, n - lo));
  });
}

// d/dx gelu(x) = 0.5 (1 + erf(x/sqrt 2)) + x exp(-x^2/2) / sqrt(2 pi), in
// MLX ops (gradients are not on the hot path).
mx::array gelu_grad(const mx::array& x, mx::StreamOrDevice s) {
  auto cdf = mx::multiply(mx::array(0.5f),
                          mx::add(mx::array(1.0f), mx::erf(mx::multiply(x, mx::array(kInvSqrt2), s), s), s),
                          s);
  auto pdf = mx::multiply(mx::array(0.3989422804014327f),
                          mx::exp(mx::multiply(mx::array(-0.5f), mx::square(x, s), s), s), s);
  return mx::add(cdf, mx::multiply(x, pdf, s), s);
}

// One elementwise float32 kernel as an MLX primitive: a single task on the
// CPU stream, where MLX's composite (rlx's saturating exp alone is a clip,
// two exps and a select) is several.
class RlxUnary : public mx::UnaryPrimitive, public RunsInline {
 public:
  RlxUnary(mx::Stream stream, Unary kind) : mx::UnaryPrimitive(stream), kind_(kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    const auto& in = inputs[0];
    if (in.dtype() != mx::float32) {
      throw std::invalid_argument(std::string("[rlx ") + name() + "] needs a float32 input");
    }
    // Reuse the input's buffer when MLX says it may (as its own unary ops do).
    bool dense = in.flags().row_contiguous;
    if (dense && in.is_donatable() && in.data_size() == in.size()) {
      out.copy_shared_buffer(in);
    } else {
      out.set_data(mx::allocator::malloc(out.nbytes()));
    }
    // A view (broadcast, transposed) is read through its strides in the
    // task: no copy op in the graph.
    run_task(stream(), inputs, out,
             [dst = out.data<float>(), n = out.size(), k = kind_](const std::vector<mx::array>& in) {
               std::vector<float> tmp;
               unary_parallel(k, row_major(in[0], tmp), dst, n);
             });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[rlx ") + name() +
                             "] is a CPU kernel; the GPU lowering uses MLX ops");
  }

  std::vector<mx::array> vjp(const std::vector<mx::array>& primals,
                             const std::vector<mx::array>& cotangents,
                             const std::vector<int>&,
                             const std::vector<mx::array>&) override {
    return {mx::multiply(cotangents[0], derivative(primals[0]), stream())};
  }

  std::vector<mx::array> jvp(const std::vector<mx::array>& primals,
                             const std::vector<mx::array>& tangents,
                             const std::vector<int>&) override {
    return {mx::multiply(tangents[0], derivative(primals[0]), stream())};
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

  const char* name() const override { return unary_name(kind_); }
  bool is_equivalent(const mx::Primitive& other) const override {
    return kind_ == static_cast<const RlxUnary&>(other).kind_;
  }

 private:
  // d/dx, in MLX ops (gradients are not on the hot path).
  mx::array derivative(const mx::array& x) {
    auto s = stream();
    switch (kind_) {
      case Unary::GeluErf: return gelu_grad(x, s);
      case Unary::Exp: return mx::exp(x, s);
      case Unary::Sigmoid: {
        auto g = mx::sigmoid(x, s);
        return mx::multiply(g, mx::subtract(mx::array(1.0f), g, s), s);
      }
      case Unary::Silu: {
        auto g = mx::sigmoid(x, s);
        return mx::multiply(g, mx::add(mx::array(1.0f),
                                       mx::multiply(x, mx::subtract(mx::array(1.0f), g, s), s), s),
                            s);
      }
    }
    throw std::logic_error("[rlx unary] unknown kind");
  }

  Unary kind_;
};

std::unique_ptr<Array> unary_cpu(const Array& x, Unary kind) {
  if (x.a.dtype() != mx::float32) {
    throw std::invalid_argument(std::string("[rlx ") + unary_name(kind) + "] float32 only");
  }
  auto s = mx::default_stream(mx::Device(mx::Device::DeviceType::cpu));
  return wrap(mx::array(x.a.shape(), mx::float32, std::make_shared<RlxUnary>(s, kind), {x.a}));
}

// up * silu(gate) over rows of 2N holding both halves, as rlx-cpu's
// swiglu_rows (the same exp polynomial, the product in the same order).
struct SwigluParams {
  size_t n;
  bool gate_first;
  bool operator==(const SwigluParams& o) const { return n == o.n && gate_first == o.gate_first; }
};

void swiglu_rows(const float* x, float* y, size_t r0, size_t r1, const SwigluParams& p) {
  for (size_t r = r0; r < r1; ++r) {
    const float* row = x + r * 2 * p.n;
    const float* gate = p.gate_first ? row : row + p.n;
    const float* up = p.gate_first ? row + p.n : row;
    float* yr = y + r * p.n;
    unary_range(Unary::Silu, gate, yr, p.n);
    for (size_t i = 0; i < p.n; ++i) yr[i] = up[i] * yr[i];
  }
}

void run_swiglu(const float* const* in, float* y, size_t total,
                const SwigluParams& p) {
  const size_t rows = p.n == 0 ? 0 : total / p.n;
  constexpr size_t kMinPerThread = 1 << 16;
  auto& pool = Pool::get();
  size_t parts = std::min({pool.size(), rows, std::max<size_t>(1, total / kMinPerThread)});
  if (parts <= 1) {
    swiglu_rows(in[0], y, 0, rows, p);
    return;
  }
  size_t per = (rows + parts - 1) / parts;
  pool.run(parts, [&](size_t t) {
    size_t r0 = t * per, r1 = std::min(rows, r0 + per);
    if (r0 < r1) swiglu_rows(in[0], y, r0, r1, p);
  });
}

}  // namespace

std::unique_ptr<Array> swiglu_cpu(const Array& x, bool gate_first) {
  if (x.a.dtype() != mx::float32) throw std::invalid_argument("[rlx swiglu] float32 only");
  if (x.a.ndim() == 0 || x.a.shape().back() % 2 != 0) {
    throw std::invalid_argument("[rlx swiglu] needs rows of 2N (gate and up halves)");
  }
  auto shape = x.a.shape();
  shape.back() /= 2;
  return wrap(cpu_kernel("RlxSwiGlu", run_swiglu, SwigluParams{size_t(shape.back()), gate_first},
                         shape, {x.a}, false));
}

bool kernels_vectorized() { return has_avx2_fma() || has_neon(); }

void set_portable_kernels(bool on) { portable_only().store(on, std::memory_order_relaxed); }

std::unique_ptr<Array> gelu_erf_cpu(const Array& x) { return unary_cpu(x, Unary::GeluErf); }
std::unique_ptr<Array> exp_rlx_cpu(const Array& x) { return unary_cpu(x, Unary::Exp); }
std::unique_ptr<Array> sigmoid_rlx_cpu(const Array& x) { return unary_cpu(x, Unary::Sigmoid); }
std::unique_ptr<Array> silu_rlx_cpu(const Array& x) { return unary_cpu(x, Unary::Silu); }

}  // namespace rlx
