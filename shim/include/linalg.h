// mlx::core::linalg. MLX implements these only on the CPU stream (LAPACK),
// which is what cpu() names.
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

inline std::unique_ptr<Array> linalg_solve(const Array& a, const Array& b) {
  return wrap(mx::linalg::solve(a.a, b.a, cpu()));
}

inline std::unique_ptr<Array> linalg_solve_triangular(
    const Array& a,
    const Array& b,
    bool upper) {
  return wrap(mx::linalg::solve_triangular(a.a, b.a, upper, cpu()));
}

inline std::unique_ptr<Array> linalg_inv(const Array& a) {
  return wrap(mx::linalg::inv(a.a, cpu()));
}

inline std::unique_ptr<Array> linalg_tri_inv(const Array& a, bool upper) {
  return wrap(mx::linalg::tri_inv(a.a, upper, cpu()));
}

inline std::unique_ptr<Array> linalg_pinv(const Array& a) {
  return wrap(mx::linalg::pinv(a.a, cpu()));
}

inline std::unique_ptr<Array> linalg_cholesky(const Array& a, bool upper) {
  return wrap(mx::linalg::cholesky(a.a, upper, cpu()));
}

inline std::unique_ptr<Array> linalg_cholesky_inv(const Array& a, bool upper) {
  return wrap(mx::linalg::cholesky_inv(a.a, upper, cpu()));
}

// [Q, R]
inline std::unique_ptr<ArrayList> linalg_qr(const Array& a) {
  auto [q, r] = mx::linalg::qr(a.a, cpu());
  return wrap_list({q, r});
}

// [U, S, Vt] (compute_uv) or [S].
inline std::unique_ptr<ArrayList> linalg_svd(const Array& a, bool compute_uv) {
  return wrap_list(mx::linalg::svd(a.a, compute_uv, cpu()));
}

// [eigenvalues, eigenvectors] of a symmetric/hermitian matrix.
inline std::unique_ptr<ArrayList> linalg_eigh(const Array& a, rust::Str uplo) {
  auto [w, v] = mx::linalg::eigh(a.a, std::string(uplo), cpu());
  return wrap_list({w, v});
}

inline std::unique_ptr<Array> linalg_eigvalsh(const Array& a, rust::Str uplo) {
  return wrap(mx::linalg::eigvalsh(a.a, std::string(uplo), cpu()));
}

// [P, L, U]
inline std::unique_ptr<ArrayList> linalg_lu(const Array& a) {
  return wrap_list(mx::linalg::lu(a.a, cpu()));
}

inline std::unique_ptr<Array> linalg_det(const Array& a) {
  return wrap(mx::linalg::det(a.a, cpu()));
}

// [sign, logabsdet]
inline std::unique_ptr<ArrayList> linalg_slogdet(const Array& a) {
  auto [s, l] = mx::linalg::slogdet(a.a, cpu());
  return wrap_list({s, l});
}

// 2-norm of the flattened array (empty axes) or vector/Frobenius norm over
// the given (at most 2) axes.
inline std::unique_ptr<Array> linalg_norm(
    const Array& a,
    rust::Slice<const int32_t> axes,
    bool keepdims) {
  std::optional<std::vector<int>> ax;
  if (!axes.empty()) {
    ax = to_ints(axes);
  }
  return wrap(mx::linalg::norm(a.a, ax, keepdims, cpu()));
}

inline std::unique_ptr<Array> linalg_norm_ord(
    const Array& a,
    double ord,
    rust::Slice<const int32_t> axes,
    bool keepdims) {
  std::optional<std::vector<int>> ax;
  if (!axes.empty()) {
    ax = to_ints(axes);
  }
  return wrap(mx::linalg::norm(a.a, ord, ax, keepdims, cpu()));
}

inline std::unique_ptr<Array> linalg_cross(
    const Array& a,
    const Array& b,
    int32_t axis) {
  return wrap(mx::linalg::cross(a.a, b.a, axis, cpu()));
}

}  // namespace rlx
