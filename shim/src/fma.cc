// rlx's Fma node: a * b + c with ONE rounding, elementwise over operands
// of one shape, float32 and float64.
//
// Why a kernel of the shim's: MLX has no fused multiply-add op, and its
// multiply then add rounds twice. The single rounding is what an Fma node
// is for (error-free products, compensated and double-word arithmetic,
// pocketfft reproduced as a contracting compiler builds it), and rlx-cpu's
// Fma rounds once (`f32::mul_add`). `std::fma` is the C library's
// correctly rounded fused multiply-add (the FMA instruction where the CPU
// has one; eight at a time with AVX2 and FMA, four with NEON). Operands
// are read through their strides (a broadcast scalar is a stride of 0),
// never copied. A GPU graph runs it on the CPU stream, as its float64
// steps.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/src/elementwise.h"
#include "rlx-mlx-shim/include/kernels.h"
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

#if RLX_NEON
// The same four at a time (vfmaq_f32 rounds once, as std::fma).
void fma_row_neon(const float* a, int64_t sa, const float* b, int64_t sb, const float* c,
                  int64_t sc, float* y, int64_t n) {
  using namespace neon;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    F4 x = sa == 0 ? F4(*a) : F4::load(a + j);
    F4 z = sb == 0 ? F4(*b) : F4::load(b + j);
    F4 w = sc == 0 ? F4(*c) : F4::load(c + j);
    fma(x, z, w).store(y + j);
  }
  for (; j < n; ++j) y[j] = std::fma(a[j * sa], b[j * sb], c[j * sc]);
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
#elif RLX_NEON
  if constexpr (std::is_same_v<T, float>) {
    auto unit = [](int64_t s) { return s == 0 || s == 1; };
    if (unit(sa) && unit(sb) && unit(sc) && has_neon()) {
      return fma_row_neon(a, sa, b, sb, c, sc, y, n);
    }
  }
#endif
  for (int64_t j = 0; j < n; ++j) y[j] = std::fma(a[j * sa], b[j * sb], c[j * sc]);
}

// From how many elements Fma is split over the plugin's threads.
constexpr size_t kFmaPerPart = size_t(1) << 16;

template <class T>
void fma_task(const std::vector<mx::array>& in, T* y, size_t n) {
  const T* p[3] = {in[0].data<T>(), in[1].data<T>(), in[2].data<T>()};
  for_elementwise(in[0].shape(), n, {&in[0], &in[1], &in[2]}, kFmaPerPart,
                  [&](const int64_t* off, const int64_t* st, size_t first, int64_t len) {
                    fma_row<T>(p[0] + off[0], st[0], p[1] + off[1], st[1], p[2] + off[2], st[2],
                               y + first, len);
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
