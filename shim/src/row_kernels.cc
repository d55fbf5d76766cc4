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
#include "rlx-mlx-shim/src/strided.h"

namespace rlx {

namespace {

mx::Stream cpu_stream() {
  return mx::default_stream(mx::Device(mx::Device::DeviceType::cpu));
}

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

class RowNorm : public mx::Primitive {
 public:
  RowNorm(mx::Stream s, float eps, bool rms) : mx::Primitive(s), eps_(eps), rms_(rms) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& out = outs[0];
    auto& enc = start_task(stream(), in, out);
    size_t c = in[0].shape().back();
    enc.dispatch([in, y = out.data<float>(), rows = out.size() / c, c, eps = eps_, rms = rms_]() {
      std::vector<float> t0, t1, t2;
      norm_rows(row_major(in[0], t0), row_major(in[1], t1), row_major(in[2], t2), y, rows, c,
                eps, rms);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[rlx norm] is a CPU kernel; the GPU lowering uses MLX's");
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape()};
  }
  const char* name() const override { return rms_ ? "RlxRmsNorm" : "RlxLayerNorm"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto& o = static_cast<const RowNorm&>(other);
    return eps_ == o.eps_ && rms_ == o.rms_;
  }

 private:
  float eps_;
  bool rms_;
};

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

class Rope : public mx::Primitive {
 public:
  Rope(mx::Stream s, RopeParams p) : mx::Primitive(s), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& out = outs[0];
    auto& enc = start_task(stream(), in, out);
    enc.dispatch([in, y = out.data<float>(), p = p_]() {
      std::vector<float> t0, t1, t2;
      rope_rows(row_major(in[0], t0), row_major(in[1], t1), row_major(in[2], t2), y, p);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[rlx rope] is a CPU kernel; the GPU lowering uses MLX ops");
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape()};
  }
  const char* name() const override { return "RlxRope"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const Rope&>(other).p_;
  }

 private:
  RopeParams p_;
};


// Scaled dot-product attention of q (B, H, Lq, D), k (B, Hkv, Lk, D),
// v (B, Hkv, Lk, Dv), no mask or causal (key ki kept while ki <= the
// query's position, queries sitting at the end of the keys), query head h
// reading KV head h / (H / Hkv). Softmax with the row's maximum subtracted;
// masked keys take no weight (rlx writes -1e9 for them, whose exp is 0).
struct AttnParams {
  size_t b, h, hk, lq, lk, d, dv;
  float scale;
  bool causal;
  bool operator==(const AttnParams& o) const {
    return b == o.b && h == o.h && hk == o.hk && lq == o.lq && lk == o.lk && d == o.d &&
           dv == o.dv && scale == o.scale && causal == o.causal;
  }
};

void attend_rows(const float* q, const float* k, const float* v, float* o, AttnParams p) {
  std::vector<float> w(p.lk);
  size_t group = p.h / p.hk, q_off = p.lk > p.lq ? p.lk - p.lq : 0;
  for (size_t bi = 0; bi < p.b; ++bi) {
    for (size_t hi = 0; hi < p.h; ++hi) {
      size_t kh = hi / group;
      const float* kb = k + (bi * p.hk + kh) * p.lk * p.d;
      const float* vb = v + (bi * p.hk + kh) * p.lk * p.dv;
      for (size_t qi = 0; qi < p.lq; ++qi) {
        const float* qr = q + ((bi * p.h + hi) * p.lq + qi) * p.d;
        float* orow = o + ((bi * p.h + hi) * p.lq + qi) * p.dv;
        size_t keys = p.causal ? std::min(p.lk, q_off + qi + 1) : p.lk;
        float mx = -INFINITY;
        for (size_t ki = 0; ki < keys; ++ki) {
          const float* kr = kb + ki * p.d;
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
          const float* vr = vb + ki * p.dv;
          float wk = w[ki] * inv;
          for (size_t j = 0; j < p.dv; ++j) orow[j] += wk * vr[j];
        }
      }
    }
  }
}

class Attention : public mx::Primitive {
 public:
  Attention(mx::Stream s, AttnParams p) : mx::Primitive(s), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& in, std::vector<mx::array>& outs) override {
    auto& out = outs[0];
    auto& enc = start_task(stream(), in, out);
    enc.dispatch([in, y = out.data<float>(), p = p_]() {
      std::vector<float> t0, t1, t2;
      attend_rows(row_major(in[0], t0), row_major(in[1], t1), row_major(in[2], t2), y, p);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("[rlx attention] is a CPU kernel; the GPU lowering uses MLX's");
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>&) override {
    return {{int(p_.b), int(p_.h), int(p_.lq), int(p_.dv)}};
  }
  const char* name() const override { return "RlxAttention"; }
  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const Attention&>(other).p_;
  }

 private:
  AttnParams p_;
};

}  // namespace

std::unique_ptr<Array> norm_last_cpu(const Array& x, const Array& gamma, const Array& beta,
                                     float eps, bool rms) {
  for (const auto* a : {&x, &gamma, &beta}) need_f32(a->a, "norm");
  if (x.a.ndim() == 0) throw std::invalid_argument("[rlx norm] needs an axis to normalise");
  size_t c = x.a.shape().back();
  if (gamma.a.size() != c || beta.a.size() != c) {
    throw std::invalid_argument("[rlx norm] gamma and beta need one value per feature");
  }
  auto s = cpu_stream();
  // Views are read through their strides by the kernel: no copy op.
  std::vector<mx::array> in{x.a, gamma.a, beta.a};
  return wrap(mx::array(x.a.shape(), mx::float32, std::make_shared<RowNorm>(s, eps, rms), in));
}

std::unique_ptr<Array> rope_cpu(const Array& x, const Array& cos, const Array& sin,
                                size_t n_rot, size_t stride, bool per_token, bool gptj) {
  for (const auto* a : {&x, &cos, &sin}) need_f32(a->a, "rope");
  if (x.a.ndim() != 4) throw std::invalid_argument("[rlx rope] needs x as [B, S, H, D]");
  const auto& sh = x.a.shape();
  RopeParams p{size_t(sh[0]), size_t(sh[1]), size_t(sh[2]), size_t(sh[3]), n_rot, stride,
               per_token, gptj};
  size_t rows = per_token ? p.b * p.s : p.s;
  if (n_rot > p.d || n_rot % 2 != 0 || n_rot / 2 > stride || cos.a.size() < rows * stride ||
      sin.a.size() != cos.a.size()) {
    throw std::invalid_argument("[rlx rope] tables too small for the rotation asked");
  }
  auto s = cpu_stream();
  std::vector<mx::array> in{x.a, cos.a, sin.a};
  return wrap(mx::array(sh, mx::float32, std::make_shared<Rope>(s, p), in));
}

std::unique_ptr<Array> attention_cpu(const Array& q, const Array& k, const Array& v, float scale,
                                     bool causal) {
  for (const auto* a : {&q, &k, &v}) need_f32(a->a, "attention");
  if (q.a.ndim() != 4 || k.a.ndim() != 4 || v.a.ndim() != 4) {
    throw std::invalid_argument("[rlx attention] needs q, k, v as [B, H, L, D]");
  }
  const auto &qs = q.a.shape(), &ks = k.a.shape(), &vs = v.a.shape();
  AttnParams p{size_t(qs[0]), size_t(qs[1]), size_t(ks[1]), size_t(qs[2]), size_t(ks[2]),
               size_t(qs[3]), size_t(vs[3]), scale, causal};
  if (ks[0] != qs[0] || vs[0] != qs[0] || ks[3] != qs[3] || vs[1] != ks[1] || vs[2] != ks[2] ||
      p.hk == 0 || p.h % p.hk != 0 || p.lk == 0) {
    throw std::invalid_argument("[rlx attention] q, k, v disagree in shape");
  }
  auto s = cpu_stream();
  std::vector<mx::array> in{q.a, k.a, v.a};
  mx::Shape shape{qs[0], qs[1], qs[2], vs[3]};
  return wrap(mx::array(shape, mx::float32, std::make_shared<Attention>(s, p), in));
}

}  // namespace rlx
