//! Makes `librlx_mlx.so` relocatable and lays out its plugin directory.
//!
//! The plugin directory (`<target>/<profile>/plugins/mlx/`, completed by
//! copying `librlx_mlx.so` into it) is self-contained:
//!
//! ```text
//! librlx_mlx.so            DT_RPATH $ORIGIN/mlx/lib:$ORIGIN/blas/optimized:$ORIGIN/blas/reference
//! rlx-mlx-kernel-builder   builds compiled mode's kernels in a process of its own
//! mlx/lib/libmlx.so        (its own RPATH, $ORIGIN/../../mlx_cpu.libs, finds nothing: no such dir)
//! blas/optimized/libblas-<hash>.so.3.10.0   -> /usr/lib/<triple>/libopenblas.so.0 (symlink)
//! blas/optimized/liblapack-<hash>.so.3.10.0 -> /usr/lib/<triple>/libopenblas.so.0 (symlink)
//! blas/reference/          the wheel's reference BLAS/LAPACK and their Fortran runtime
//! ```
//!
//! libmlx asks for its BLAS and LAPACK by the wheel's hashed names. Its own
//! RPATH finds nothing, so the loader walks on to the RPATH of the object
//! that loaded it, `librlx_mlx.so`: `blas/optimized` first, whose symlinks
//! resolve to OpenBLAS when the machine has it (and dangle, so are skipped,
//! when it does not), then `blas/reference`. The choice is made at load
//! time on the machine that runs the plugin, and the directory can be copied
//! anywhere. DT_RPATH (not RUNPATH) is what makes the loader consult
//! `librlx_mlx.so`'s paths for libmlx's dependencies.
//!
//! Asked for at build time, the same step also lays out a GPU plugin
//! directory beside this one from a pinned official MLX wheel: with
//! `RLX_MLX_CUDA=1` on Linux x86-64, `plugins/mlx-cuda/` from `mlx-cuda-13`;
//! with `RLX_MLX_METAL=1` on macOS arm64, `plugins/mlx-metal/` from
//! `mlx-metal` (see `build/gpu.rs` and docs/CUDA.md). Without those
//! variables nothing more is downloaded or written.

#[path = "../build-support/elf_names.rs"]
#[allow(dead_code)] // the build uses the soname rewrite, not the reads
mod elf_names;
#[path = "build/gpu.rs"]
mod gpu;
#[path = "build/kernel_builder.rs"]
mod kernel_builder;
#[path = "build/ops.rs"]
mod ops;
#[path = "../build-support/wheel.rs"]
mod wheel;

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    // Decided first, so that a GPU build asked for on a target without one
    // fails before anything is written.
    let gpu = gpu::requested(&target_os, &target_arch);
    if target_os == "linux" {
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--disable-new-dtags,-rpath,$ORIGIN/mlx/lib:$ORIGIN/blas/optimized:$ORIGIN/blas/reference"
        );
    } else if target_os == "macos" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,@loader_path/mlx/lib");
    }

    let lib_dir = PathBuf::from(
        std::env::var("DEP_MLX_LIB_DIR").expect("rlx-mlx-shim exports DEP_MLX_LIB_DIR"),
    );
    let libs_dir = std::env::var("DEP_MLX_LIBS_DIR").unwrap_or_default();
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // OUT_DIR = <target>/<profile>/build/<pkg>-<hash>/out
    let profile_dir = out
        .ancestors()
        .nth(3)
        .expect("profile directory")
        .to_path_buf();
    let bundle = profile_dir.join("plugins").join("mlx");
    assemble(&bundle, &lib_dir, Path::new(&libs_dir)).unwrap_or_else(|e| {
        panic!(
            "assembling the MLX plugin directory {}: {e}",
            bundle.display()
        )
    });
    println!("cargo:rustc-env=RLX_MLX_BUNDLE_DIR={}", bundle.display());
    ops::write(
        &PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src"),
        &out,
    );

    let mut bundles = vec![bundle];
    if let Some(variant) = gpu {
        gpu::lay_out(variant, &profile_dir.join("plugins"));
        bundles.push(profile_dir.join("plugins").join(variant.dir));
    }
    kernel_builder::build(
        &PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()),
        &out,
        &target_os,
        &bundles,
    );
}

fn copy_if_changed(src: &Path, dst: &Path) -> std::io::Result<()> {
    let same = match (std::fs::metadata(src), std::fs::metadata(dst)) {
        (Ok(a), Ok(b)) => a.len() == b.len() && a.modified().ok() <= b.modified().ok(),
        _ => false,
    };
    if !same {
        if dst.exists() || dst.symlink_metadata().is_ok() {
            std::fs::remove_file(dst)?;
        }
        std::fs::copy(src, dst)?;
    }
    Ok(())
}

fn assemble(bundle: &Path, lib_dir: &Path, libs_dir: &Path) -> std::io::Result<()> {
    let mlx_lib = bundle.join("mlx").join("lib");
    std::fs::create_dir_all(&mlx_lib)?;
    for e in std::fs::read_dir(lib_dir)? {
        let p = e?.path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("libmlx") && (name.contains(".so") || name.ends_with(".dylib")) {
            copy_if_changed(&p, &mlx_lib.join(&name))?;
        }
    }
    if libs_dir.as_os_str().is_empty() || !libs_dir.is_dir() {
        return Ok(()); // a local MLX (MLX_DIR) brings its own BLAS
    }
    lay_out_blas(bundle, libs_dir)
}

/// `blas/reference/` (the wheel's BLAS, LAPACK and their Fortran runtime,
/// from `libs_dir`) and `blas/optimized/` (the same BLAS/LAPACK names as
/// symlinks to the system OpenBLAS) inside `bundle`.
fn lay_out_blas(bundle: &Path, libs_dir: &Path) -> std::io::Result<()> {
    let reference = bundle.join("blas").join("reference");
    let optimized = bundle.join("blas").join("optimized");
    std::fs::create_dir_all(&reference)?;
    std::fs::create_dir_all(&optimized)?;
    let openblas = optimized_blas_path();
    for e in std::fs::read_dir(libs_dir)? {
        let p = e?.path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        copy_if_changed(&p, &reference.join(&name))?;
        if name.starts_with("libblas-") || name.starts_with("liblapack-") {
            let link = optimized.join(&name);
            if link.symlink_metadata().is_ok() {
                std::fs::remove_file(&link)?;
            }
            #[cfg(unix)]
            std::os::unix::fs::symlink(&openblas, &link)?;
        }
    }
    Ok(())
}

/// Where an optimized BLAS is expected on the machine that runs the plugin
/// (Debian/Ubuntu's alternatives-managed OpenBLAS for this architecture).
fn optimized_blas_path() -> PathBuf {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let triple = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        other => other,
    };
    PathBuf::from(format!("/usr/lib/{triple}/libopenblas.so.0"))
}
