// rlx's Fma node: a * b + c with ONE rounding, elementwise over operands
// of one shape, float32 and float64.
//
// Why a kernel of the shim's: MLX has no fused multiply-add op, and its
// multiply then add rounds twice. The single rounding is what an Fma node
// is for (error-free products, compensated and double-word arithmetic,
// pocketfft reproduced as a contracting compiler builds it), and rlx-cpu's
// Fma rounds once (`f32::mul_add`). `std::fma` is the C library's
// correctly rounded fused multiply-add (the FMA instruction where the CPU
// has one). A GPU graph runs it on the CPU stream, as its float64 steps.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "rlx-mlx-shim/src/cpu_kernel.h"
#include "rlx-mlx-shim/include/kernels.h"
#include "rlx-mlx-shim/src/pool.h"

namespace rlx {
namespace {

template <class T>
void fma_range(const T* a, const T* b, const T* c, T* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = std::fma(a[i], b[i], c[i]);
}

// Large tensors split over the plugin's threads, as its unary kernels.
template <class T>
void fma_parallel(const T* a, const T* b, const T* c, T* y, size_t n) {
  constexpr size_t kMinPerThread = 1 << 16;
  auto& pool = Pool::get();
  const size_t parts = std::min(pool.size(), std::max<size_t>(1, n / kMinPerThread));
  if (parts <= 1) {
    fma_range(a, b, c, y, n);
    return;
  }
  const size_t chunk = (n + parts - 1) / parts;
  pool.run(parts, [&](size_t t) {
    const size_t lo = t * chunk;
    if (lo < n) fma_range(a + lo, b + lo, c + lo, y + lo, std::min(chunk, n - lo));
  });
}

template <class T>
void fma_task(const std::vector<mx::array>& in, T* y, size_t n) {
  std::vector<T> tmp[3];
  const T* src[3];
  for (int i = 0; i < 3; ++i) src[i] = row_major(in[i], tmp[i]);
  fma_parallel(src[0], src[1], src[2], y, n);
}

class RlxFma : public mx::UnaryPrimitive, public RunsInline {
 public:
  explicit RlxFma(mx::Stream s) : mx::UnaryPrimitive(s) {}

  void eval_cpu(const std::vector<mx::array>& in, mx::array& out) override {
    // A fresh buffer: a view input may share an input's.
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
