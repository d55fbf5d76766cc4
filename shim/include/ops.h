// mlx::core ops. Thin inline adapters: convert slices to MLX's vectors /
// shapes, run the op on the CPU device, wrap the result.
#pragma once

#include "rlx-mlx-shim/include/kernels.h"

#include <cmath>
#include <optional>

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

using ArrayPtr = std::unique_ptr<Array>;

inline ArrayPtr astype(const Array& a, DType dtype) {
  return wrap(mx::astype(a.a, to_mlx(dtype), target()));
}

inline ArrayPtr view(const Array& a, DType dtype) {
  return wrap(mx::view(a.a, to_mlx(dtype), target()));
}

inline ArrayPtr copy(const Array& a) {
  return wrap(mx::copy(a.a, target()));
}

inline ArrayPtr contiguous(const Array& a) {
  return wrap(mx::contiguous(a.a, false, target()));
}

// ---- unary ------------------------------------------------------------------
#define RLX_UNARY(name)                    \
  inline ArrayPtr name(const Array& a) {   \
    return wrap(mx::name(a.a, target()));     \
  }

RLX_UNARY(abs)
RLX_UNARY(negative)
RLX_UNARY(exp)
RLX_UNARY(expm1)
RLX_UNARY(log)
RLX_UNARY(log1p)
RLX_UNARY(log2)
RLX_UNARY(log10)
RLX_UNARY(sqrt)
RLX_UNARY(rsqrt)
RLX_UNARY(square)
RLX_UNARY(reciprocal)
RLX_UNARY(sin)
RLX_UNARY(cos)
RLX_UNARY(tan)
RLX_UNARY(arcsin)
RLX_UNARY(arccos)
RLX_UNARY(arctan)
RLX_UNARY(sinh)
RLX_UNARY(cosh)
RLX_UNARY(tanh)
RLX_UNARY(arcsinh)
RLX_UNARY(arccosh)
RLX_UNARY(arctanh)
RLX_UNARY(sigmoid)
RLX_UNARY(erf)
RLX_UNARY(erfinv)
RLX_UNARY(floor)
RLX_UNARY(ceil)
RLX_UNARY(trunc)
RLX_UNARY(sign)
RLX_UNARY(logical_not)
RLX_UNARY(stop_gradient)
RLX_UNARY(isnan)
RLX_UNARY(isinf)
RLX_UNARY(isfinite)
RLX_UNARY(bitwise_invert)
RLX_UNARY(real)
RLX_UNARY(imag)
RLX_UNARY(conjugate)
#undef RLX_UNARY

inline ArrayPtr round(const Array& a, int32_t decimals) {
  return wrap(mx::round(a.a, decimals, target()));
}

// ---- binary -----------------------------------------------------------------
#define RLX_BINARY(name)                                  \
  inline ArrayPtr name(const Array& a, const Array& b) {  \
    return wrap(mx::name(a.a, b.a, target()));               \
  }

RLX_BINARY(add)
RLX_BINARY(subtract)
RLX_BINARY(multiply)
RLX_BINARY(divide)
RLX_BINARY(maximum)
RLX_BINARY(minimum)
RLX_BINARY(power)
RLX_BINARY(remainder)
RLX_BINARY(floor_divide)
RLX_BINARY(arctan2)
RLX_BINARY(logaddexp)
RLX_BINARY(logical_and)
RLX_BINARY(logical_or)
RLX_BINARY(logical_xor)
RLX_BINARY(bitwise_and)
RLX_BINARY(bitwise_or)
RLX_BINARY(bitwise_xor)
RLX_BINARY(left_shift)
RLX_BINARY(right_shift)
RLX_BINARY(equal)
RLX_BINARY(not_equal)
RLX_BINARY(less)
RLX_BINARY(less_equal)
RLX_BINARY(greater)
RLX_BINARY(greater_equal)
RLX_BINARY(outer)
RLX_BINARY(inner)
RLX_BINARY(kron)
#undef RLX_BINARY

// A matrix product; a float32 one on the CPU with a 2-D right operand or
// the same batch dims on both sides runs
// the plugin's own kernel (src/gemm.cc), everything else MLX's.
inline ArrayPtr matmul(const Array& a, const Array& b) {
  if (thread_device().type == mx::Device::DeviceType::cpu && matmul_cpu_takes(a, b)) {
    return matmul_cpu(a, b);
  }
  return wrap(mx::matmul(a.a, b.a, target()));
}

inline ArrayPtr where_(const Array& cond, const Array& a, const Array& b) {
  return wrap(mx::where(cond.a, a.a, b.a, target()));
}

// NaN means "no bound" on that side.
inline ArrayPtr clip(const Array& a, double lo, double hi) {
  std::optional<mx::array> amin, amax;
  if (!std::isnan(lo)) {
    amin = mx::array(lo, a.a.dtype());
  }
  if (!std::isnan(hi)) {
    amax = mx::array(hi, a.a.dtype());
  }
  if (!amin && !amax) {
    return wrap(a.a);
  }
  return wrap(mx::clip(a.a, amin, amax, target()));
}

inline ArrayPtr addmm(
    const Array& c,
    const Array& a,
    const Array& b,
    float alpha,
    float beta) {
  return wrap(mx::addmm(c.a, a.a, b.a, alpha, beta, target()));
}

// ---- shape manipulation -----------------------------------------------------
inline ArrayPtr reshape(const Array& a, rust::Slice<const int32_t> shape) {
  return wrap(mx::reshape(a.a, to_shape_any(shape), target()));
}

inline ArrayPtr flatten(const Array& a, int32_t start_axis, int32_t end_axis) {
  return wrap(mx::flatten(a.a, start_axis, end_axis, target()));
}

// Empty `axes` reverses the axes (numpy's default).
inline ArrayPtr transpose(const Array& a, rust::Slice<const int32_t> axes) {
  if (axes.empty()) {
    return wrap(mx::transpose(a.a, target()));
  }
  return wrap(mx::transpose(a.a, to_ints(axes), target()));
}

inline ArrayPtr swapaxes(const Array& a, int32_t axis1, int32_t axis2) {
  return wrap(mx::swapaxes(a.a, axis1, axis2, target()));
}

inline ArrayPtr moveaxis(const Array& a, int32_t source, int32_t destination) {
  return wrap(mx::moveaxis(a.a, source, destination, target()));
}

inline ArrayPtr slice(
    const Array& a,
    rust::Slice<const int32_t> start,
    rust::Slice<const int32_t> stop,
    rust::Slice<const int32_t> strides) {
  return wrap(mx::slice(
      a.a, to_shape_any(start), to_shape_any(stop), to_shape_any(strides),
      target()));
}

inline ArrayPtr slice_update(
    const Array& src,
    const Array& update,
    rust::Slice<const int32_t> start,
    rust::Slice<const int32_t> stop,
    rust::Slice<const int32_t> strides) {
  return wrap(mx::slice_update(
      src.a, update.a, to_shape_any(start), to_shape_any(stop),
      to_shape_any(strides), target()));
}

// `update` written into `src` at the offsets in `start` (an integer array,
// one entry per axis in `axes`), read when the graph runs.
inline ArrayPtr slice_update_dynamic(
    const Array& src,
    const Array& update,
    const Array& start,
    rust::Slice<const int32_t> axes) {
  return wrap(mx::slice_update(
      src.a, update.a, start.a, std::vector<int>(axes.begin(), axes.end()),
      target()));
}

inline ArrayPtr concatenate(const ArrayList& arrays, int32_t axis) {
  return wrap(mx::concatenate(arrays.v, axis, target()));
}

inline ArrayPtr stack(const ArrayList& arrays, int32_t axis) {
  return wrap(mx::stack(arrays.v, axis, target()));
}

inline std::unique_ptr<ArrayList> split_sections(
    const Array& a,
    int32_t num_splits,
    int32_t axis) {
  return wrap_list(mx::split(a.a, num_splits, axis, target()));
}

inline std::unique_ptr<ArrayList> split_indices(
    const Array& a,
    rust::Slice<const int32_t> indices,
    int32_t axis) {
  return wrap_list(mx::split(a.a, to_shape_any(indices), axis, target()));
}

inline ArrayPtr broadcast_to(const Array& a, rust::Slice<const int32_t> shape) {
  return wrap(mx::broadcast_to(a.a, to_shape(shape), target()));
}

inline ArrayPtr expand_dims(const Array& a, rust::Slice<const int32_t> axes) {
  return wrap(mx::expand_dims(a.a, to_ints(axes), target()));
}

inline ArrayPtr squeeze(const Array& a, rust::Slice<const int32_t> axes) {
  return wrap(mx::squeeze(a.a, to_ints(axes), target()));
}

inline ArrayPtr squeeze_all(const Array& a) {
  return wrap(mx::squeeze(a.a, target()));
}

inline ArrayPtr flip(const Array& a, rust::Slice<const int32_t> axes) {
  return wrap(mx::flip(a.a, to_ints(axes), target()));
}

inline ArrayPtr roll(
    const Array& a,
    rust::Slice<const int32_t> shift,
    rust::Slice<const int32_t> axes) {
  return wrap(mx::roll(a.a, to_shape_any(shift), to_ints(axes), target()));
}

inline ArrayPtr repeat(const Array& a, int32_t repeats, int32_t axis) {
  return wrap(mx::repeat(a.a, repeats, axis, target()));
}

inline ArrayPtr tile(const Array& a, rust::Slice<const int32_t> reps) {
  return wrap(mx::tile(a.a, to_ints(reps), target()));
}

inline ArrayPtr pad(
    const Array& a,
    rust::Slice<const int32_t> axes,
    rust::Slice<const int32_t> low,
    rust::Slice<const int32_t> high,
    double value) {
  return wrap(mx::pad(
      a.a, to_ints(axes), to_shape(low), to_shape(high),
      mx::array(value, a.a.dtype()), "constant", target()));
}

// mode: "constant" (zero), "edge", "reflect" (as MLX supports them).
inline ArrayPtr pad_mode(
    const Array& a,
    rust::Slice<const int32_t> axes,
    rust::Slice<const int32_t> low,
    rust::Slice<const int32_t> high,
    double value,
    rust::Str mode) {
  return wrap(mx::pad(
      a.a, to_ints(axes), to_shape(low), to_shape(high),
      mx::array(value, a.a.dtype()), std::string(mode), target()));
}

inline ArrayPtr tril(const Array& a, int32_t k) {
  return wrap(mx::tril(a.a, k, target()));
}

inline ArrayPtr triu(const Array& a, int32_t k) {
  return wrap(mx::triu(a.a, k, target()));
}

inline ArrayPtr as_strided(
    const Array& a,
    rust::Slice<const int32_t> shape,
    rust::Slice<const int64_t> strides,
    std::size_t offset) {
  return wrap(mx::as_strided(
      a.a, to_shape(shape), mx::Strides(strides.begin(), strides.end()),
      offset, target()));
}

inline ArrayPtr diagonal(
    const Array& a,
    int32_t offset,
    int32_t axis1,
    int32_t axis2) {
  return wrap(mx::diagonal(a.a, offset, axis1, axis2, target()));
}

// ---- indexing ---------------------------------------------------------------
inline ArrayPtr take(const Array& a, const Array& indices, int32_t axis) {
  return wrap(mx::take(a.a, indices.a, axis, target()));
}

inline ArrayPtr take_flat(const Array& a, const Array& indices) {
  return wrap(mx::take(a.a, indices.a, target()));
}

inline ArrayPtr take_along_axis(
    const Array& a,
    const Array& indices,
    int32_t axis) {
  return wrap(mx::take_along_axis(a.a, indices.a, axis, target()));
}

inline ArrayPtr put_along_axis(
    const Array& a,
    const Array& indices,
    const Array& values,
    int32_t axis) {
  return wrap(mx::put_along_axis(a.a, indices.a, values.a, axis, target()));
}

inline ArrayPtr scatter_add_axis(
    const Array& a,
    const Array& indices,
    const Array& values,
    int32_t axis) {
  return wrap(mx::scatter_add_axis(a.a, indices.a, values.a, axis, target()));
}

#define RLX_SCATTER(name)                                                  \
  inline ArrayPtr name(                                                    \
      const Array& a, const Array& indices, const Array& updates,          \
      int32_t axis) {                                                      \
    return wrap(mx::name(a.a, indices.a, updates.a, axis, target()));        \
  }

RLX_SCATTER(scatter)
RLX_SCATTER(scatter_add)
RLX_SCATTER(scatter_prod)
RLX_SCATTER(scatter_max)
RLX_SCATTER(scatter_min)
#undef RLX_SCATTER

inline ArrayPtr gather(
    const Array& a,
    const Array& indices,
    int32_t axis,
    rust::Slice<const int32_t> slice_sizes) {
  return wrap(mx::gather(a.a, indices.a, axis, to_shape(slice_sizes), target()));
}

// ---- reductions -------------------------------------------------------------
// MLX semantics: `axes` lists the reduced axes; an empty list reduces nothing.
#define RLX_REDUCE(name)                                                     \
  inline ArrayPtr name(                                                      \
      const Array& a, rust::Slice<const int32_t> axes, bool keepdims) {      \
    return wrap(mx::name(a.a, to_ints(axes), keepdims, target()));             \
  }

RLX_REDUCE(sum)
RLX_REDUCE(mean)
RLX_REDUCE(max)
RLX_REDUCE(min)
RLX_REDUCE(prod)
RLX_REDUCE(logsumexp)
RLX_REDUCE(all)
RLX_REDUCE(any)
#undef RLX_REDUCE

inline ArrayPtr var(
    const Array& a,
    rust::Slice<const int32_t> axes,
    bool keepdims,
    int32_t ddof) {
  return wrap(mx::var(a.a, to_ints(axes), keepdims, ddof, target()));
}

inline ArrayPtr std_(
    const Array& a,
    rust::Slice<const int32_t> axes,
    bool keepdims,
    int32_t ddof) {
  return wrap(mx::std(a.a, to_ints(axes), keepdims, ddof, target()));
}

inline ArrayPtr argmax(const Array& a, int32_t axis, bool keepdims) {
  return wrap(mx::argmax(a.a, axis, keepdims, target()));
}

inline ArrayPtr argmin(const Array& a, int32_t axis, bool keepdims) {
  return wrap(mx::argmin(a.a, axis, keepdims, target()));
}

inline ArrayPtr softmax(
    const Array& a,
    rust::Slice<const int32_t> axes,
    bool precise) {
  return wrap(mx::softmax(a.a, to_ints(axes), precise, target()));
}

#define RLX_SCAN(name)                                                     \
  inline ArrayPtr name(                                                    \
      const Array& a, int32_t axis, bool reverse, bool inclusive) {        \
    return wrap(mx::name(a.a, axis, reverse, inclusive, target()));          \
  }

RLX_SCAN(cumsum)
RLX_SCAN(cumprod)
RLX_SCAN(cummax)
RLX_SCAN(cummin)
RLX_SCAN(logcumsumexp)
#undef RLX_SCAN

inline ArrayPtr sort(const Array& a, int32_t axis) {
  return wrap(mx::sort(a.a, axis, target()));
}

inline ArrayPtr argsort(const Array& a, int32_t axis) {
  return wrap(mx::argsort(a.a, axis, target()));
}

inline ArrayPtr partition(const Array& a, int32_t kth, int32_t axis) {
  return wrap(mx::partition(a.a, kth, axis, target()));
}

inline ArrayPtr argpartition(const Array& a, int32_t kth, int32_t axis) {
  return wrap(mx::argpartition(a.a, kth, axis, target()));
}

inline ArrayPtr topk(const Array& a, int32_t k, int32_t axis) {
  return wrap(mx::topk(a.a, k, axis, target()));
}

// ---- linear algebra-ish ops -------------------------------------------------
inline ArrayPtr conv_general(
    const Array& input,
    const Array& weight,
    rust::Slice<const int32_t> stride,
    rust::Slice<const int32_t> padding_lo,
    rust::Slice<const int32_t> padding_hi,
    rust::Slice<const int32_t> kernel_dilation,
    rust::Slice<const int32_t> input_dilation,
    int32_t groups,
    bool flip) {
  return wrap(mx::conv_general(
      input.a, weight.a, to_ints(stride), to_ints(padding_lo),
      to_ints(padding_hi), to_ints(kernel_dilation), to_ints(input_dilation),
      groups, flip, target()));
}

inline ArrayPtr conv_transpose1d(
    const Array& input,
    const Array& weight,
    int32_t stride,
    int32_t padding,
    int32_t dilation,
    int32_t output_padding,
    int32_t groups) {
  return wrap(mx::conv_transpose1d(
      input.a, weight.a, stride, padding, dilation, output_padding, groups,
      target()));
}

inline std::pair<int, int> pair2(rust::Slice<const int32_t> s, const char* what) {
  if (s.size() != 2) {
    throw std::invalid_argument(
        std::string("[rlx shim] conv_transpose2d: ") + what +
        " must have 2 entries, got " + std::to_string(s.size()));
  }
  return {s[0], s[1]};
}

inline ArrayPtr conv_transpose2d(
    const Array& input,
    const Array& weight,
    rust::Slice<const int32_t> stride,
    rust::Slice<const int32_t> padding,
    rust::Slice<const int32_t> dilation,
    rust::Slice<const int32_t> output_padding,
    int32_t groups) {
  return wrap(mx::conv_transpose2d(
      input.a, weight.a, pair2(stride, "stride"), pair2(padding, "padding"),
      pair2(dilation, "dilation"), pair2(output_padding, "output_padding"),
      groups, target()));
}

inline ArrayPtr tensordot(
    const Array& a,
    const Array& b,
    rust::Slice<const int32_t> axes_a,
    rust::Slice<const int32_t> axes_b) {
  return wrap(mx::tensordot(a.a, b.a, to_ints(axes_a), to_ints(axes_b), target()));
}

inline ArrayPtr einsum(rust::Str subscripts, const ArrayList& operands) {
  return wrap(mx::einsum(std::string(subscripts), operands.v, target()));
}

// biases may be null (mxfp modes take none). mode: "affine", "mxfp4",
// "mxfp8", "nvfp4".
inline ArrayPtr quantized_matmul(
    const Array& x,
    const Array& w,
    const Array& scales,
    const Array* biases,
    bool transpose,
    int32_t group_size,
    int32_t bits,
    rust::Str mode) {
  std::optional<mx::array> b = std::nullopt;
  if (biases != nullptr) {
    b = biases->a;
  }
  return wrap(mx::quantized_matmul(
      x.a, w.a, scales.a, b, transpose, group_size, bits, std::string(mode),
      target()));
}

}  // namespace rlx
