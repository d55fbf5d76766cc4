// rlx's Fma node: a * b + c with ONE rounding, elementwise over operands
// of one shape, float32 and float64.
//
// Why a kernel of the shim's: MLX has no fused multiply-add op, and its
// multiply then add rounds twice. The single rounding is what an Fma node
// is for (error-free products, compensated and double-word arithmetic,
// pocketfft reproduced as a contracting compiler builds it), and rlx-cpu's
// Fma rounds once (`f32::mul_add`). `std::fma` is the C library's
// correctly rounded fused multiply-add (the FMA instruction where the CPU
// has one; eight at a time with AVX2 and FMA). Operands are read through
// their strides (a broadcast scalar is a stride of 0), never copied. A GPU
// graph runs it on the CPU stream, as its float64 steps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/include/kernels.h"
#include "rlx-mlx-shim/src/pool.h"
#include "rlx-mlx-shim/src/simd.h"

namespace rlx {
namespace {

#if RLX_X86
// y[j] = a[j * sa] * b[j * sb] + c[j * sc] with unit or zero strides,
// eight at a time; the tail with the scalar instruction.
__attribute__((target("avx2,fma"))) void fma_row_avx2(const float* a, int64_t sa, const float* b,
                                                      int64_t sb, const float* c, int64_t sc,
                                                      float* y, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = sa == 0 ? _mm256_set1_ps(*a) : _mm256_loadu_ps(a + j);
    __m256 z = sb == 0 ? _mm256_set1_ps(*b) : _mm256_loadu_ps(b + j);
    __m256 w = sc == 0 ? _mm256_set1_ps(*c) : _mm256_loadu_ps(c + j);
    _mm256_storeu_ps(y + j, _mm256_fmadd_ps(x, z, w));
  }
  for (; j < n; ++j) y[j] = __builtin_fmaf(a[j * sa], b[j * sb], c[j * sc]);
}
#endif

// One row of `n` outputs from operands read with strides `sa`, `sb`, `sc`.
template <class T>
void fma_row(const T* a, int64_t sa, const T* b, int64_t sb, const T* c, int64_t sc, T* y,
             int64_t n) {
#if RLX_X86
  if constexpr (std::is_same_v<T, float>) {
    auto unit = [](int64_t s) { return s == 0 || s == 1; };
    if (unit(sa) && unit(sb) && unit(sc) && has_avx2_fma()) {
      return fma_row_avx2(a, sa, b, sb, c, sc, y, n);
    }
  }
#endif
  for (int64_t j = 0; j < n; ++j) y[j] = std::fma(a[j * sa], b[j * sb], c[j * sc]);
}

// Rows r0..r1 of `ax` (the three operands and the output over their
// collapsed axes).
template <class T>
void fma_rows(const Axes& ax, const T* const* p, T* y, size_t r0, size_t r1) {
  const int64_t inner = ax.shape.back();
  const int64_t s0 = ax.strides[0].back(), s1 = ax.strides[1].back(), s2 = ax.strides[2].back();
  for_rows(ax, r0, r1, [&](const int64_t* off, size_t first) {
    fma_row<T>(p[0] + off[0], s0, p[1] + off[1], s1, p[2] + off[2], s2, y + first, inner);
  });
}

// Large tensors split by rows over the plugin's threads.
template <class T>
void fma_task(const std::vector<mx::array>& in, T* y, size_t n) {
  if (n == 0) return;
  // Each operand whole and in order, or one value broadcast: one flat
  // row (a row per element of a [n, 1] view cost more than the FMAs).
  constexpr size_t kMinPerThread = 1 << 16;
  int64_t flat[3];
  if (flat_stride(in[0], n, flat[0]) && flat_stride(in[1], n, flat[1]) &&
      flat_stride(in[2], n, flat[2])) {
    const T* p[3] = {in[0].data<T>(), in[1].data<T>(), in[2].data<T>()};
    const size_t parts = std::min(Pool::get().size(), std::max<size_t>(1, n / kMinPerThread));
    const size_t per = (n + parts - 1) / parts;
    auto part = [&](size_t t) {
      const size_t lo = t * per;
      if (lo < n) {
        fma_row<T>(p[0] + lo * flat[0], flat[0], p[1] + lo * flat[1], flat[1], p[2] + lo * flat[2],
                   flat[2], y + lo, static_cast<int64_t>(std::min(per, n - lo)));
      }
    };
    if (parts <= 1) {
      part(0);
    } else {
      Pool::get().run(parts, part);
    }
    return;
  }
  const Axes ax = collapse_axes(in[0].shape(), {&in[0].strides(), &in[1].strides(), &in[2].strides()});
  const T* p[3] = {in[0].data<T>(), in[1].data<T>(), in[2].data<T>()};
  const size_t inner = static_cast<size_t>(ax.shape.back());
  const size_t rows = n / inner;
  const size_t parts = std::min({Pool::get().size(), std::max<size_t>(1, n / kMinPerThread), rows});
  if (parts <= 1) {
    fma_rows<T>(ax, p, y, 0, rows);
    return;
  }
  const size_t per = (rows + parts - 1) / parts;
  Pool::get().run(parts, [&](size_t t) {
    const size_t r0 = t * per, r1 = std::min(rows, r0 + per);
    if (r0 < r1) fma_rows<T>(ax, p, y, r0, r1);
  });
}

class RlxFma : public mx::UnaryPrimitive, public RunsInline {
 public:
  explicit RlxFma(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    // A fresh buffer: the operands are read while it is written.
    out.set_data(mx::allocator::malloc(out.nbytes()));
    if (out.dtype() == mx::float64) {
      run_task(stream(), in, out, [y = out.data<double>(), n = out.size()](const std::vector<mx::array>& in) {
        fma_task(in, y, n);
      });
    } else {
      run_task(stream(), in, out, [y = out.data<float>(), n = out.size()](const std::vector<mx::array>& in) {
        fma_task(in, y, n);
      });
    }
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("[RlxFma] is a CPU kernel: a GPU graph runs it on the CPU stream");
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& in) override {
    return {in[0].shape()};
  }
  const char* name() const override { return "RlxFma"; }
  bool is_equivalent(const mx::Primitive&) const override { return true; }
};

}  // namespace

std::unique_ptr<Array> fma_cpu(const Array& a, const Array& b, const Array& c) {
  const mx::Dtype dt = a.a.dtype();
  if ((dt != mx::float32 && dt != mx::float64) || b.a.dtype() != dt || c.a.dtype() != dt) {
    throw std::invalid_argument("[rlx fma] needs three float32 or three float64 operands");
  }
  if (a.a.shape() != b.a.shape() || a.a.shape() != c.a.shape()) {
    throw std::invalid_argument("[rlx fma] needs operands of one shape (broadcast them first)");
  }
  auto s = mx::default_stream(mx::Device(mx::Device::DeviceType::cpu));
  return wrap(mx::array(a.a.shape(), dt, std::make_shared<RlxFma>(s), {a.a, b.a, c.a}));
}

}  // namespace rlx
