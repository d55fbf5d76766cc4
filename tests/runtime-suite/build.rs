//! Finds rlx-runtime's own integration tests in the package Cargo.lock
//! resolves (its source directory, from `cargo metadata`) and writes
//! `$OUT_DIR/suite.rs`: one `#[path]` module per test file that exercises
//! the MLX device, compiled in place, unmodified. Also writes
//! `$OUT_DIR/files.txt`, one line per file: its name, how many `#[test]`s
//! it has, how many of them only compile on macOS, and why, for the
//! report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rerun-if-changed=build.rs");
    let lock = manifest.join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let (version, dir) = rlx_runtime_source(&manifest);
    let tests = dir.join("tests");
    println!("cargo:rerun-if-changed={}", tests.display());

    let mut names: Vec<String> = std::fs::read_dir(&tests)
        .unwrap_or_else(|e| panic!("{}: {e}", tests.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();

    let mut suite = String::new();
    let mut files = String::new();
    writeln!(
        suite,
        "// rlx-runtime {version}'s test files that exercise Device::Mlx, from {}",
        tests.display()
    )
    .unwrap();
    for name in names {
        let path = tests.join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&path).unwrap();
        if !exercises_mlx(&text) {
            continue;
        }
        let scan = scan(&text);
        writeln!(
            files,
            "{name}\t{}\t{}\t{}",
            scan.tests, scan.macos_only, scan.why
        )
        .unwrap();
        if scan.has_main {
            // A file with its own `main` is a harness-less test binary:
            // it cannot be a module of a libtest binary.
            continue;
        }
        writeln!(
            suite,
            "#[path = {:?}]\nmod {name};",
            path.display().to_string()
        )
        .unwrap();
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(out.join("suite.rs"), suite).unwrap();
    std::fs::write(out.join("files.txt"), files).unwrap();
    write_fft_algo_bench(&dir, &out);
    println!("cargo:rustc-env=RLX_RUNTIME_SUITE_VERSION={version}");
    println!("cargo:rustc-env=RLX_RUNTIME_SUITE_DIR={}", tests.display());
}

/// A file that names the MLX device or loops over every available device
/// (the plugin is one of them once installed).
fn exercises_mlx(text: &str) -> bool {
    ["Device::Mlx", "available_devices(", "registered_devices("]
        .iter()
        .any(|k| text.contains(k))
}

struct Scan {
    tests: usize,
    /// `#[test]`s under a `target_os = "macos"` gate (their own or the
    /// file's).
    macos_only: usize,
    has_main: bool,
    why: String,
}

/// What a reader of the report needs about one file, from its text: its
/// `#[test]` count, and those only a macOS build compiles (a file-level
/// `#![cfg(...target_os = "macos"...)]`, or the test's own attributes).
fn scan(text: &str) -> Scan {
    let file_gate = text
        .lines()
        .filter(|l| l.trim_start().starts_with("#![cfg("))
        .find(|l| l.contains("target_os = \"macos\""))
        .map(|l| l.trim().to_owned());
    let lines: Vec<&str> = text.lines().collect();
    let (mut tests, mut macos_only) = (0, 0);
    for (i, l) in lines.iter().enumerate() {
        if l.trim() != "#[test]" {
            continue;
        }
        tests += 1;
        // The attributes stacked around this one, up to the `fn` line.
        let mut attrs = Vec::new();
        let mut j = i;
        while j > 0 && lines[j - 1].trim_start().starts_with("#[") {
            j -= 1;
            attrs.push(lines[j]);
        }
        let mut k = i + 1;
        while k < lines.len() && lines[k].trim_start().starts_with("#[") {
            attrs.push(lines[k]);
            k += 1;
        }
        if file_gate.is_some() || attrs.iter().any(|a| a.contains("target_os = \"macos\"")) {
            macos_only += 1;
        }
    }
    let why = match (&file_gate, macos_only) {
        (Some(g), _) => format!("the whole file is gated on macOS: {g}"),
        (None, 0) => String::new(),
        (None, n) => format!("{n} test(s) carry a target_os = \"macos\" gate"),
    };
    Scan {
        tests,
        macos_only,
        has_main: text.contains("\nfn main()"),
        why,
    }
}

/// The version and source directory of the rlx-runtime package this
/// workspace resolves, from `cargo metadata` (so a vendored or patched
/// source is found too).
fn rlx_runtime_source(manifest: &Path) -> (String, PathBuf) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(manifest.join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let pkg = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rlx-runtime")
        .expect("rlx-runtime among the resolved packages");
    let path = PathBuf::from(pkg["manifest_path"].as_str().unwrap());
    (
        pkg["version"].as_str().unwrap().to_owned(),
        path.parent().unwrap().to_path_buf(),
    )
}

/// `$OUT_DIR/fft_algo_bench.rs`: rlx-runtime's `examples/fft_algo_bench.rs`
/// as a module whose `run` calls its `main` (for `examples/
/// fft_algo_bench.rs`, which installs the plugin first). Its code is
/// unchanged; its inner doc comment becomes a plain one (an inner
/// attribute cannot stand where the text is included).
fn write_fft_algo_bench(dir: &Path, out: &Path) {
    let path = dir.join("examples/fft_algo_bench.rs");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let body: String = text
        .lines()
        .map(|l| match l.strip_prefix("//!") {
            Some(rest) => format!("//{rest}\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let module = format!(
        "// rlx-runtime's {}\nmod example {{\n{body}\npub fn run() {{\n    main()\n}}\n}}\n",
        path.display()
    );
    std::fs::write(out.join("fft_algo_bench.rs"), module).unwrap();
}
