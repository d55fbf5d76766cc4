//! The graphs of `kernel_graphs` (every kernel with a portable path, every
//! branch of its loops) as `.rlxmodel` files in `tests/qemu/portable/`,
//! which `scripts/qemu-aarch64-check.sh` runs on the aarch64 plugin under
//! qemu against the CPU backend: there the portable loops are the only
//! ones, so they are judged against an independent implementation instead
//! of against the x86 loops (`portable_kernels.rs`). This test keeps the
//! files equal to the graphs: a missing, changed or extra file fails it,
//! and the files are rewritten (commit them).

// (How closely each must agree is for the x86 comparison.)
#[allow(dead_code)]
mod kernel_graphs;

use std::collections::BTreeSet;
use std::path::PathBuf;

#[test]
fn the_qemu_graphs_are_the_kernel_graphs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../qemu/portable");
    std::fs::create_dir_all(&dir).unwrap();
    let mut want = BTreeSet::new();
    let mut stale = Vec::new();
    for (graph, _) in kernel_graphs::cases() {
        let file = format!("{}.rlxmodel", graph.name);
        assert!(want.insert(file.clone()), "two cases named {}", graph.name);
        let text = rlx_ir::rlxmodel::to_text(&graph).unwrap();
        let path = dir.join(&file);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&path, text).unwrap();
            stale.push(file);
        }
    }
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if !want.contains(&name) {
            std::fs::remove_file(dir.join(&name)).unwrap();
            stale.push(format!("{name} (removed)"));
        }
    }
    assert!(
        stale.is_empty(),
        "tests/qemu/portable was out of date and has been rewritten (commit it): {stale:?}"
    );
}
