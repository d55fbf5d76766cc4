//! The manifest's op list (`src/manifest.rs`), read at build time from the
//! lowering table's source: every `row!(Kind, …)` under `src/lower/` and
//! `src/custom/`. The table itself is built in code at load, and the
//! manifest must be bytes in the library before any code runs, so the op
//! kinds are taken from the text that declares them.
//! `tests/tests/mlx_manifest.rs` compares the result with the loaded
//! table, so a row written some other way fails a test, not silently.

use std::path::{Path, PathBuf};

/// Write `$OUT_DIR/mlx_ops.rs`: `const OPS: &[&str]`, each kind once,
/// sorted (the table's own order is known only when it is built).
pub fn write(src: &Path, out_dir: &Path) {
    let mut files = Vec::new();
    for dir in ["lower", "custom"] {
        let dir = src.join(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        rust_files(&dir, &mut files);
    }
    files.sort();
    let mut ops: Vec<String> = Vec::new();
    for f in &files {
        let text =
            std::fs::read_to_string(f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
        for kind in row_kinds(&text) {
            if !ops.contains(&kind) {
                ops.push(kind);
            }
        }
    }
    let mut code = String::from("pub const OPS: &[&str] = &[\n");
    for op in &ops {
        code.push_str(&format!("    {op:?},\n"));
    }
    code.push_str("];\n");
    let path = out_dir.join("mlx_ops.rs");
    std::fs::write(&path, code).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The first argument of each `row!(` outside comments.
fn row_kinds(text: &str) -> Vec<String> {
    let mut kinds = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("row!(") {
            rest = &rest[at + "row!(".len()..];
            // The kind is on this line or, formatted, the next one.
            let arg = if rest.trim().is_empty() {
                text.lines().nth(i + 1).unwrap_or("")
            } else {
                rest
            };
            let kind: String = arg
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !kind.is_empty() {
                kinds.push(kind);
            }
        }
    }
    kinds
}
