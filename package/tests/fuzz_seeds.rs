//! The seed corpus of the `archive` fuzz target (`fuzz/corpus/archive/`):
//! small valid archives made by `pack` and small hostile ones, each under
//! 4 KiB. Always checked here (valid ones unpack, hostile ones are refused);
//! written to the corpus only with `RLX_WRITE_FUZZ_SEEDS=1`:
//! `RLX_WRITE_FUZZ_SEEDS=1 cargo test -p rlx-plugin-package --test fuzz_seeds`.

mod common;

use common::{good_manifest, good_start, manifest, tempdir, write, Crafted, GOOD_FILE};
use rlx_plugin_package::{pack, unpack_verified_bytes, Limits, PackInput};
use std::fs;
use std::path::Path;
use tar::EntryType;

/// The limits the fuzz target runs under.
fn fuzz_limits() -> Limits {
    Limits {
        max_total_bytes: 1 << 20,
        max_entries: 256,
    }
}

/// A tiny plugin directory packed by `pack`, as the fuzzer's valid start.
fn packed(
    root: &Path,
    name: &str,
    files: &[(&str, &[u8], u32)],
    links: &[(&str, &str)],
) -> Vec<u8> {
    let dir = root.join(name);
    fs::create_dir_all(&dir).unwrap();
    for (rel, contents, mode) in files {
        write(&dir, rel, contents, *mode);
    }
    for (rel, target) in links {
        std::os::unix::fs::symlink(target, dir.join(rel)).unwrap();
    }
    let input = PackInput {
        dir,
        name: name.into(),
        version: "0.1.0".into(),
        abi_version: "1.10".into(),
        platform: "linux-x86_64".into(),
        mlx_version: "0.32.4".into(),
        mlx_backend: "cpu".into(),
        exclude: Vec::new(),
    };
    let (path, _) = pack(&input, &root.join(format!("out-{name}"))).unwrap();
    fs::read(path).unwrap()
}

/// (file name, bytes, whether it must unpack).
fn seeds(root: &Path) -> Vec<(&'static str, Vec<u8>, bool)> {
    let link_target = [("lib/libmlx.so", "libmlx.so.0")];
    vec![
        (
            "valid-one-file.tar.xz",
            packed(
                root,
                "mlx",
                &[("plugin.toml", b"abi = \"1.10\"\n", 0o644)],
                &[],
            ),
            true,
        ),
        (
            "valid-dirs-exec-link.tar.xz",
            packed(
                root,
                "mlx-cuda",
                &[
                    ("librlx_mlx.so", b"\x7fELF", 0o755),
                    ("lib/libmlx.so.0", b"mlx", 0o644),
                ],
                &link_target,
            ),
            true,
        ),
        ("valid-empty.tar.xz", packed(root, "empty", &[], &[]), true),
        (
            "hostile-dotdot.tar.xz",
            good_start()
                .file(GOOD_FILE.0, GOOD_FILE.1)
                .raw(EntryType::Regular, b"mlx/../evil", b"", 4, b"evil")
                .xz(),
            false,
        ),
        (
            "hostile-symlink-escape.tar.xz",
            Crafted::new()
                .manifest(&manifest(&[GOOD_FILE], &[("mlx/l", "a.txt")]))
                .dir("mlx")
                .file(GOOD_FILE.0, GOOD_FILE.1)
                .symlink("mlx/l", "../../etc/passwd")
                .xz(),
            false,
        ),
        (
            "hostile-tampered.tar.xz",
            good_start().file(GOOD_FILE.0, b"HELLO").xz(),
            false,
        ),
        (
            "hostile-hardlink.tar.xz",
            good_start()
                .file(GOOD_FILE.0, GOOD_FILE.1)
                .raw(EntryType::Link, b"mlx/h", b"mlx/a.txt", 0, b"")
                .xz(),
            false,
        ),
        (
            "hostile-size-claim.tar.xz",
            good_start()
                .raw(EntryType::Regular, b"mlx/a.txt", b"", 1 << 40, b"hello")
                .xz(),
            false,
        ),
        (
            "hostile-manifest-not-first.tar.xz",
            Crafted::new().dir("mlx").manifest(&good_manifest()).xz(),
            false,
        ),
    ]
}

#[test]
fn seeds_are_small_and_behave() {
    let tmp = tempdir();
    let seeds = seeds(tmp.path());
    for (name, bytes, valid) in &seeds {
        assert!(bytes.len() < 4096, "{name}: {} bytes", bytes.len());
        let dest = tmp.path().join("dest").join(name);
        let result = unpack_verified_bytes(bytes, &dest, &fuzz_limits());
        assert_eq!(result.is_ok(), *valid, "{name}: {result:?}");
    }
    if std::env::var_os("RLX_WRITE_FUZZ_SEEDS").is_some_and(|v| v == "1") {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/archive");
        fs::create_dir_all(&corpus).unwrap();
        for (name, bytes, _) in &seeds {
            fs::write(corpus.join(name), bytes).unwrap();
        }
    }
}
