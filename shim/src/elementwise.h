// Walking the elements of an elementwise op whose operands are views of
// its output's shape (broadcast, transposed, sliced), for the plugin's own
// loops (the inline evaluator's arithmetic, Fma): as few and as long rows
// as the operands' strides allow, split over the plugin's threads when
// large.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mlx/array.h"
#include "rlx-mlx-shim/src/pool.h"

namespace rlx {

namespace mx = mlx::core;

// Whether the `n` elements of `a` can be read as one flat row, and its
// stride there: 1 when they lie whole and in order, 0 when one value is
// broadcast to all of them.
inline bool flat_stride(const mx::array& a, size_t n, int64_t& stride) {
  if (a.flags().row_contiguous && a.data_size() == n) {
    stride = 1;
    return true;
  }
  if (a.data_size() == 1) {
    stride = 0;
    return true;
  }
  return false;
}

// The axes of an elementwise op over `shape` whose operands (views of
// that shape) are read through `strides` (one list per operand), with
// axes of size 1 dropped and adjacent axes merged where every operand
// steps through them as through one: fewer, longer rows (a [n, 2] view
// broadcast from [n, 1] is still rows of 2, but [a, b, c] whole is one).
struct Axes {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides;  // [operand][axis]
};

inline Axes collapse_axes(const mx::Shape& shape, const std::vector<const mx::Strides*>& st) {
  Axes r;
  const size_t k = st.size();
  r.strides.resize(k);
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t n = shape[d];
    if (n == 1) continue;
    bool merge = !r.shape.empty();
    for (size_t i = 0; merge && i < k; ++i) merge = r.strides[i].back() == (*st[i])[d] * n;
    if (merge) {
      r.shape.back() *= n;
      for (size_t i = 0; i < k; ++i) r.strides[i].back() = (*st[i])[d];
    } else {
      r.shape.push_back(n);
      for (size_t i = 0; i < k; ++i) r.strides[i].push_back((*st[i])[d]);
    }
  }
  if (r.shape.empty()) {
    r.shape.push_back(1);
    for (size_t i = 0; i < k; ++i) r.strides[i].push_back(0);
  }
  return r;
}

// `row(offsets, first)` for rows r0..r1 of `ax` (a row: its last axis; rows
// in row-major order of the others): `offsets[i]` is where operand i's
// row starts, `first` the row's first element in the output. The offsets
// move with the row index (no division per row).
template <class F>
void for_rows(const Axes& ax, size_t r0, size_t r1, F&& row) {
  const int nd = static_cast<int>(ax.shape.size());
  const size_t k = ax.strides.size();
  const int64_t inner = ax.shape[nd - 1];
  std::vector<int64_t> idx(nd > 1 ? nd - 1 : 0, 0), off(k, 0);
  size_t rest = r0;
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = static_cast<int64_t>(rest % ax.shape[d]);
    rest /= ax.shape[d];
    for (size_t i = 0; i < k; ++i) off[i] += idx[d] * ax.strides[i][d];
  }
  for (size_t r = r0; r < r1; ++r) {
    row(off.data(), r * inner);
    for (int d = nd - 2; d >= 0; --d) {
      for (size_t i = 0; i < k; ++i) off[i] += ax.strides[i][d];
      if (++idx[d] < ax.shape[d]) break;
      for (size_t i = 0; i < k; ++i) off[i] -= ax.strides[i][d] * ax.shape[d];
      idx[d] = 0;
    }
  }
}

// `row(offsets, strides, first, len)` over the `n` elements of an
// elementwise op whose operands `ops` are views of `shape`: each call is a
// run of `len` outputs from output element `first`, operand i read from
// element offsets[i] of its data with stride strides[i]. One flat row where
// every operand lies whole or is one value broadcast, else the rows of the
// operands' collapsed axes; in parts over the plugin's threads, each of at
// least `min_per_part` elements.
template <class F>
void for_elementwise(const mx::Shape& shape, size_t n, const std::vector<const mx::array*>& ops,
                     size_t min_per_part, F&& row) {
  if (n == 0) return;
  const size_t k = ops.size();
  const size_t parts_max = std::min(Pool::get().size(), std::max<size_t>(1, n / min_per_part));
  std::vector<int64_t> flat(k);
  bool is_flat = true;
  for (size_t i = 0; is_flat && i < k; ++i) is_flat = flat_stride(*ops[i], n, flat[i]);
  if (is_flat) {
    auto part = [&](size_t lo, size_t len) {
      std::vector<int64_t> off(k);
      for (size_t i = 0; i < k; ++i) off[i] = static_cast<int64_t>(lo) * flat[i];
      row(off.data(), flat.data(), lo, static_cast<int64_t>(len));
    };
    if (parts_max <= 1) {
      part(0, n);
      return;
    }
    const size_t per = ((n + parts_max - 1) / parts_max + 7) & ~size_t(7);
    Pool::get().run(parts_max, [&](size_t t) {
      const size_t lo = t * per;
      if (lo < n) part(lo, std::min(per, n - lo));
    });
    return;
  }
  std::vector<const mx::Strides*> st(k);
  for (size_t i = 0; i < k; ++i) st[i] = &ops[i]->strides();
  const Axes ax = collapse_axes(shape, st);
  const int64_t inner = ax.shape.back();
  const size_t rows = n / static_cast<size_t>(inner);
  std::vector<int64_t> last(k);
  for (size_t i = 0; i < k; ++i) last[i] = ax.strides[i].back();
  auto run = [&](size_t r0, size_t r1) {
    for_rows(ax, r0, r1, [&](const int64_t* off, size_t first) {
      row(off, last.data(), first, inner);
    });
  };
  const size_t parts = std::min(parts_max, rows);
  if (parts <= 1) {
    run(0, rows);
    return;
  }
  const size_t per = (rows + parts - 1) / parts;
  Pool::get().run(parts, [&](size_t t) {
    const size_t r0 = t * per, r1 = std::min(rows, r0 + per);
    if (r0 < r1) run(r0, r1);
  });
}

}  // namespace rlx
