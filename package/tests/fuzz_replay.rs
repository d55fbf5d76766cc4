//! The `archive` fuzz target's committed inputs replayed as ordinary tests:
//! every file of `fuzz/corpus/archive/` (and `fuzz/regressions/archive/`, if
//! any) goes through `unpack_verified_bytes` under the fuzz target's limits,
//! and must keep its invariant: no panic; on Err nothing left at the
//! destination; on Ok exactly the manifest's files, as the manifest says.

use rlx_plugin_package::{unpack_verified_bytes, verify_tree, Limits};
use std::fs;
use std::path::{Path, PathBuf};

/// The committed inputs, in name order.
fn inputs() -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz.join(kind).join("archive");
        if kind == "regressions" && !dir.exists() {
            continue; // nothing found yet
        }
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            out.push(entry.unwrap().path());
        }
    }
    out.sort();
    out
}

#[test]
fn the_archive_corpus_keeps_the_invariant() {
    let inputs = inputs();
    assert!(inputs.len() >= 5, "{} inputs", inputs.len());
    let tmp = tempfile::tempdir().unwrap();
    let limits = Limits {
        max_total_bytes: 1 << 20,
        max_entries: 256,
    };
    let (mut accepted, mut refused) = (0, 0);
    for (i, path) in inputs.iter().enumerate() {
        let data = fs::read(path).unwrap();
        let dest = tmp.path().join(i.to_string());
        match unpack_verified_bytes(&data, &dest, &limits) {
            Ok(manifest) => {
                verify_tree(&dest, &manifest)
                    .unwrap_or_else(|e| panic!("{}: accepted but {e}", path.display()));
                accepted += 1;
            }
            Err(_) => {
                assert!(
                    fs::symlink_metadata(&dest).is_err(),
                    "{}: refused but left {} behind",
                    path.display(),
                    dest.display()
                );
                refused += 1;
            }
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}
