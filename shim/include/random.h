// mlx::core::random: explicit-key PRNG.
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

inline std::unique_ptr<Array> random_key(uint64_t seed) {
  return wrap(mx::random::key(seed));
}

inline void random_seed(uint64_t seed) {
  mx::random::seed(seed);
}

inline std::unique_ptr<ArrayList> random_split(const Array& key) {
  auto [a, b] = mx::random::split(key.a, target());
  std::vector<mx::array> v;
  v.push_back(std::move(a));
  v.push_back(std::move(b));
  return wrap_list(std::move(v));
}

inline std::unique_ptr<Array> random_split_n(const Array& key, int32_t num) {
  return wrap(mx::random::split(key.a, num, target()));
}

inline std::unique_ptr<Array> random_bits(
    rust::Slice<const int32_t> shape,
    int32_t width,
    const Array& key) {
  return wrap(mx::random::bits(to_shape(shape), width, key.a, target()));
}

inline std::unique_ptr<Array> random_uniform(
    double low,
    double high,
    rust::Slice<const int32_t> shape,
    DType dtype,
    const Array& key) {
  auto dt = to_mlx(dtype);
  return wrap(mx::random::uniform(
      mx::array(low, dt), mx::array(high, dt), to_shape(shape), dt, key.a,
      target()));
}

inline std::unique_ptr<Array> random_normal(
    rust::Slice<const int32_t> shape,
    DType dtype,
    float loc,
    float scale,
    const Array& key) {
  return wrap(mx::random::normal(
      to_shape(shape), to_mlx(dtype), loc, scale, key.a, target()));
}

inline std::unique_ptr<Array> random_randint(
    int64_t low,
    int64_t high,
    rust::Slice<const int32_t> shape,
    DType dtype,
    const Array& key) {
  return wrap(mx::random::randint(
      mx::array(low, mx::int64), mx::array(high, mx::int64), to_shape(shape),
      to_mlx(dtype), key.a, target()));
}

inline std::unique_ptr<Array> random_bernoulli(
    double p,
    rust::Slice<const int32_t> shape,
    const Array& key) {
  return wrap(mx::random::bernoulli(
      mx::array(p, mx::float32), to_shape(shape), key.a, target()));
}

inline std::unique_ptr<Array> random_truncated_normal(
    double lower,
    double upper,
    rust::Slice<const int32_t> shape,
    DType dtype,
    const Array& key) {
  auto dt = to_mlx(dtype);
  return wrap(mx::random::truncated_normal(
      mx::array(lower, dt), mx::array(upper, dt), to_shape(shape), dt, key.a,
      target()));
}

inline std::unique_ptr<Array> random_gumbel(
    rust::Slice<const int32_t> shape,
    DType dtype,
    const Array& key) {
  return wrap(mx::random::gumbel(to_shape(shape), to_mlx(dtype), key.a, target()));
}

inline std::unique_ptr<Array> random_categorical(
    const Array& logits,
    int32_t axis,
    int32_t num_samples,
    const Array& key) {
  return wrap(
      mx::random::categorical(logits.a, axis, num_samples, key.a, target()));
}

inline std::unique_ptr<Array> random_permutation(
    const Array& x,
    int32_t axis,
    const Array& key) {
  return wrap(mx::random::permutation(x.a, axis, key.a, target()));
}

}  // namespace rlx
