// mlx::core::fft (backward normalisation, MLX's default).
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// 1-D transforms: n < 1 means "MLX's default length" (the input's size
// along `axis`; for irfft 2 * (size - 1)).
#define RLX_FFT1(name)                                                   \
  inline std::unique_ptr<Array> fft_##name(                              \
      const Array& a, int32_t n, int32_t axis) {                         \
    if (n < 1) {                                                         \
      return wrap(mx::fft::name(a.a, axis, mx::fft::FFTNorm::Backward,   \
                                target()));                                 \
    }                                                                    \
    return wrap(mx::fft::name(a.a, n, axis, mx::fft::FFTNorm::Backward,  \
                              target()));                                   \
  }

RLX_FFT1(fft)
RLX_FFT1(ifft)
RLX_FFT1(rfft)
RLX_FFT1(irfft)
#undef RLX_FFT1

// n-D transforms over `axes`; an empty `n` means the default sizes.
#define RLX_FFTN(name)                                                     \
  inline std::unique_ptr<Array> fft_##name(                                \
      const Array& a, rust::Slice<const int32_t> n,                        \
      rust::Slice<const int32_t> axes) {                                   \
    if (n.empty()) {                                                       \
      return wrap(mx::fft::name(a.a, to_ints(axes),                        \
                                mx::fft::FFTNorm::Backward, target()));       \
    }                                                                      \
    return wrap(mx::fft::name(a.a, to_shape(n), to_ints(axes),             \
                              mx::fft::FFTNorm::Backward, target()));         \
  }

RLX_FFTN(fftn)
RLX_FFTN(ifftn)
RLX_FFTN(rfftn)
RLX_FFTN(irfftn)
#undef RLX_FFTN

}  // namespace rlx
