//! Fetching a pinned wheel from PyPI for a build script.
//!
//! Shared by `shim/build.rs` (the `mlx-cpu` wheel it compiles and links
//! against) and `plugin-mlx/build.rs` (the GPU wheels it lays out as extra
//! plugin directories); each includes this file with `#[path]`.
//!
//! A wheel is fetched with `python3 -m pip download --no-deps
//! --only-binary=:all: --platform <tag> <name>==<version>`, checked against
//! its pinned sha256 and unpacked with `python3 -m zipfile` into
//! `<cache>/wheel`, where a marker file holding the sha256 makes later
//! builds skip all of this. The verified wheel file is kept in
//! `<cache>/download` so that the unpacked copy can be rebuilt offline, and
//! an environment variable (`Wheel::file_env`) may name an already
//! downloaded copy (verified the same way).

#![allow(dead_code)] // each build script uses its own subset

use std::env;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A wheel pinned by name, version, file name and sha256.
pub struct Wheel {
    /// The distribution name as pip knows it (`mlx-cpu`, `mlx-cuda-13`).
    pub name: &'static str,
    pub version: &'static str,
    /// The exact file pip downloads for `platform`.
    pub file: &'static str,
    pub sha256: &'static str,
    /// The `--platform` tag handed to pip (`manylinux_2_35_x86_64`).
    pub platform: &'static str,
    /// Paths (relative to the unpacked root) that a complete unpack holds.
    pub required: &'static [&'static str],
    /// Environment variable that may name a downloaded copy of `file`.
    pub file_env: &'static str,
    /// Appended to download failure messages: another way out (a sentence).
    pub hint: &'static str,
}

const MARKER: &str = ".rlx-mlx-verified";

/// The cache directory for `wheel`: `$<cache_env>` when set, else
/// `$HOME/.cache/rlx/<name>-<version>` (with `-aarch64` for a Linux arm64
/// wheel, whose name is the x86-64 one's), else `<OUT_DIR>/<no_home>`.
pub fn cache_dir(wheel: &Wheel, cache_env: &str, no_home: &str) -> PathBuf {
    let arch = if wheel.platform.starts_with("manylinux") && wheel.platform.ends_with("_aarch64") {
        "-aarch64"
    } else {
        ""
    };
    match env::var_os(cache_env).filter(|v| !v.is_empty()) {
        Some(c) => PathBuf::from(c),
        None => match env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home)
                .join(".cache")
                .join("rlx")
                .join(format!("{}-{}{arch}", wheel.name, wheel.version)),
            None => PathBuf::from(env::var("OUT_DIR").unwrap()).join(no_home),
        },
    }
}

/// Returns the unpacked wheel root (`<cache>/wheel`), fetching, verifying and
/// unpacking the wheel first if the cache does not hold a verified copy.
pub fn fetch(wheel: &Wheel, cache: &Path) -> PathBuf {
    let wheel_root = cache.join("wheel");
    if is_complete(wheel, &wheel_root) {
        return wheel_root;
    }
    fs::create_dir_all(cache).unwrap_or_else(|e| {
        panic!(
            "cannot create the {} cache dir {}: {e}",
            wheel.name,
            cache.display()
        )
    });

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

    let wheel_file = obtain_file(wheel, cache, &staging);
    let actual = sha256_file(&wheel_file);
    if actual != wheel.sha256 {
        let _ = fs::remove_dir_all(&staging);
        panic!(
            "sha256 mismatch for {}: expected {}, actual {actual}",
            wheel_file.display(),
            wheel.sha256
        );
    }

    // Keep the verified wheel file in <cache>/download for offline rebuilds.
    let download = cache.join("download");
    let _ = fs::create_dir_all(&download);
    let kept = download.join(wheel.file);
    if wheel_file != kept && !kept.exists() {
        let tmp = download.join(format!("{}.tmp-{}", wheel.file, std::process::id()));
        if fs::copy(&wheel_file, &tmp).is_ok() {
            let _ = fs::rename(&tmp, &kept);
        }
        let _ = fs::remove_file(&tmp);
    }

    let unpacked = staging.join("wheel");
    unzip(&wheel_file, &unpacked);
    for needed in wheel.required {
        if !unpacked.join(needed).exists() {
            panic!(
                "unpacked {} wheel at {} lacks {needed}",
                wheel.name,
                unpacked.display()
            );
        }
    }
    fs::write(unpacked.join(MARKER), format!("{}\n", wheel.sha256)).unwrap();

    if wheel_root.exists() && !is_complete(wheel, &wheel_root) {
        // A half-finished copy from an interrupted build.
        let _ = fs::remove_dir_all(&wheel_root);
    }
    if fs::rename(&unpacked, &wheel_root).is_err() && !is_complete(wheel, &wheel_root) {
        panic!(
            "could not move the unpacked {} wheel into {}",
            wheel.name,
            wheel_root.display()
        );
    }
    let _ = fs::remove_dir_all(&staging);
    wheel_root
}

fn is_complete(wheel: &Wheel, wheel_root: &Path) -> bool {
    fs::read_to_string(wheel_root.join(MARKER))
        .map(|s| s.trim() == wheel.sha256)
        .unwrap_or(false)
        && wheel.required.iter().all(|p| wheel_root.join(p).exists())
}

/// Finds or downloads the wheel file. Preference: `$<file_env>`, a copy
/// already in `<cache>/download`, then `pip download` into the staging dir.
fn obtain_file(wheel: &Wheel, cache: &Path, staging: &Path) -> PathBuf {
    if let Some(w) = env::var_os(wheel.file_env).filter(|v| !v.is_empty()) {
        return PathBuf::from(w);
    }
    let kept = cache.join("download").join(wheel.file);
    if kept.exists() && sha256_file(&kept) == wheel.sha256 {
        return kept;
    }
    let requirement = format!("{}=={}", wheel.name, wheel.version);
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
            wheel.platform,
            "--disable-pip-version-check",
            &requirement,
            "-d",
        ])
        .arg(&dest)
        // Keep pip's progress output out of the build script's stdout.
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "could not run `python3 -m pip download` to fetch {requirement}: {e}. \
                 Install python3 with pip, or set {} to a downloaded {}. {}",
                wheel.file_env, wheel.file, wheel.hint
            )
        });
    if !status.success() {
        panic!(
            "`python3 -m pip download {requirement}` failed ({status}). Set {} to a \
             downloaded {}. {}",
            wheel.file_env, wheel.file, wheel.hint
        );
    }
    let file = dest.join(wheel.file);
    if !file.exists() {
        let got: Vec<_> = fs::read_dir(&dest)
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        panic!("pip did not download {} (got {got:?})", wheel.file);
    }
    file
}

pub fn sha256_file(path: &Path) -> String {
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
