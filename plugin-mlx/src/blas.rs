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
