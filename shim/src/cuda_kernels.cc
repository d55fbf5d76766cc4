// The plugin's own CUDA kernels, run inside MLX's graph through
// `mx::fast::cuda_kernel` (compiled by MLX's JIT on first use, then cached
// by MLX like its own fused kernels).
//
// Why: a decode step of a small language model is decided by how many MLX
// nodes the host builds and launches, not by arithmetic. Three of rlx's
// ops have no MLX primitive on CUDA and lower as composites there: the
// rotary embedding from cos/sin tables (MLX's `fast::rope` derives its
// angles from a base and an offset; the composite is about twenty nodes,
// seven kernels), attention of one query row with an additive bias (MLX's
// CUDA vector kernel takes no mask array, so `fast::sdpa` falls back to
// its composite) and rlx's saturating exp under sigmoid / SiLU (ten
// nodes). Each becomes one node here.
//
// The sizes are compiled into each kernel (MLX's JIT builds one per set of
// template arguments, once, and keeps it on disk), so the plugin calls
// these for steps of one row (a decode step), whose shapes are the same
// every step; a prompt's shapes change with its length, and its cost is
// arithmetic, which MLX's composites do as well.
//
// The arithmetic is float32 whatever the operands' type (f32, f16, bf16),
// rounded once into the output type.

#include "rlx-mlx-shim/include/cuda_kernels.h"
#include "rlx-mlx-shim/src/rope_shape.h"

#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "mlx/fast.h"

namespace rlx {

namespace {

// Block reductions over 128 threads (4 warps), shared by the kernels.
constexpr const char* kHeader = R"(
__device__ inline float rlx_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float rlx_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Every thread of the 128-thread block gets the block's sum (max).
__device__ inline float rlx_block_sum(float v, float* red) {
  v = rlx_warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0] + red[1] + red[2] + red[3];
  __syncthreads();
  return r;
}
__device__ inline float rlx_block_max(float v, float* red) {
  v = rlx_warp_max(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();
  return r;
}
// rlx-runtime's saturating exp: the argument clamped to [-87.3, 88.7]
// (NaN kept), above 88 computed as the square of e^(x/2) so that it stays
// finite (e^88.7 = 3.3e38).
__device__ inline float rlx_exp(float x) {
  float c = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  if (c > 88.0f) {
    float h = expf(c * 0.5f);
    return h * h;
  }
  return expf(c);
}
)";

// Rotary embedding: one thread per output element of x [B, S, H, D].
constexpr const char* kRope = R"(
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= TOTAL) return;
  const int d = (int)(idx % D);
  const long long bs = idx / D / H;
  const long long row = PER_TOKEN ? bs : bs % S;
  const long long base = idx - d;
  float y;
  if (d >= NR) {
    y = (float)x[idx];
  } else {
    constexpr int RH = NR / 2;
    int i, i1, i2;
    bool first;
    if (GPTJ) {
      i = d / 2; i1 = 2 * i; i2 = i1 + 1; first = (d % 2) == 0;
    } else {
      first = d < RH; i = first ? d : d - RH; i1 = i; i2 = i + RH;
    }
    const float c = (float)cs[row * STRIDE + i];
    const float s = (float)sn[row * STRIDE + i];
    const float x1 = (float)x[base + i1];
    const float x2 = (float)x[base + i2];
    y = first ? x1 * c - x2 * s : x2 * c + x1 * s;
  }
  out[idx] = (OutT)y;
)";

// Attention of one query row per (batch, head) over LK keys with an
// additive bias: a 128-thread block per (b, h); a warp per key for the
// scores, the block for the softmax, a thread per output dim for P @ V.
constexpr const char* kAttention = R"(
  __shared__ float sc[LK];
  __shared__ float qs[D];
  __shared__ float red[4];
  const int bh = blockIdx.x;
  const int b = bh / H;
  const int kh = (bh % H) / (H / HK);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float scale = __int_as_float(SCALE_BITS);
  for (int i = tid; i < D; i += 128) qs[i] = (float)q[(long long)bh * D + i];
  __syncthreads();
  const long long kvb = (long long)b * HK + kh;
  const auto* kr = k + kvb * LK * D;
  const auto* vr = v + kvb * LK * DV;
  const auto* mr = bias + (long long)bh * LK;
  for (int j = warp; j < LK; j += 4) {
    float acc = 0.0f;
    for (int i = lane; i < D; i += 32) acc += qs[i] * (float)kr[(long long)j * D + i];
    acc = rlx_warp_sum(acc);
    if (lane == 0) sc[j] = acc * scale + (float)mr[j];
  }
  __syncthreads();
  float m = __int_as_float(0xff800000);  // -infinity
  for (int j = tid; j < LK; j += 128) m = fmaxf(m, sc[j]);
  m = rlx_block_max(m, red);
  float l = 0.0f;
  for (int j = tid; j < LK; j += 128) {
    const float e = expf(sc[j] - m);
    sc[j] = e;
    l += e;
  }
  l = rlx_block_sum(l, red);
  for (int i = tid; i < DV; i += 128) {
    float o = 0.0f;
    for (int j = 0; j < LK; ++j) o += sc[j] * (float)vr[(long long)j * DV + i];
    out[(long long)bh * DV + i] = (OutT)(o / l);
  }
)";

// exp / sigmoid / SiLU over rlx's saturating exp, one thread an element.
constexpr const char* kActivation = R"(
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= TOTAL) return;
  const float v = (float)x[idx];
  float y;
  if (KIND == 0) {
    y = rlx_exp(v);
  } else if (KIND == 1) {
    y = 1.0f / (1.0f + rlx_exp(-v));
  } else {
    y = v / (1.0f + rlx_exp(-v));
  }
  out[idx] = (OutT)y;
)";

bool float_type(mx::Dtype t) {
  return t == mx::float32 || t == mx::float16 || t == mx::bfloat16;
}

void need_float(const mx::array& a, const char* what) {
  if (!float_type(a.dtype())) {
    throw std::invalid_argument(std::string("[rlx ") + what +
                                "] takes float32, float16 or bfloat16 operands");
  }
}

int checked_int(size_t n, const char* what) {
  if (n > size_t(INT_MAX)) {
    throw std::invalid_argument(std::string("[rlx ") + what + "] has more than 2^31 - 1 elements");
  }
  return int(n);
}

// One kernel function per source: MLX's JIT compiles each instantiation
// (template arguments) once and caches it by name.
const mx::fast::CustomKernelFunction& kernel(const char* name,
                                             std::vector<std::string> inputs,
                                             const char* source) {
  static std::mutex mu;
  static std::map<std::string, mx::fast::CustomKernelFunction> made;
  std::lock_guard<std::mutex> lock(mu);
  auto it = made.find(name);
  if (it == made.end()) {
    it = made
             .emplace(name, mx::fast::cuda_kernel(name, inputs, {"out"}, source, kHeader,
                                                  /*ensure_row_contiguous=*/true))
             .first;
  }
  return it->second;
}

mx::array launch(const mx::fast::CustomKernelFunction& f, const std::vector<mx::array>& inputs,
                 const mx::Shape& shape, mx::Dtype dt, int threads, int block,
                 std::vector<std::pair<std::string, mx::fast::TemplateArg>> targs) {
  targs.emplace_back("OutT", dt);
  auto outs = f(inputs, {shape}, {dt}, {threads, 1, 1}, {block, 1, 1}, targs, std::nullopt, false,
                target());
  return outs.at(0);
}

}  // namespace

std::unique_ptr<Array> rope_cuda(const Array& x, const Array& cos, const Array& sin,
                                 size_t head_dim, size_t n_rot, size_t stride, bool per_token,
                                 bool gptj) {
  for (const auto* a : {&x, &cos, &sin}) need_float(a->a, "rope");
  const auto& sh = x.a.shape();
  auto rs = rope_shape(x.a, cos.a, sin.a, head_dim, n_rot, stride, per_token);
  int total = checked_int(x.a.size(), "rope");
  if (total == 0) return wrap(x.a);
  const auto& f = kernel("rlx_rope", {"x", "cs", "sn"}, kRope);
  return wrap(launch(f, {x.a, cos.a, sin.a}, sh, x.a.dtype(), total, 256,
                     {{"TOTAL", total},
                      {"D", int(head_dim)},
                      {"NR", int(n_rot)},
                      {"H", checked_int(rs.h, "rope")},
                      {"S", checked_int(rs.s, "rope")},
                      {"STRIDE", checked_int(stride, "rope")},
                      {"PER_TOKEN", per_token},
                      {"GPTJ", gptj}}));
}

bool attention_row_cuda_takes(const Array& q, const Array& k, const Array& v,
                              const Array& bias) {
  const auto &qs = q.a.shape(), &ks = k.a.shape(), &vs = v.a.shape();
  if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4) return false;
  for (const auto* a : {&q, &k, &v, &bias}) {
    if (!float_type(a->a.dtype())) return false;
  }
  int b = qs[0], h = qs[1], d = qs[3], hk = ks[1], lk = ks[2], dv = vs[3];
  // Scores of up to 8192 keys, the query row, in 48 KB of static shared
  // memory; longer rows keep MLX's composite.
  return qs[2] == 1 && ks[0] == b && vs[0] == b && vs[1] == hk && vs[2] == lk && ks[3] == d &&
         hk > 0 && h % hk == 0 && lk > 0 && lk <= 8192 && d > 0 && d <= 1024 && dv > 0 &&
         bias.a.size() == size_t(b) * size_t(h) * size_t(lk) &&
         size_t(b) * size_t(h) * 128 <= size_t(INT_MAX);
}

std::unique_ptr<Array> attention_row_cuda(const Array& q, const Array& k, const Array& v,
                                          const Array& bias, float scale) {
  if (!attention_row_cuda_takes(q, k, v, bias)) {
    throw std::invalid_argument(
        "[rlx attention] takes one query row [B, H, 1, D], keys and values [B, HK, LK, D] "
        "with HK dividing H, LK <= 8192, and a bias of B * H * LK elements");
  }
  const auto &qs = q.a.shape(), &ks = k.a.shape(), &vs = v.a.shape();
  int b = qs[0], h = qs[1], d = qs[3], hk = ks[1], lk = ks[2], dv = vs[3];
  int bits;
  std::memcpy(&bits, &scale, sizeof bits);
  auto m = mx::reshape(bias.a, {b, h, 1, lk}, target());
  const auto& f = kernel("rlx_attention_row", {"q", "k", "v", "bias"}, kAttention);
  return wrap(launch(f, {q.a, k.a, v.a, m}, {b, h, 1, dv}, q.a.dtype(), b * h * 128, 128,
                     {{"H", h},
                      {"HK", hk},
                      {"LK", lk},
                      {"D", d},
                      {"DV", dv},
                      {"SCALE_BITS", bits}}));
}

std::unique_ptr<Array> activation_rlx_cuda(const Array& x, int32_t kind) {
  need_float(x.a, "activation");
  if (kind < 0 || kind > 2) throw std::invalid_argument("[rlx activation] unknown kind");
  int total = checked_int(x.a.size(), "activation");
  if (total == 0) return wrap(x.a);
  const auto& f = kernel("rlx_activation", {"x"}, kActivation);
  return wrap(launch(f, {x.a}, x.a.shape(), x.a.dtype(), total, 256,
                     {{"TOTAL", total}, {"KIND", int(kind)}}));
}

}  // namespace rlx
