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

namespace rlx {

namespace {

void need_f32(const mx::array& a, const char* op) {
  if (a.dtype() != mx::float32) {
    throw std::invalid_argument(std::string("[rlx ") + op + "] float32 only");
  }
}

// y = norm(x) * gamma + beta over rows of `c`: RmsNorm x / sqrt(mean(x^2)
// + eps), LayerNorm (x - mean) / sqrt(var + eps), biased variance.
void norm_rows(const float* x, const float* g, const float* b, float* y, size_t rows,
               size_t c, float eps, bool rms) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    float* yr = y + r * c;
    double mean = 0.0;
    if (!rms) {
      for (size_t i = 0; i < c; ++i) mean += xr[i];
      mean /= static_cast<double>(c);
    }
    double ss = 0.0;
    for (size_t i = 0; i < c; ++i) {
      double d = xr[i] - mean;
      ss += d * d;
    }
    float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(c) + eps));
    float m = static_cast<float>(mean);
    for (size_t i = 0; i < c; ++i) yr[i] = (xr[i] - m) * inv * g[i] + b[i];
  }
}

struct NormParams {
  size_t c;
  float eps;
  bool rms;
  bool operator==(const NormParams& o) const { return c == o.c && eps == o.eps && rms == o.rms; }
};

void run_norm(const std::vector<const float*>& in, float* y, size_t n, const NormParams& p) {
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

void run_rope(const std::vector<const float*>& in, float* y, size_t, const RopeParams& p) {
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

void run_gather(const std::vector<const float*>& in, float* y, size_t n, const GatherParams& p) {
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
struct AttnParams {
  size_t b, h, hk, lq, lk, d, dv;
  float scale;
  bool causal;
  bool bshd;
  bool operator==(const AttnParams& o) const {
    return b == o.b && h == o.h && hk == o.hk && lq == o.lq && lk == o.lk && d == o.d &&
           dv == o.dv && scale == o.scale && causal == o.causal && bshd == o.bshd;
  }
};

// Element offset of (batch, head, position) in a tensor of `heads` heads,
// `len` positions and rows of `width`, in either layout.
inline size_t at(bool bshd, size_t bi, size_t hi, size_t li, size_t heads, size_t len,
                 size_t width) {
  return (bshd ? (bi * len + li) * heads + hi : (bi * heads + hi) * len + li) * width;
}

void attend_rows(const float* q, const float* k, const float* v, float* o, AttnParams p) {
  std::vector<float> w(p.lk);
  size_t group = p.h / p.hk, q_off = p.lk > p.lq ? p.lk - p.lq : 0;
  for (size_t bi = 0; bi < p.b; ++bi) {
    for (size_t hi = 0; hi < p.h; ++hi) {
      size_t kh = hi / group;
      for (size_t qi = 0; qi < p.lq; ++qi) {
        const float* qr = q + at(p.bshd, bi, hi, qi, p.h, p.lq, p.d);
        float* orow = o + at(p.bshd, bi, hi, qi, p.h, p.lq, p.dv);
        size_t keys = p.causal ? std::min(p.lk, q_off + qi + 1) : p.lk;
        float mx = -INFINITY;
        for (size_t ki = 0; ki < keys; ++ki) {
          const float* kr = k + at(p.bshd, bi, kh, ki, p.hk, p.lk, p.d);
          float s = 0.0f;
          for (size_t j = 0; j < p.d; ++j) s += qr[j] * kr[j];
          w[ki] = s * p.scale;
          mx = std::max(mx, w[ki]);
        }
        float sum = 0.0f;
        for (size_t ki = 0; ki < keys; ++ki) {
          w[ki] = std::exp(w[ki] - mx);
          sum += w[ki];
        }
        float inv = 1.0f / sum;
        for (size_t j = 0; j < p.dv; ++j) orow[j] = 0.0f;
        for (size_t ki = 0; ki < keys; ++ki) {
          const float* vr = v + at(p.bshd, bi, kh, ki, p.hk, p.lk, p.dv);
          float wk = w[ki] * inv;
          for (size_t j = 0; j < p.dv; ++j) orow[j] += wk * vr[j];
        }
      }
    }
  }
}

void run_attention(const std::vector<const float*>& in, float* o, size_t, const AttnParams& p) {
  attend_rows(in[0], in[1], in[2], o, p);
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
  // [..., S, H * D]: the leading axes are the batch; read as [B, S, H, D]
  // without a reshape op around the kernel.
  const auto& sh = x.a.shape();
  int r = x.a.ndim();
  if (r < 2 || head_dim == 0 || size_t(sh[r - 1]) % head_dim != 0) {
    throw std::invalid_argument("[rlx rope] needs x as [..., S, H * head_dim]");
  }
  size_t b = 1;
  for (int i = 0; i < r - 2; ++i) b *= size_t(sh[i]);
  RopeParams p{b, size_t(sh[r - 2]), size_t(sh[r - 1]) / head_dim, head_dim, n_rot, stride,
               per_token, gptj};
  size_t rows = per_token ? p.b * p.s : p.s;
  if (n_rot > p.d || n_rot % 2 != 0 || n_rot / 2 > stride || cos.a.size() < rows * stride ||
      sin.a.size() != cos.a.size()) {
    throw std::invalid_argument("[rlx rope] tables too small for the rotation asked");
  }
  return wrap(cpu_kernel("RlxRope", run_rope, p, sh, {x.a, cos.a, sin.a}, false));
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
  for (const auto* a : {&q, &k, &v}) need_f32(a->a, "attention");
  if (q.a.ndim() != 4 || k.a.ndim() != 4 || v.a.ndim() != 4) {
    throw std::invalid_argument("[rlx attention] needs q, k, v of rank 4");
  }
  const auto &qs = q.a.shape(), &ks = k.a.shape(), &vs = v.a.shape();
  // (B, H, L, D), or (B, L, H, D) with `bshd`.
  int ha = bshd ? 2 : 1, la = bshd ? 1 : 2;
  AttnParams p{size_t(qs[0]), size_t(qs[ha]), size_t(ks[ha]), size_t(qs[la]), size_t(ks[la]),
               size_t(qs[3]), size_t(vs[3]), scale, causal, bshd};
  if (ks[0] != qs[0] || vs[0] != qs[0] || ks[3] != qs[3] || vs[ha] != ks[ha] ||
      vs[la] != ks[la] || p.hk == 0 || p.h % p.hk != 0 || p.lk == 0) {
    throw std::invalid_argument("[rlx attention] q, k, v disagree in shape");
  }
  // (B, H, Lq, Dv), or (B, Lq, H, Dv): q's first three axes either way.
  return wrap(cpu_kernel("RlxAttention", run_attention, p, {qs[0], qs[1], qs[2], vs[3]},
                         {q.a, k.a, v.a}, false));
}

}  // namespace rlx
