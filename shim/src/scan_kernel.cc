// A whole Scan whose body is elementwise float32 arithmetic, as one CPU
// primitive.
//
// Why: the plugin lowers a Scan by building its body once per step, so a
// 1,000-step scan of three ops on 64 floats is 3,000+ MLX ops, each a task
// on MLX's stream thread (and under mx::compile a trace of all of them):
// milliseconds where the arithmetic is microseconds. A body of a few
// elementwise ops over the carry's shape is common (RNN cells, EMA, simple
// recurrences); the lowering hands such a body here as a small program
// (scan_program in plugin-mlx's lower/scan_fused.rs), and the steps run in
// one task.
//
// The program: registers of `n` floats each. Register 0 is the carry,
// 1..n_bcast the broadcast operands, then one per xs (that step's row),
// then one per body node. Each instruction is four ints: opcode, the
// destination register, and one or two source registers. The carry after a
// step is register `result`.

#include <cmath>
#include <cstring>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"
#include "rlx-mlx-shim/include/kernels.h"
#include "rlx-mlx-shim/src/kernels.rs.h"
#include "rlx-mlx-shim/src/rlx_math.h"
#include "rlx-mlx-shim/src/cpu_kernel.h"

namespace rlx {

namespace {

// The opcodes; plugin-mlx's lower/scan_fused.rs writes the same numbers.
enum Opcode : int32_t {
  kAdd = 0,
  kSub = 1,
  kMul = 2,
  kDiv = 3,
  kTanh = 10,
  kSigmoid = 11,
  kSilu = 12,
  kExp = 13,
  kRelu = 14,
  kNeg = 15,
};

struct ScanProgram {
  std::vector<int32_t> code;  // groups of four: op, dst, a, b
  size_t n_regs, n_bcast, n_xs, result, len, n;
  std::vector<int64_t> rows;  // the step whose carry each output row holds

  bool operator==(const ScanProgram& o) const {
    return code == o.code && n_regs == o.n_regs && n_bcast == o.n_bcast && n_xs == o.n_xs &&
           result == o.result && len == o.len && n == o.n && rows == o.rows;
  }
};

// tanh to within a few ulp of libm's, at a fraction of its cost (libm's
// tanhf was most of a 1,000-step scan): the odd Taylor series near 0, else
// sign(x) (1 - e^-2|x|) / (1 + e^-2|x|) over rlx's exp polynomial.
inline float tanh_fast(float x) {
  // Branch-free, so the step loops vectorise.
  float ax = std::fabs(x), x2 = x * x;
  float near0 = x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
  float t = exp_poly(-2.0f * ax);
  float far = std::copysign((1.0f - t) / (1.0f + t), x);
  return ax < 0.0625f ? near0 : far;
}

#if RLX_X86
// tanh_fast on eight lanes.
__attribute__((target("avx2,fma"))) void tanh_avx2(float* d, const float* a, size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  const __m256 c3 = _mm256_set1_ps(-1.0f / 3), c5 = _mm256_set1_ps(2.0f / 15),
               c7 = _mm256_set1_ps(-17.0f / 315), edge = _mm256_set1_ps(0.0625f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(a + i);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(c7, x2, c5), x2, c3), x2, one);
    __m256 near0 = _mm256_mul_ps(x, p);
    __m256 t = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), ax));
    __m256 far = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
    far = _mm256_or_ps(far, _mm256_and_ps(sign, x));
    _mm256_storeu_ps(d + i, _mm256_blendv_ps(far, near0, _mm256_cmp_ps(ax, edge, _CMP_LT_OQ)));
  }
  for (; i < n; ++i) d[i] = tanh_fast(a[i]);
}
#endif  // RLX_X86

#if RLX_NEON
// tanh_fast on four lanes, statement for statement: the same bits (GCC 12
// does not vectorise tanh_fast's loop for aarch64, even at -O3).
void tanh_neon(float* d, const float* a, size_t n) {
  using namespace neon;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    F4 x = F4::load(a + i);
    F4 ax = abs(x), x2 = x * x;
    F4 near0 = x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
    F4 t = exp4(-2.0f * ax);
    F4 far = copysign((1.0f - t) / (1.0f + t), x);
    select(ax < 0.0625f, near0, far).store(d + i);
  }
  for (; i < n; ++i) d[i] = tanh_fast(a[i]);
}
#endif  // RLX_NEON

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
void step_op(int32_t op, float* __restrict d, const float* __restrict a,
             const float* __restrict b, size_t n) {
  switch (op) {
    case kAdd: for (size_t i = 0; i < n; ++i) d[i] = a[i] + b[i]; return;
    case kSub: for (size_t i = 0; i < n; ++i) d[i] = a[i] - b[i]; return;
    case kMul: for (size_t i = 0; i < n; ++i) d[i] = a[i] * b[i]; return;
    case kDiv: for (size_t i = 0; i < n; ++i) d[i] = a[i] / b[i]; return;
    case kTanh:
#if RLX_X86
      if (has_avx2_fma()) return tanh_avx2(d, a, n);
#elif RLX_NEON
      if (has_neon()) return tanh_neon(d, a, n);
#endif
      for (size_t i = 0; i < n; ++i) d[i] = tanh_fast(a[i]);
      return;
    case kSigmoid: for (size_t i = 0; i < n; ++i) d[i] = 1.0f / (1.0f + exp_poly(-a[i])); return;
    case kSilu: for (size_t i = 0; i < n; ++i) d[i] = a[i] / (1.0f + exp_poly(-a[i])); return;
    case kExp: for (size_t i = 0; i < n; ++i) d[i] = exp_poly(a[i]); return;
    // f32::max(x, 0): NaN -> 0, as rlx-cpu.
    case kRelu: for (size_t i = 0; i < n; ++i) d[i] = a[i] > 0.0f ? a[i] : 0.0f; return;
    case kNeg: for (size_t i = 0; i < n; ++i) d[i] = -a[i]; return;
  }
}

// src: [init, bcast..., xs...], row-major; out: the kept rows, or
// the final carry.
void run_scan(const float* const* src, float* out, size_t, const ScanProgram& p) {
  const size_t n = p.n;
  std::vector<float> regs(p.n_regs * n);
  std::vector<const float*> reg(p.n_regs);
  std::memcpy(regs.data(), src[0], n * sizeof(float));
  for (size_t r = 0; r < p.n_regs; ++r) reg[r] = regs.data() + r * n;
  for (size_t b = 0; b < p.n_bcast; ++b) reg[1 + b] = src[1 + b];
  size_t next_row = 0;
  for (size_t t = 0; t < p.len; ++t) {
    for (size_t x = 0; x < p.n_xs; ++x) reg[1 + p.n_bcast + x] = src[1 + p.n_bcast + x] + t * n;
    for (size_t k = 0; k + 3 < p.code.size(); k += 4) {
      int32_t op = p.code[k], dst = p.code[k + 1], a = p.code[k + 2], b = p.code[k + 3];
      step_op(op, regs.data() + size_t(dst) * n, reg[a], b >= 0 ? reg[b] : nullptr, n);
    }
    // The new carry (the result register may alias the carry's inputs, so
    // copy only after the whole step).
    std::memcpy(regs.data(), reg[p.result], n * sizeof(float));
    while (next_row < p.rows.size() && size_t(p.rows[next_row]) == t) {
      std::memcpy(out + next_row * n, regs.data(), n * sizeof(float));
      ++next_row;
    }
  }
  if (p.rows.empty()) std::memcpy(out, regs.data(), n * sizeof(float));
}

}  // namespace

std::unique_ptr<Array> scan_elementwise_cpu(const ArrayList& operands, size_t n_bcast,
                                            rust::Slice<const int32_t> code, size_t n_regs,
                                            size_t result, size_t len,
                                            rust::Slice<const int64_t> rows) {
  const auto& in = operands.v;
  if (in.empty() || in.size() < 1 + n_bcast) {
    throw std::invalid_argument("[rlx scan] needs the carry and every operand");
  }
  for (const auto& a : in) {
    if (a.dtype() != mx::float32) throw std::invalid_argument("[rlx scan] float32 only");
  }
  ScanProgram p;
  p.code.assign(code.begin(), code.end());
  p.n_regs = n_regs;
  p.n_bcast = n_bcast;
  p.n_xs = in.size() - 1 - n_bcast;
  p.result = result;
  p.len = len;
  p.n = in[0].size();
  p.rows.assign(rows.begin(), rows.end());
  // Everything the task will index is checked here, once.
  for (size_t b = 0; b < n_bcast; ++b) {
    if (in[1 + b].size() != p.n) throw std::invalid_argument("[rlx scan] operand size");
  }
  for (size_t x = 0; x < p.n_xs; ++x) {
    if (in[1 + n_bcast + x].size() != len * p.n) throw std::invalid_argument("[rlx scan] xs size");
  }
  size_t fixed = 1 + n_bcast + p.n_xs;
  if (p.code.size() % 4 != 0 || result >= n_regs || fixed > n_regs) {
    throw std::invalid_argument("[rlx scan] malformed program");
  }
  for (size_t k = 0; k < p.code.size(); k += 4) {
    int32_t dst = p.code[k + 1], a = p.code[k + 2], b = p.code[k + 3];
    bool binary = p.code[k] <= kDiv;
    if (dst < int32_t(fixed) || size_t(dst) >= n_regs || a < 0 || size_t(a) >= n_regs ||
        (binary && (b < 0 || size_t(b) >= n_regs))) {
      throw std::invalid_argument("[rlx scan] register out of range");
    }
  }
  for (size_t k = 0; k < p.rows.size(); ++k) {
    if (p.rows[k] < 0 || size_t(p.rows[k]) >= len || (k > 0 && p.rows[k] < p.rows[k - 1])) {
      throw std::invalid_argument("[rlx scan] kept rows out of order or range");
    }
  }
  mx::Shape shape = in[0].shape();
  if (!p.rows.empty()) shape.insert(shape.begin(), int(p.rows.size()));
  return wrap(cpu_kernel("RlxElementwiseScan", run_scan, std::move(p), shape, in, false));
}

}  // namespace rlx
