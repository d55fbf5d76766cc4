//! Which BLAS MLX is using. The plugin directory resolves MLX's BLAS and
//! LAPACK names to an optimized library when the machine has one and to the
//! bundled reference BLAS otherwise (see build.rs); this says which won.

/// A one-line description: vendor and file.
pub fn describe() -> String {
    let path = rlx_mlx_shim::blas_library_path();
    if path.is_empty() {
        return "unknown (the BLAS library could not be located)".into();
    }
    let real = std::fs::canonicalize(&path)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.clone());
    let lower = real.to_ascii_lowercase();
    let vendor = if lower.contains("openblas") {
        "OpenBLAS (optimized)"
    } else if lower.contains("mkl") {
        "Intel MKL (optimized)"
    } else if lower.contains("blis") {
        "BLIS (optimized)"
    } else if lower.contains("accelerate") {
        "Apple Accelerate (optimized)"
    } else if lower.contains("libblas-bd8a282c") {
        "reference BLAS bundled with mlx-cpu (slow: no optimized BLAS found)"
    } else {
        "unrecognised BLAS"
    };
    format!("{vendor}: {real}")
}

/// How many threads the plugin's f32 CPU matrix product would use now for
/// one `[m, k] x [k, n]` product: its own threads, times the BLAS's where
/// the BLAS does the work; 0 for an empty product.
///
/// Exported from the plugin library (not part of the ABI: a diagnostic a
/// test or a host reads with `dlsym`). A host that pins the process's
/// OpenBLAS to one thread, as rlx-runtime's CPU backend does, leaves the
/// plugin's products on as many threads as before: the plugin never sets
/// the BLAS's count, and spreads its BLAS calls over its own threads when
/// it finds the BLAS pinned.
#[no_mangle]
pub extern "C" fn rlx_mlx_matmul_threads(m: i64, k: i64, n: i64) -> i64 {
    // The C++ side computes a count and cannot throw; nothing to unwind.
    rlx_mlx_shim::kernels::matmul_cpu_threads(m, k, n)
}
