//! The GPU plugin directories, laid out only when asked for.
//!
//! `RLX_MLX_CUDA=1` (Linux x86-64, and Linux aarch64: Grace Hopper, DGX
//! Spark) lays out `plugins/mlx-cuda/` from the pinned `mlx-cuda-13` wheel
//! of the target's architecture; `RLX_MLX_METAL=1` (macOS arm64) lays out
//! `plugins/mlx-metal/` from the pinned `mlx-metal` wheel. Each sits beside
//! `plugins/mlx/` and is completed by copying the plugin library in. The
//! plugin code is the same for every directory: it was compiled against
//! MLX 0.32.4's headers (the same in every wheel) and finds its libmlx in
//! `mlx/lib/` through its `$ORIGIN` (`@loader_path`) rpath, so the directory
//! it sits in decides which MLX it runs. In `mlx-cuda/` libmlx is called
//! `mlx-cu.so` and the plugin library's copy asks for that name
//! (`cargo xtask cuda-plugin` makes the copy), so that the CPU and CUDA
//! directories can both be loaded in one process.
//!
//! ```text
//! plugins/mlx-cuda/
//!   librlx_mlx.so            copied in after the build, needing mlx-cu.so
//!   mlx/lib/mlx-cu.so        the wheel's libmlx.so with that soname;
//!                            DT_RPATH $ORIGIN/../../nvidia/<pkg>/lib:...
//!   mlx/include/             the wheel's headers: NVRTC compiles MLX's kernels at
//!                            run time with mlx/include/cccl on its include path
//!   blas/{optimized,reference}/  as in plugins/mlx (the wheel's BLAS is the same)
//!   mlx-cuda-runtime.sh      makes nvidia/ on the machine that runs the plugin
//!   nvidia/                  symlinks to the CUDA runtime (NVIDIA's pip packages
//!                            or a CUDA toolkit), made by that script
//! plugins/mlx-metal/
//!   librlx_mlx.dylib         copied in after the build
//!   mlx/lib/libmlx.dylib, mlx/lib/mlx.metallib, mlx/lib/libjaccl.dylib
//! ```
//!
//! libmlx's own rpath names `mlx_cuda_13.libs/` for its BLAS; that directory
//! is left out, so the loader goes on to `librlx_mlx.so`'s DT_RPATH and
//! picks `blas/optimized` (OpenBLAS) before `blas/reference`, as in
//! `plugins/mlx`. The CUDA libraries are found through libmlx's own rpath
//! in `nvidia/`; when that is missing, through `LD_LIBRARY_PATH` and the
//! system's library cache.

use super::elf_names;
use super::wheel::{self, Wheel};
use std::path::{Path, PathBuf};
use std::process::Command;

const MLX_VERSION: &str = "0.32.4";

/// One GPU flavour of the plugin directory.
pub struct Variant {
    /// The environment variable that asks for it (`1` asks).
    pub env: &'static str,
    /// The only target it exists for.
    pub os: &'static str,
    pub arch: &'static str,
    /// Its directory name under `plugins/`.
    pub dir: &'static str,
    pub wheel: Wheel,
    /// Environment variable naming the cache directory instead of
    /// `~/.cache/rlx/<wheel>-<version>`.
    pub cache_env: &'static str,
    /// The wheel's directory of bundled BLAS/LAPACK, laid out as `blas/`.
    pub blas_libs: Option<&'static str>,
    /// Whether MLX needs its headers at run time (NVRTC).
    pub headers: bool,
    /// Whether the CUDA runtime is linked in as `nvidia/`.
    pub cuda_runtime: bool,
    /// The soname (and file name) libmlx gets in this directory, so that
    /// it and the CPU directory's libmlx can be loaded in one process
    /// (`build-support/elf_names.rs` says why). None keeps the wheel's.
    pub libmlx_soname: Option<&'static str>,
}

/// The CUDA directory from the `mlx-cuda-13` wheel of one architecture:
/// every CUDA variant is laid out the same way, only the wheel differs.
const fn cuda(
    arch: &'static str,
    file: &'static str,
    sha256: &'static str,
    platform: &'static str,
) -> Variant {
    Variant {
        env: "RLX_MLX_CUDA",
        os: "linux",
        arch,
        dir: "mlx-cuda",
        wheel: Wheel {
            name: "mlx-cuda-13",
            version: MLX_VERSION,
            file,
            sha256,
            platform,
            required: &[
                "mlx/lib/libmlx.so",
                "mlx/include/mlx/mlx.h",
                "mlx/include/cccl/cuda/std/tuple",
                "mlx_cuda_13.libs",
            ],
            file_env: "RLX_MLX_CUDA_WHEEL",
            hint: "Or build without RLX_MLX_CUDA.",
        },
        cache_env: "RLX_MLX_CUDA_CACHE",
        blas_libs: Some("mlx_cuda_13.libs"),
        headers: true,
        cuda_runtime: true,
        libmlx_soname: Some(elf_names::CUDA_LIBMLX),
    }
}

pub static VARIANTS: [Variant; 3] = [
    cuda(
        "x86_64",
        "mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl",
        "94cb48fba73e5ee39467e51c35c51c691123359ca17bafd1a24cf92ad6732bee",
        "manylinux_2_35_x86_64",
    ),
    // The same wheel built for arm64 (Grace Hopper, DGX Spark); cross-built
    // on x86-64 by scripts/build-linux-aarch64.sh --cuda.
    cuda(
        "aarch64",
        "mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_aarch64.whl",
        "cf8a67b49cebff85cd98b1d118c09f6c8ee966b899a914c50cc74d614b25616e",
        "manylinux_2_35_aarch64",
    ),
    Variant {
        env: "RLX_MLX_METAL",
        os: "macos",
        arch: "aarch64",
        dir: "mlx-metal",
        wheel: Wheel {
            name: "mlx-metal",
            version: MLX_VERSION,
            // The macOS 14 build: the oldest macOS the 0.32.4 wheels support.
            file: "mlx_metal-0.32.4-py3-none-macosx_14_0_arm64.whl",
            sha256: "8019b2db622599267d66cc168b2f0dbf5af929790a6c3b3913e00eabc42a7947",
            platform: "macosx_14_0_arm64",
            required: &["mlx/lib/libmlx.dylib", "mlx/lib/mlx.metallib"],
            file_env: "RLX_MLX_METAL_WHEEL",
            hint: "Or build without RLX_MLX_METAL.",
        },
        cache_env: "RLX_MLX_METAL_CACHE",
        blas_libs: None,
        headers: false,
        cuda_runtime: false,
        // Untested: dyld matches install names as ld.so matches sonames,
        // so mlx-metal beside a macOS CPU directory would want the same.
        libmlx_soname: None,
    },
];

/// The variant asked for by the environment, if any. Panics when one is
/// asked for on a target it does not exist for.
pub fn requested(os: &str, arch: &str) -> Option<&'static Variant> {
    let asked = |v: &Variant| {
        std::env::var(v.env)
            .map(|s| !matches!(s.trim(), "" | "0" | "false" | "no" | "off"))
            .unwrap_or(false)
    };
    for v in &VARIANTS {
        println!("cargo:rerun-if-env-changed={}", v.env);
    }
    let here = |v: &Variant| (v.os, v.arch) == (os, arch);
    // A variable asked for where none of its variants exists is a mistake
    // to say, not to ignore.
    for v in VARIANTS.iter().filter(|v| asked(v)) {
        if !VARIANTS.iter().any(|w| w.env == v.env && here(w)) {
            let targets: Vec<String> = VARIANTS
                .iter()
                .filter(|w| w.env == v.env)
                .map(|w| format!("{}-{}", w.arch, w.os))
                .collect();
            panic!(
                "{}=1 asks for the {} plugin directory, which exists for {} only (this \
                 target is {arch}-{os}). Unset {}.",
                v.env,
                v.dir,
                targets.join(", "),
                v.env
            );
        }
    }
    let v = VARIANTS.iter().find(|v| asked(v) && here(v))?;
    println!("cargo:rerun-if-env-changed={}", v.cache_env);
    println!("cargo:rerun-if-env-changed={}", v.wheel.file_env);
    if v.cuda_runtime {
        println!("cargo:rerun-if-env-changed=RLX_MLX_CUDA_RUNTIME");
    }
    Some(v)
}

/// Fetches the variant's wheel and lays out `<plugins>/<dir>/`.
pub fn lay_out(v: &Variant, plugins: &Path) {
    let cache = wheel::cache_dir(&v.wheel, v.cache_env, &format!("{}-cache", v.wheel.name));
    let root = wheel::fetch(&v.wheel, &cache);
    let bundle = plugins.join(v.dir);

    // mlx/lib: every file of the wheel's (libmlx, and on macOS the metallib
    // that libmlx loads from its own directory and the jaccl library).
    let lib = bundle.join("mlx").join("lib");
    std::fs::create_dir_all(&lib).unwrap_or_else(|e| fail("creating mlx/lib", &bundle, e));
    let entries = std::fs::read_dir(root.join("mlx").join("lib"))
        .unwrap_or_else(|e| fail("reading the wheel's mlx/lib", &bundle, e));
    for e in entries.flatten() {
        let p = e.path();
        if !p.is_file() {
            continue;
        }
        match v.libmlx_soname {
            Some(soname) if e.file_name() == elf_names::WHEEL_LIBMLX => {
                install_renamed_libmlx(&p, &lib, soname)
                    .unwrap_or_else(|e| panic!("renaming libmlx in {}: {e}", bundle.display()));
            }
            _ => super::copy_if_changed(&p, &lib.join(e.file_name()))
                .unwrap_or_else(|e| fail("copying mlx/lib", &bundle, e)),
        }
    }
    if v.headers {
        copy_tree(
            &root.join("mlx").join("include"),
            &bundle.join("mlx").join("include"),
        )
        .unwrap_or_else(|e| fail("copying mlx/include", &bundle, e));
    }
    if let Some(libs) = v.blas_libs {
        super::lay_out_blas(&bundle, &root.join(libs))
            .unwrap_or_else(|e| fail("laying out blas/", &bundle, e));
    }
    // The CUDA runtime this machine has is of this machine's architecture:
    // a cross-built directory gets its nvidia/ on the machine that runs it.
    let cross = std::env::var("HOST").ok() != std::env::var("TARGET").ok();
    if v.cuda_runtime && !cross {
        link_cuda_runtime(&bundle);
    } else if v.cuda_runtime {
        copy_runtime_script(&bundle);
        println!(
            "cargo:warning=cross-built {}: run its mlx-cuda-runtime.sh on the machine that \
             runs it (or install its release archive there with rlx-host)",
            bundle.display()
        );
    }
    println!(
        "cargo:warning=laid out {} from {}=={}; complete it with `cargo xtask \
         cuda-plugin` after the build (docs/CUDA.md)",
        bundle.display(),
        v.wheel.name,
        v.wheel.version
    );
}

/// `mlx/lib/<soname>`: the wheel's libmlx with its soname rewritten, made
/// again when the wheel's is newer; a `libmlx.so` left by an older layout
/// is removed (the plugin library here no longer asks for it).
fn install_renamed_libmlx(src: &Path, lib: &Path, soname: &str) -> Result<(), String> {
    let dst = lib.join(soname);
    let fresh = match (std::fs::metadata(src), std::fs::metadata(&dst)) {
        (Ok(a), Ok(b)) => a.modified().ok() <= b.modified().ok(),
        _ => false,
    };
    if !fresh {
        elf_names::copy_renamed(
            src,
            &dst,
            elf_names::Entry::Soname,
            elf_names::WHEEL_LIBMLX,
            soname,
        )?;
    }
    let stale = lib.join(elf_names::WHEEL_LIBMLX);
    if stale.exists() {
        std::fs::remove_file(&stale).map_err(|e| format!("removing {}: {e}", stale.display()))?;
    }
    Ok(())
}

fn fail(what: &str, bundle: &Path, e: std::io::Error) -> ! {
    panic!("{what} in the plugin directory {}: {e}", bundle.display())
}

/// Copies `src` into `dst` recursively, skipping files already up to date.
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let to = dst.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &to)?;
        } else {
            super::copy_if_changed(&e.path(), &to)?;
        }
    }
    Ok(())
}

/// `scripts/mlx-cuda-runtime.sh` into the directory, so that it travels
/// with it; its path there.
fn copy_runtime_script(bundle: &Path) -> PathBuf {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let script_src = manifest
        .join("..")
        .join("scripts")
        .join("mlx-cuda-runtime.sh");
    println!("cargo:rerun-if-changed={}", script_src.display());
    let script = bundle.join("mlx-cuda-runtime.sh");
    super::copy_if_changed(&script_src, &script).unwrap_or_else(|e| {
        panic!(
            "copying {} into {}: {e}",
            script_src.display(),
            bundle.display()
        )
    });
    script
}

/// Puts `scripts/mlx-cuda-runtime.sh` into the directory (so that it travels
/// with it) and runs it: it links `nvidia/` to the CUDA runtime named by
/// `RLX_MLX_CUDA_RUNTIME`, else to the `nvidia` package of the `python3` on
/// PATH, else to a CUDA toolkit. Its report becomes build warnings; finding
/// nothing is not an error here (the directory is meant to be moved to the
/// machine that runs it, where the script is run again).
fn link_cuda_runtime(bundle: &Path) {
    let script = copy_runtime_script(bundle);
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .arg("--brief")
        .arg("--plugin-dir")
        .arg(bundle);
    match std::env::var_os("RLX_MLX_CUDA_RUNTIME").filter(|v| !v.is_empty()) {
        Some(dir) => {
            cmd.arg(dir);
        }
        // Keep a nvidia/ that someone made on purpose (by running the script
        // with a directory of their choice).
        None => {
            cmd.arg("--keep");
        }
    }
    match cmd.output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                println!("cargo:warning={line}");
            }
            if !out.status.success() {
                println!(
                    "cargo:warning=the CUDA runtime is not (fully) linked into {}/nvidia: \
                     run `{} [DIR]` on the machine that runs the plugin",
                    bundle.display(),
                    script.display()
                );
            }
        }
        Err(e) => println!(
            "cargo:warning=could not run {} ({e}): run it by hand to link the CUDA runtime",
            script.display()
        ),
    }
}
