// The plugin's own CPU kernels, run inside MLX's graph as primitives (see
// src/kernels.cc for why and how).
#pragma once

#include "rlx-mlx-shim/include/array.h"

namespace rlx {

// Erf-GELU of a float32 array, x/2 * (1 + erf(x/sqrt 2)), on the CPU
// stream, with the same approximation rlx-runtime's CPU backend uses.
// Throws for other dtypes.
std::unique_ptr<Array> gelu_erf_cpu(const Array& x);

// A float32 matrix product [..., M, K] x [K, N] (or x [..., K, N] with
// the same batch dims) on the CPU stream, with the plugin's own kernel for
// few rows and its own threads around the BLAS (src/gemm.cc says why). The
// operands may be any strided views. Throws for other dtypes and shapes.
std::unique_ptr<Array> matmul_cpu(const Array& a, const Array& b);
// How many threads matmul_cpu would use now for one [m, k] x [k, n]
// product: the plugin's own, times the BLAS's where the BLAS does the work
// (a diagnostic: what a host that pinned the process's BLAS left us).
int64_t matmul_cpu_threads(int64_t m, int64_t k, int64_t n);
// Whether matmul_cpu takes these operands.
bool matmul_cpu_takes(const Array& a, const Array& b);

// Whether this CPU has the vector kernel (AVX2 + FMA); otherwise the
// kernels run their scalar loop (same formula).
bool kernels_vectorized();

}  // namespace rlx
