// The plugin's own CPU kernels for ops that work row by row over the last
// axis: RmsNorm / LayerNorm with gamma and beta, and rotary embedding.
//
// Why: on the CPU, MLX's `fast::rms_norm`, `fast::layer_norm` and its rope
// have no kernel of their own; they fall back to their composite graphs
// (an RmsNorm is 13 MLX ops, the plugin's rope with cos/sin tables 21),
// and every op of a lazy graph is a task on MLX's stream thread. At the
// sizes of a small model's decode step that per-op cost, not arithmetic,
// is the run (docs/PERFORMANCE.md, "Where a small graph's time goes").
// One primitive per rlx node makes it one task, as kernels.cc does for GELU.
//
// The numbers: float32 in and out; sums of squares and means accumulate in
// double, so a row's statistics are at least as exact as rlx-runtime's CPU
// backend's (which accumulates in float32).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/include/kernels.h"
#include "rlx-mlx-shim/src/kernels.rs.h"
#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/src/rlx_math.h"
#include "rlx-mlx-shim/src/rope_shape.h"
#include "rlx-mlx-shim/src/simd.h"

namespace rlx {

namespace {

void need_f32(const mx::array& a, const char* op) {
  if (a.dtype() != mx::float32) {
    throw std::invalid_argument(std::string("[rlx ") + op + "] float32 only");
  }
}

// y = norm(x) * gamma + beta over rows of `c`: RmsNorm x / sqrt(mean(x^2)
// + eps), LayerNorm (x - mean) / sqrt(var + eps), biased variance.
// sum of x[i] - shift (or of its square, `square`) in double, in partial
// sums: one chain of dependent adds over a row was the norm's whole time
// at a small model's widths (4 cycles an element).
double sum_f64_scalar(const float* x, size_t n, double shift, bool square) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t t = 0; t < 4; ++t) {
      double d = x[i + t] - shift;
      s[t] += square ? d * d : d;
    }
  }
  for (; i < n; ++i) {
    double d = x[i] - shift;
    s[0] += square ? d * d : d;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

#if RLX_X86
__attribute__((target("avx2,fma"))) double sum_f64_avx2(const float* x, size_t n, double shift,
                                                        bool square) {
  const __m256d sh = _mm256_set1_pd(shift);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), sh);
    __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), sh);
    if (square) {
      s0 = _mm256_fmadd_pd(lo, lo, s0);
      s1 = _mm256_fmadd_pd(hi, hi, s1);
    } else {
      s0 = _mm256_add_pd(s0, lo);
      s1 = _mm256_add_pd(s1, hi);
    }
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) +
         sum_f64_scalar(x + i, n - i, shift, square);
}

// y = (x - m) * inv * g + b over a row, eight at a time.
__attribute__((target("avx2,fma"))) void affine_avx2(const float* x, const float* g,
                                                     const float* b, float* y, size_t n, float m,
                                                     float inv) {
  const __m256 vm = _mm256_set1_ps(m), vi = _mm256_set1_ps(inv);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi),
                             _mm256_loadu_ps(g + i));
    _mm256_storeu_ps(y + i, _mm256_add_ps(t, _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) y[i] = (x[i] - m) * inv * g[i] + b[i];
}
#endif

#if RLX_NEON
// sum_f64_scalar's four partial sums in two double vectors (lanes 0-1 and
// 2-3), each a multiply then an add as there: the same bits.
template <bool kSquare>
double sum_f64_neon(const float* x, size_t n, double shift) {
  const float64x2_t sh = vdupq_n_f64(shift);
  float64x2_t s01 = vdupq_n_f64(0.0), s23 = vdupq_n_f64(0.0);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t v = vld1q_f32(x + i);
    float64x2_t lo = vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), sh);
    float64x2_t hi = vsubq_f64(vcvt_high_f64_f32(v), sh);
    if (kSquare) {
      lo = vmulq_f64(lo, lo);
      hi = vmulq_f64(hi, hi);
    }
    s01 = vaddq_f64(s01, lo);
    s23 = vaddq_f64(s23, hi);
  }
  double s[4] = {vgetq_lane_f64(s01, 0), vgetq_lane_f64(s01, 1), vgetq_lane_f64(s23, 0),
                 vgetq_lane_f64(s23, 1)};
  for (; i < n; ++i) {
    double d = x[i] - shift;
    s[0] += kSquare ? d * d : d;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The portable affine on four lanes: the same bits.
void affine_neon(const float* x, const float* g, const float* b, float* y, size_t n, float m,
                 float inv) {
  using namespace neon;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ((F4::load(x + i) - m) * inv * F4::load(g + i) + F4::load(b + i)).store(y + i);
  }
  for (; i < n; ++i) y[i] = (x[i] - m) * inv * g[i] + b[i];
}
#endif  // RLX_NEON

// y += a * x over n floats.
#if RLX_X86
__attribute__((target("avx2,fma"))) void axpy_avx2(float a, const float* x, float* y, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                                          _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}
#endif

#if RLX_NEON
// The same on four lanes, a multiply then an add: the same bits.
void axpy_neon(float a, const float* x, float* y, size_t n) {
  using namespace neon;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) (F4::load(y + i) + a * F4::load(x + i)).store(y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}
#endif

void axpy(float a, const float* x, float* y, size_t n) {
#if RLX_X86
  if (has_avx2_fma()) return axpy_avx2(a, x, y, n);
#elif RLX_NEON
  if (has_neon()) return axpy_neon(a, x, y, n);
#endif
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// w[i] = exp(w[i] - m) (rlx-cpu's exp polynomial) over n floats; returns
// their sum.
#if RLX_X86
__attribute__((target("avx2,fma"))) float exp_shifted_avx2(float* w, size_t n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(w + i), vm));
    _mm256_storeu_ps(w + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) +
              ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
  for (; i < n; ++i) {
    w[i] = exp_poly(w[i] - m);
    sum += w[i];
  }
  return sum;
}
#endif

#if RLX_NEON
// The exponentials four at a time; the sum still in order, one element
// after another, as the portable loop adds it (the same bits; the
// exponentials are the cost).
float exp_shifted_neon(float* w, size_t n, float m) {
  using namespace neon;
  float sum = 0.0f;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    float32x4_t e = exp4(F4::load(w + i) - m).v;
    vst1q_f32(w + i, e);
    sum += vgetq_lane_f32(e, 0);
    sum += vgetq_lane_f32(e, 1);
    sum += vgetq_lane_f32(e, 2);
    sum += vgetq_lane_f32(e, 3);
  }
  for (; i < n; ++i) {
    w[i] = exp_poly(w[i] - m);
    sum += w[i];
  }
  return sum;
}
#endif

float exp_shifted(float* w, size_t n, float m) {
#if RLX_X86
  if (has_avx2_fma()) return exp_shifted_avx2(w, n, m);
#elif RLX_NEON
  if (has_neon()) return exp_shifted_neon(w, n, m);
#endif
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    w[i] = exp_poly(w[i] - m);
    sum += w[i];
  }
  return sum;
}

double sum_f64(const float* x, size_t n, double shift, bool square) {
#if RLX_X86
  if (has_avx2_fma()) return sum_f64_avx2(x, n, shift, square);
#elif RLX_NEON
  if (has_neon()) {
    return square ? sum_f64_neon<true>(x, n, shift) : sum_f64_neon<false>(x, n, shift);
  }
#endif
  return sum_f64_scalar(x, n, shift, square);
}

void affine(const float* x, const float* g, const float* b, float* y, size_t n, float m,
            float inv) {
#if RLX_X86
  if (has_avx2_fma()) return affine_avx2(x, g, b, y, n, m, inv);
#elif RLX_NEON
  if (has_neon()) return affine_neon(x, g, b, y, n, m, inv);
#endif
  for (size_t i = 0; i < n; ++i) y[i] = (x[i] - m) * inv * g[i] + b[i];
}

// q . k over n floats in eight partial sums (a vector's lanes), for the
// same reason.
float dot_f32(const float* a, const float* b, size_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t t = 0; t < 8; ++t) s[t] += a[i + t] * b[i + t];
  }
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

void norm_rows(const float* x, const float* g, const float* b, float* y, size_t rows,
               size_t c, float eps, bool rms) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    double mean = 0.0;
    if (!rms) mean = sum_f64(xr, c, 0.0, false) / static_cast<double>(c);
    double ss = sum_f64(xr, c, mean, true);
    float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(c) + eps));
    float m = static_cast<float>(mean);
    affine(xr, g, b, yr, c, m, inv);
  }
}

struct NormParams {
  size_t c;
  float eps;
  bool rms;
  bool operator==(const NormParams& o) const { return c == o.c && eps == o.eps && rms == o.rms; }
};

void run_norm(const float* const* in, float* y, size_t n, const NormParams& p) {
  norm_rows(in[0], in[1], in[2], y, n / p.c, p.c, p.eps, p.rms);
}

// Rotary embedding of x [B, S, H, D] with tables of `stride`-wide rows
// (row = position, or token with `per_token`), `nr` rotated dims.
struct RopeParams {
  size_t b, s, h, d, nr, stride;
  bool per_token, gptj;
  bool operator==(const RopeParams& o) const {
    return b == o.b && s == o.s && h == o.h && d == o.d && nr == o.nr && stride == o.stride &&
           per_token == o.per_token && gptj == o.gptj;
  }
};

void rope_rows(const float* x, const float* cs, const float* sn, float* y, RopeParams p) {
  size_t rh = p.nr / 2;
  for (size_t bi = 0; bi < p.b; ++bi) {
    for (size_t si = 0; si < p.s; ++si) {
      size_t row = p.per_token ? bi * p.s + si : si;
      const float* c = cs + row * p.stride;
      const float* s = sn + row * p.stride;
      for (size_t hi = 0; hi < p.h; ++hi) {
        size_t off = ((bi * p.s + si) * p.h + hi) * p.d;
        const float* xr = x + off;
        float* yr = y + off;
        for (size_t i = 0; i < rh; ++i) {
          size_t i1 = p.gptj ? 2 * i : i;
          size_t i2 = p.gptj ? 2 * i + 1 : rh + i;
          float x1 = xr[i1], x2 = xr[i2];
          yr[i1] = x1 * c[i] - x2 * s[i];
          yr[i2] = x2 * c[i] + x1 * s[i];
        }
        if (p.nr < p.d) std::memcpy(yr + p.nr, xr + p.nr, (p.d - p.nr) * sizeof(float));
      }
    }
  }
}

void run_rope(const float* const* in, float* y, size_t, const RopeParams& p) {
  rope_rows(in[0], in[1], in[2], y, p);
}

// Gather on axis 0 by float32 indices, rlx-cpu's reading of them: NaN and
// negatives saturate to row 0, the rest truncate; a row past the table is
// zeros (rlx-cpu leaves it unwritten in a zeroed buffer).
struct GatherParams {
  size_t extent;
  size_t row;
  bool operator==(const GatherParams& o) const { return extent == o.extent && row == o.row; }
};

void run_gather(const float* const* in, float* y, size_t n, const GatherParams& p) {
  const float* t = in[0];
  const float* ix = in[1];
  size_t count = p.row == 0 ? 0 : n / p.row;
  for (size_t k = 0; k < count; ++k) {
    float v = ix[k];
    double f = (std::isnan(v) || v < 0.0f) ? 0.0 : std::floor(static_cast<double>(v));
    float* yr = y + k * p.row;
    if (f < static_cast<double>(p.extent)) {
      std::memcpy(yr, t + static_cast<size_t>(f) * p.row, p.row * sizeof(float));
    } else {
      std::memset(yr, 0, p.row * sizeof(float));
    }
  }
}

// Scaled dot-product attention of q (B, H, Lq, D), k (B, Hkv, Lk, D),
// v (B, Hkv, Lk, Dv), no mask or causal (key ki kept while ki <= the
// query's position, queries sitting at the end of the keys), query head h
// reading KV head h / (H / Hkv). Softmax with the row's maximum subtracted;
// masked keys take no weight (rlx writes -1e9 for them, whose exp is 0).
// `bshd`: every tensor is (B, L, H, D) instead, rlx's dominant layout,
// read and written in place of the four transposes around the kernel.
// `bias`: a (B, H, Lq, Lk) tensor, in that layout whatever `bshd` says,
// added to the scaled scores (a decode step's key bias: MLX's sdpa takes
// it as a composite of about twenty ops on a CPU stream).
struct AttnParams {
  size_t b, h, hk, lq, lk, d, dv;
  float scale;
  bool causal;
  bool bshd;
  bool bias;
  bool operator==(const AttnParams& o) const {
    return b == o.b && h == o.h && hk == o.hk && lq == o.lq && lk == o.lk && d == o.d &&
           dv == o.dv && scale == o.scale && causal == o.causal && bshd == o.bshd &&
           bias == o.bias;
  }
};

// Element offset of (batch, head, position) in a tensor of `heads` heads,
// `len` positions and rows of `width`, in either layout.
inline size_t at(bool bshd, size_t bi, size_t hi, size_t li, size_t heads, size_t len,
                 size_t width) {
  return (bshd ? (bi * len + li) * heads + hi : (bi * heads + hi) * len + li) * width;
}

void attend_rows(const float* q, const float* k, const float* v, const float* bias, float* o,
                 AttnParams p) {
  std::vector<float> w(p.lk);
  size_t group = p.h / p.hk, q_off = p.lk > p.lq ? p.lk - p.lq : 0;
  for (size_t bi = 0; bi < p.b; ++bi) {
    for (size_t hi = 0; hi < p.h; ++hi) {
      size_t kh = hi / group;
      for (size_t qi = 0; qi < p.lq; ++qi) {
        const float* qr = q + at(p.bshd, bi, hi, qi, p.h, p.lq, p.d);
        float* orow = o + at(p.bshd, bi, hi, qi, p.h, p.lq, p.dv);
        size_t keys = p.causal ? std::min(p.lk, q_off + qi + 1) : p.lk;
        const float* br = bias ? bias + ((bi * p.h + hi) * p.lq + qi) * p.lk : nullptr;
        float mx = -INFINITY;
        for (size_t ki = 0; ki < keys; ++ki) {
          const float* kr = k + at(p.bshd, bi, kh, ki, p.hk, p.lk, p.d);
          w[ki] = dot_f32(qr, kr, p.d) * p.scale;
          if (br) w[ki] += br[ki];
          mx = std::max(mx, w[ki]);
        }
        float sum = exp_shifted(w.data(), keys, mx);
        float inv = 1.0f / sum;
        for (size_t j = 0; j < p.dv; ++j) orow[j] = 0.0f;
        for (size_t ki = 0; ki < keys; ++ki) {
          const float* vr = v + at(p.bshd, bi, kh, ki, p.hk, p.lk, p.dv);
          float wk = w[ki] * inv;
          axpy(wk, vr, orow, p.dv);
        }
      }
    }
  }
}

void run_attention(const float* const* in, float* o, size_t, const AttnParams& p) {
  attend_rows(in[0], in[1], in[2], p.bias ? in[3] : nullptr, o, p);
}

// Checks the operands of `attention_cpu` / `attention_bias_cpu` and runs
// the kernel; `bias` null for none.
mx::array attention_kernel(const Array& q, const Array& k, const Array& v, const Array* bias,
                           float scale, bool causal, bool bshd) {
  for (const auto* a : {&q, &k, &v}) need_f32(a->a, "attention");
  if (q.a.ndim() != 4 || k.a.ndim() != 4 || v.a.ndim() != 4) {
    throw std::invalid_argument("[rlx attention] needs q, k, v of rank 4");
  }
  const auto &qs = q.a.shape(), &ks = k.a.shape(), &vs = v.a.shape();
  // (B, H, L, D), or (B, L, H, D) with `bshd`.
  int ha = bshd ? 2 : 1, la = bshd ? 1 : 2;
  AttnParams p{size_t(qs[0]), size_t(qs[ha]), size_t(ks[ha]), size_t(qs[la]), size_t(ks[la]),
               size_t(qs[3]), size_t(vs[3]), scale, causal, bshd, bias != nullptr};
  if (ks[0] != qs[0] || vs[0] != qs[0] || ks[3] != qs[3] || vs[ha] != ks[ha] ||
      vs[la] != ks[la] || p.hk == 0 || p.h % p.hk != 0 || p.lk == 0) {
    throw std::invalid_argument("[rlx attention] q, k, v disagree in shape");
  }
  std::vector<mx::array> in{q.a, k.a, v.a};
  if (bias) {
    need_f32(bias->a, "attention");
    if (bias->a.size() != p.b * p.h * p.lq * p.lk) {
      throw std::invalid_argument("[rlx attention] the bias needs B * H * Lq * Lk elements");
    }
    in.push_back(bias->a);
  }
  // (B, H, Lq, Dv), or (B, Lq, H, Dv): q's first three axes either way.
  return cpu_kernel("RlxAttention", run_attention, p, {qs[0], qs[1], qs[2], vs[3]}, in, false);
}

}  // namespace

std::unique_ptr<Array> norm_last_cpu(const Array& x, const Array& gamma, const Array& beta,
                                     float eps, bool rms) {
  for (const auto* a : {&x, &gamma, &beta}) need_f32(a->a, "norm");
  if (x.a.ndim() == 0) throw std::invalid_argument("[rlx norm] needs an axis to normalise");
  size_t c = x.a.shape().back();
  if (gamma.a.size() != c || beta.a.size() != c) {
    throw std::invalid_argument("[rlx norm] gamma and beta need one value per feature");
  }
  // Views are read through their strides by the kernel: no copy op.
  return wrap(cpu_kernel(rms ? "RlxRmsNorm" : "RlxLayerNorm", run_norm, NormParams{c, eps, rms},
                         x.a.shape(), {x.a, gamma.a, beta.a}, true));
}

std::unique_ptr<Array> rope_cpu(const Array& x, const Array& cos, const Array& sin,
                                size_t head_dim, size_t n_rot, size_t stride, bool per_token,
                                bool gptj) {
  for (const auto* a : {&x, &cos, &sin}) need_f32(a->a, "rope");
  // Read as [B, S, H, D] as it lies: no reshape op around the kernel.
  auto rs = rope_shape(x.a, cos.a, sin.a, head_dim, n_rot, stride, per_token);
  RopeParams p{rs.b, rs.s, rs.h, head_dim, n_rot, stride, per_token, gptj};
  return wrap(cpu_kernel("RlxRope", run_rope, p, x.a.shape(), {x.a, cos.a, sin.a}, false));
}

std::unique_ptr<Array> gather_rows_cpu(const Array& table, const Array& idx) {
  need_f32(table.a, "gather");
  need_f32(idx.a, "gather");
  if (table.a.ndim() == 0 || table.a.shape()[0] == 0) {
    throw std::invalid_argument("[rlx gather] needs a table with rows");
  }
  size_t row = table.a.size() / table.a.shape()[0];
  mx::Shape out = idx.a.shape();
  for (size_t d = 1; d < table.a.ndim(); ++d) out.push_back(table.a.shape()[d]);
  return wrap(cpu_kernel("RlxGatherRows", run_gather, GatherParams{size_t(table.a.shape()[0]), row},
                         out, {table.a, idx.a}, false));
}

std::unique_ptr<Array> attention_cpu(const Array& q, const Array& k, const Array& v, float scale,
                                     bool causal, bool bshd) {
  return wrap(attention_kernel(q, k, v, nullptr, scale, causal, bshd));
}

std::unique_ptr<Array> attention_bias_cpu(const Array& q, const Array& k, const Array& v,
                                          const Array& bias, float scale, bool bshd) {
  return wrap(attention_kernel(q, k, v, &bias, scale, false, bshd));
}

}  // namespace rlx
