//! Build script for `rlx-mlx-shim`.
//!
//! 1. Locates MLX: either a local install named by `MLX_DIR`
//!    (`$MLX_DIR/include`, `$MLX_DIR/lib/libmlx.so`), or, on Linux x86-64,
//!    the pinned official `mlx-cpu` 0.32.4 wheel from PyPI, fetched with
//!    `python3 -m pip download`, checked against its sha256 and unpacked into
//!    a cache directory (`$RLX_MLX_CACHE`, else
//!    `$HOME/.cache/rlx/mlx-cpu-0.32.4`). A marker file makes later builds
//!    skip the fetch. `RLX_MLX_WHEEL` may name an already-downloaded copy of
//!    the wheel file (it is verified the same way) for offline builds.
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

use std::env;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

const MLX_VERSION: &str = "0.32.4";
const WHEEL_FILE: &str = "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl";
const WHEEL_SHA256: &str = "0e0a24fa2ce8b6b94d2e6a90604e8813aa8e29fcb918bb2aa01cfb6d133d8cee";
const MARKER: &str = ".rlx-mlx-verified";

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
    println!("cargo:rerun-if-changed=build.rs");
    for dir in ["include", "src"] {
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
    ];
    let mut build = cxx_build::bridges(bridges);
    build
        .files(["src/array.cc", "src/compile.cc", "src/info.cc"])
        .std("c++20")
        .include("include")
        // MLX headers as system headers: keeps -Wall/-Wextra noise from MLX
        // (unused parameters, sign comparisons, ...) out of the build log.
        .flag("-isystem")
        .flag(mlx.include.to_str().expect("MLX include path is not UTF-8"))
        .opt_level(2)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
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
    if os != "linux" || arch != "x86_64" {
        panic!(
            "rlx-mlx-shim: no MLX for target {arch}-{os}. The pinned mlx-cpu {MLX_VERSION} \
             wheel is only used on Linux x86-64; on this target set MLX_DIR to an MLX \
             {MLX_VERSION} install prefix (with include/mlx/*.h and lib/libmlx.so)."
        );
    }

    let cache = match env::var_os("RLX_MLX_CACHE").filter(|v| !v.is_empty()) {
        Some(c) => PathBuf::from(c),
        None => match env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home)
                .join(".cache")
                .join("rlx")
                .join(format!("mlx-cpu-{MLX_VERSION}")),
            None => PathBuf::from(env::var("OUT_DIR").unwrap()).join("mlx-cache"),
        },
    };
    let wheel_root = fetch_wheel(&cache);
    Mlx {
        include: wheel_root.join("mlx").join("include"),
        lib_dir: wheel_root.join("mlx").join("lib"),
        libs_dir: Some(wheel_root.join("mlx_cpu.libs")),
        root: wheel_root,
    }
}

/// Returns the unpacked wheel root (`<cache>/wheel`), fetching, verifying and
/// unpacking the wheel first if the cache does not hold a verified copy.
fn fetch_wheel(cache: &Path) -> PathBuf {
    let wheel_root = cache.join("wheel");
    if is_complete(&wheel_root) {
        return wheel_root;
    }
    fs::create_dir_all(cache)
        .unwrap_or_else(|e| panic!("cannot create MLX cache dir {}: {e}", cache.display()));

    // Several builds (different target dirs) may race here: do all the work in
    // a private staging dir and publish it with a rename.
    let staging = cache.join(format!(
        "staging-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging).unwrap();

    let wheel_file = obtain_wheel_file(cache, &staging);
    let actual = sha256_file(&wheel_file);
    if actual != WHEEL_SHA256 {
        let _ = fs::remove_dir_all(&staging);
        panic!(
            "sha256 mismatch for {}: expected {WHEEL_SHA256}, actual {actual}",
            wheel_file.display()
        );
    }

    // Keep the verified wheel file in <cache>/download for offline rebuilds.
    let download = cache.join("download");
    let _ = fs::create_dir_all(&download);
    let kept = download.join(WHEEL_FILE);
    if wheel_file != kept && !kept.exists() {
        let tmp = download.join(format!("{WHEEL_FILE}.tmp-{}", std::process::id()));
        if fs::copy(&wheel_file, &tmp).is_ok() {
            let _ = fs::rename(&tmp, &kept);
        }
        let _ = fs::remove_file(&tmp);
    }

    let unpacked = staging.join("wheel");
    unzip(&wheel_file, &unpacked);
    for needed in ["mlx/include/mlx/mlx.h", "mlx/lib/libmlx.so"] {
        if !unpacked.join(needed).exists() {
            panic!(
                "unpacked mlx-cpu wheel at {} lacks {needed}",
                unpacked.display()
            );
        }
    }
    fs::write(unpacked.join(MARKER), format!("{WHEEL_SHA256}\n")).unwrap();

    if wheel_root.exists() && !is_complete(&wheel_root) {
        // A half-finished copy from an interrupted build.
        let _ = fs::remove_dir_all(&wheel_root);
    }
    if fs::rename(&unpacked, &wheel_root).is_err() && !is_complete(&wheel_root) {
        panic!(
            "could not move unpacked MLX wheel into {}",
            wheel_root.display()
        );
    }
    let _ = fs::remove_dir_all(&staging);
    wheel_root
}

fn is_complete(wheel_root: &Path) -> bool {
    fs::read_to_string(wheel_root.join(MARKER))
        .map(|s| s.trim() == WHEEL_SHA256)
        .unwrap_or(false)
        && wheel_root.join("mlx/lib/libmlx.so").exists()
        && wheel_root.join("mlx/include/mlx/mlx.h").exists()
}

/// Finds or downloads the wheel file. Preference: `RLX_MLX_WHEEL`, a copy
/// already in `<cache>/download`, then `pip download` into the staging dir.
fn obtain_wheel_file(cache: &Path, staging: &Path) -> PathBuf {
    if let Some(w) = env::var_os("RLX_MLX_WHEEL").filter(|v| !v.is_empty()) {
        return PathBuf::from(w);
    }
    let kept = cache.join("download").join(WHEEL_FILE);
    if kept.exists() && sha256_file(&kept) == WHEEL_SHA256 {
        return kept;
    }
    let dest = staging.join("download");
    fs::create_dir_all(&dest).unwrap();
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "manylinux_2_35_x86_64",
            "--disable-pip-version-check",
            &format!("mlx-cpu=={MLX_VERSION}"),
            "-d",
        ])
        .arg(&dest)
        // Keep pip's progress output out of the build script's stdout.
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "could not run `python3 -m pip download` to fetch mlx-cpu=={MLX_VERSION}: {e}. \
                 Install python3 with pip, or set MLX_DIR to a local MLX install, or \
                 RLX_MLX_WHEEL to a downloaded {WHEEL_FILE}."
            )
        });
    if !status.success() {
        panic!(
            "`python3 -m pip download mlx-cpu=={MLX_VERSION}` failed ({status}). Set MLX_DIR to a \
             local MLX install or RLX_MLX_WHEEL to a downloaded {WHEEL_FILE}."
        );
    }
    let file = dest.join(WHEEL_FILE);
    if !file.exists() {
        let got: Vec<_> = fs::read_dir(&dest)
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        panic!("pip did not download {WHEEL_FILE} (got {got:?})");
    }
    file
}

fn sha256_file(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut f =
        fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn unzip(wheel: &Path, dest: &Path) {
    fs::create_dir_all(dest).unwrap();
    let status = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(wheel)
        .arg(dest)
        .status()
        .unwrap_or_else(|e| panic!("could not run `python3 -m zipfile`: {e}"));
    if !status.success() {
        panic!(
            "`python3 -m zipfile -e {} {}` failed ({status})",
            wheel.display(),
            dest.display()
        );
    }
}
