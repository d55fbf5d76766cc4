//! Build script for `rlx-mlx-shim`.
//!
//! 1. Locates MLX: either a local install named by `MLX_DIR`
//!    (`$MLX_DIR/include`, `$MLX_DIR/lib/libmlx.so`), or, on Linux x86-64
//!    and aarch64, the pinned official `mlx-cpu` 0.32.4 wheel for the target
//!    from PyPI, fetched with `python3 -m pip download`, checked against its
//!    sha256 and unpacked into a cache directory (`$RLX_MLX_CACHE`, else
//!    `$HOME/.cache/rlx/mlx-cpu-0.32.4`; for aarch64 `$RLX_MLX_AARCH64_CACHE`,
//!    else `...-aarch64`). A marker file makes later builds skip the fetch.
//!    `RLX_MLX_WHEEL` (`RLX_MLX_AARCH64_WHEEL`) may name an already-downloaded
//!    copy of the wheel file (it is verified the same way) for offline builds. The
//!    fetching code is `../build-support/wheel.rs`, shared with
//!    `plugin-mlx/build.rs`, which fetches the GPU wheels the same way.
//! 2. Compiles the cxx bridges and the hand-written C++ (C++20, `-O2`).
//! 3. Links `libmlx.so` dynamically.
//! 4. Exports, through the `links = "mlx"` key, metadata that dependents see
//!    as environment variables in their own build scripts:
//!    * `DEP_MLX_ROOT`     - the directory holding `mlx/` (and, for the wheel,
//!      `mlx_cpu.libs/`), i.e. the unpacked wheel root or `MLX_DIR`;
//!    * `DEP_MLX_LIB_DIR`  - the directory of `libmlx.so`;
//!    * `DEP_MLX_LIBS_DIR` - the directory of MLX's bundled BLAS/LAPACK/
//!      gfortran (`mlx_cpu.libs/`; empty when using `MLX_DIR`);
//!    * `DEP_MLX_INCLUDE`  - the MLX include directory;
//!    * `DEP_MLX_VERSION`  - `0.32.4`.

#[path = "../build-support/wheel.rs"]
mod wheel;
#[path = "build/wrappers.rs"]
mod wrappers;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const MLX_VERSION: &str = "0.32.4";

/// The pinned official CPU-only MLX wheel, Linux x86-64.
const MLX_CPU_WHEEL: wheel::Wheel = wheel::Wheel {
    name: "mlx-cpu",
    version: MLX_VERSION,
    file: "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl",
    sha256: "0e0a24fa2ce8b6b94d2e6a90604e8813aa8e29fcb918bb2aa01cfb6d133d8cee",
    platform: "manylinux_2_35_x86_64",
    required: &["mlx/include/mlx/mlx.h", "mlx/lib/libmlx.so"],
    file_env: "RLX_MLX_WHEEL",
    hint: "Or set MLX_DIR to a local MLX install.",
};

/// The same for Linux aarch64 (Graviton, Grace, DGX Spark): the build for
/// `--target aarch64-unknown-linux-gnu` (`scripts/build-linux-aarch64.sh`).
const MLX_CPU_WHEEL_AARCH64: wheel::Wheel = wheel::Wheel {
    name: "mlx-cpu",
    version: MLX_VERSION,
    file: "mlx_cpu-0.32.4-py3-none-manylinux_2_35_aarch64.whl",
    sha256: "1289e85e64af1fd16380bf331438bfe4afe875d27afc3e0bcf35f427c488fadd",
    platform: "manylinux_2_35_aarch64",
    required: &["mlx/include/mlx/mlx.h", "mlx/lib/libmlx.so"],
    file_env: "RLX_MLX_AARCH64_WHEEL",
    hint: "Or set MLX_DIR to a local MLX install for aarch64.",
};

/// Where MLX lives for this build.
struct Mlx {
    /// Directory holding `mlx/` (wheel root) or the `MLX_DIR` prefix.
    root: PathBuf,
    include: PathBuf,
    lib_dir: PathBuf,
    /// `mlx_cpu.libs` for the wheel (bundled BLAS/LAPACK), if any.
    libs_dir: Option<PathBuf>,
}

fn main() {
    println!("cargo:rerun-if-env-changed=MLX_DIR");
    println!("cargo:rerun-if-env-changed=RLX_MLX_CACHE");
    println!("cargo:rerun-if-env-changed=RLX_MLX_WHEEL");
    println!("cargo:rerun-if-env-changed=RLX_MLX_AARCH64_CACHE");
    println!("cargo:rerun-if-env-changed=RLX_MLX_AARCH64_WHEEL");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../build-support/wheel.rs");
    for dir in ["build", "include", "src"] {
        rerun_for_dir(Path::new(dir));
    }

    let mlx = locate_mlx();

    // --- compile the bridges -------------------------------------------------
    let bridges = [
        "src/array.rs",
        "src/ops.rs",
        "src/fast.rs",
        "src/compile.rs",
        "src/random.rs",
        "src/linalg.rs",
        "src/fft.rs",
        "src/info.rs",
        "src/kernels.rs",
        "src/cuda_kernels.rs",
        "src/host_kernel.rs",
        "src/distributed.rs",
        "src/fusion.rs",
        "src/host_memory.rs",
    ];
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    for (bridge, op_prefix) in [
        ("src/array.rs", ""),
        ("src/ops.rs", ""),
        ("src/fast.rs", ""),
        ("src/info.rs", ""),
        ("src/kernels.rs", ""),
        ("src/cuda_kernels.rs", ""),
        ("src/fft.rs", "fft::"),
        ("src/linalg.rs", "linalg::"),
        ("src/random.rs", "random::"),
    ] {
        wrappers::generate(Path::new(bridge), op_prefix, &out_dir);
    }
    let mut build = cxx_build::bridges(bridges);
    build
        .files([
            "src/array.cc",
            "src/compile.cc",
            "src/cuda_copy.cc",
            "src/info.cc",
            "src/kernels.cc",
            "src/cuda_kernels.cc",
            "src/fma.cc",
            "src/gemm.cc",
            "src/quantized.cc",
            "src/inline_eval.cc",
            "src/row_kernels.cc",
            "src/scan_kernel.cc",
            "src/host_kernel.cc",
            "src/distributed.cc",
            "src/fusion.cc",
            "src/host_memory.cc",
        ])
        .std("c++20")
        .include("include")
        // MLX headers as system headers: keeps -Wall/-Wextra noise from MLX
        // (unused parameters, sign comparisons, ...) out of the build log.
        .flag("-isystem")
        .flag(mlx.include.to_str().expect("MLX include path is not UTF-8"))
        .opt_level(2)
        // The kernels' arithmetic as written, on every target: a compiler
        // may otherwise fuse `a * b + c` into one rounding where the
        // target has FMA (GCC by default, on arm64 always; on x86 inside
        // an AVX2 function), so the portable loops would give other bits
        // on arm64 than on x86, and other bits again when inlined into a
        // vector kernel's tail. Fused multiply-adds are written as such
        // (std::fma, _mm256_fmadd_ps) where they are meant.
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        // GCC's note on aarch64 that std::pair<float, float> passing changed
        // in GCC 10.1 (MLX's headers): informational, not ours to change.
        .flag_if_supported("-Wno-psabi")
        .flag_if_supported("-fvisibility-inlines-hidden");
    build.compile("rlx_mlx_shim_cxx");

    // --- link MLX -------------------------------------------------------------
    println!("cargo:rustc-link-search=native={}", mlx.lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    // `dladdr`/`dlopen` live in libc on glibc >= 2.34, but name libdl for
    // older toolchains; harmless otherwise.
    println!("cargo:rustc-link-lib=dylib=dl");

    // So that this package's own test binaries find libmlx.so at run time.
    // `rustc-link-arg` applies only to this package's binaries (tests,
    // examples, benches), never to dependents. The real plugin (plugin-mlx)
    // does not rely on this: it sets its own `$ORIGIN`-relative rpaths from
    // DEP_MLX_LIB_DIR / DEP_MLX_LIBS_DIR when it packages libmlx.so next to
    // itself.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", mlx.lib_dir.display());
    if let Some(libs) = &mlx.libs_dir {
        // libmlx.so finds its bundled BLAS/LAPACK through its own RPATH
        // ($ORIGIN/../../mlx_cpu.libs); help the link-time resolver too.
        println!("cargo:rustc-link-arg=-Wl,-rpath-link,{}", libs.display());
    }

    // --- metadata for dependents (DEP_MLX_*) -----------------------------------
    println!("cargo:root={}", mlx.root.display());
    println!("cargo:lib_dir={}", mlx.lib_dir.display());
    println!(
        "cargo:libs_dir={}",
        mlx.libs_dir
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    println!("cargo:include={}", mlx.include.display());
    println!("cargo:version={MLX_VERSION}");
}

fn rerun_for_dir(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    println!("cargo:rerun-if-changed={}", dir.display());
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rerun_for_dir(&path);
        } else {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn locate_mlx() -> Mlx {
    if let Some(dir) = env::var_os("MLX_DIR").filter(|v| !v.is_empty()) {
        let root = PathBuf::from(dir);
        let include = root.join("include");
        let lib_dir = root.join("lib");
        if !include.join("mlx").join("mlx.h").exists() {
            panic!(
                "MLX_DIR={} does not contain include/mlx/mlx.h",
                root.display()
            );
        }
        if !lib_dir.join("libmlx.so").exists() && !lib_dir.join("libmlx.dylib").exists() {
            panic!(
                "MLX_DIR={} does not contain lib/libmlx.so (or lib/libmlx.dylib)",
                root.display()
            );
        }
        return Mlx {
            root,
            include,
            lib_dir,
            libs_dir: None,
        };
    }

    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let (pin, cache_env) = match (os.as_str(), arch.as_str()) {
        ("linux", "x86_64") => (&MLX_CPU_WHEEL, "RLX_MLX_CACHE"),
        ("linux", "aarch64") => (&MLX_CPU_WHEEL_AARCH64, "RLX_MLX_AARCH64_CACHE"),
        _ => panic!(
            "rlx-mlx-shim: no MLX for target {arch}-{os}. The pinned mlx-cpu {MLX_VERSION} \
             wheels are used on Linux x86-64 and aarch64; on this target set MLX_DIR to an \
             MLX {MLX_VERSION} install prefix (with include/mlx/*.h and lib/libmlx.so)."
        ),
    };
    let cache = wheel::cache_dir(pin, cache_env, "mlx-cache");
    let wheel_root = wheel::fetch(pin, &cache);
    Mlx {
        include: wheel_root.join("mlx").join("include"),
        lib_dir: wheel_root.join("mlx").join("lib"),
        libs_dir: Some(wheel_root.join("mlx_cpu.libs")),
        root: wheel_root,
    }
}
