//! Rules the source keeps, checked on the source itself.
//!
//! - No `as i32` in the MLX plugin's lowerings (`plugin-mlx/src/lower/`): a
//!   size, index or axis becomes MLX's `int32` only through the checked
//!   `I32::i32` (`plugin-mlx/src/lower/mod.rs`), after the graph's own
//!   integers were bounded once (`plugin-mlx/src/bounds.rs`). An `as` cast
//!   past the range is a wrapped value: a wrong shape or a wrong answer
//!   without an error.
//! - rlx-ir keeps its overflow checks in the release profile: its shape
//!   rules are the plugin's check of a node's attributes, and one that
//!   wrapped instead of panicking would pass a node the debug build, the
//!   one the tests run, refuses.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn lowerings_never_cast_to_i32_with_as() {
    let lower = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-mlx/src/lower");
    let mut files = Vec::new();
    rust_files(&lower, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files under {}",
        files.len(),
        lower.display()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(" as i32") {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "`as i32` in the lowerings (use `I32::i32`, which cannot wrap):\n{}",
        found.join("\n")
    );
}

#[test]
fn rlx_ir_keeps_overflow_checks_in_release() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    let checks = manifest
        .get("profile")
        .and_then(|p| p.get("release"))
        .and_then(|r| r.get("package"))
        .and_then(|p| p.get("rlx-ir"))
        .and_then(|p| p.get("overflow-checks"))
        .and_then(toml::Value::as_bool);
    assert_eq!(
        checks,
        Some(true),
        "{}: [profile.release.package.rlx-ir] overflow-checks = true is gone",
        path.display()
    );
}
