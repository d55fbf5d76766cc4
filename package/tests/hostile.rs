//! Archives that must be refused, each with an error naming what is wrong,
//! and never with anything left at the destination.

mod common;

use common::{
    compress, good_manifest, good_start, input, manifest, refused, refused_with, sample_plugin,
    small_limits, tempdir, Crafted, GOOD_FILE,
};
use rlx_plugin_package::{pack, unpack_verified_bytes, FileEntry, Limits};
use std::fs;
use tar::EntryType;

#[test]
fn the_crafted_baseline_is_accepted() {
    // So every refusal below is for the one thing each test changes.
    let archive = good_start().file(GOOD_FILE.0, GOOD_FILE.1).xz();
    let tmp = tempdir();
    let dest = tmp.path().join("dest");
    let got = unpack_verified_bytes(&archive, &dest, &small_limits()).unwrap();
    assert_eq!(got, good_manifest());
    assert_eq!(fs::read(dest.join(GOOD_FILE.0)).unwrap(), GOOD_FILE.1);
}

#[test]
fn truncated() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    let (archive, _) = pack(&input(&dir), &tmp.path().join("out")).unwrap();
    let bytes = fs::read(archive).unwrap();
    refused(&bytes[..bytes.len() / 2], "truncated");
    // Cut inside the xz footer: every tar byte is there, the stream's end is not.
    refused(&bytes[..bytes.len() - 4], "truncated");
}

#[test]
fn corrupt_and_trailing_bytes() {
    let good = good_start().file(GOOD_FILE.0, GOOD_FILE.1).xz();
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x55;
    refused(&flipped, "corrupt");
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"extra");
    refused(&trailing, "corrupt");
    refused(b"not xz at all", "corrupt");
    refused(b"", "truncated");
}

#[test]
fn tampered_file() {
    let archive = good_start().file(GOOD_FILE.0, b"HELLO").xz();
    let err = refused(&archive, "mlx/a.txt: sha256 mismatch (manifest ");
    assert!(err.contains(&format!("archive {})", common::sha256_hex(b"HELLO"))));
}

#[test]
fn size_differs_from_the_manifest() {
    let archive = good_start().file(GOOD_FILE.0, b"hello!").xz();
    refused(&archive, "mlx/a.txt: size mismatch");
}

#[test]
fn dot_dot_paths() {
    for name in [&b"mlx/../evil"[..], b"../evil", b"mlx/sub/../../evil"] {
        let archive = good_start()
            .raw(EntryType::Regular, name, b"", 4, b"evil")
            .xz();
        refused(&archive, "`..`");
    }
}

#[test]
fn dot_and_empty_components() {
    let archive = good_start()
        .raw(EntryType::Regular, b"mlx/./a.txt", b"", 5, b"hello")
        .xz();
    refused(&archive, "`.`");
    let archive = good_start()
        .raw(EntryType::Regular, b"mlx//a.txt", b"", 5, b"hello")
        .xz();
    refused(&archive, "empty path component");
}

#[test]
fn absolute_path() {
    let archive = good_start()
        .raw(EntryType::Regular, b"/tmp/evil", b"", 4, b"evil")
        .xz();
    refused(&archive, "absolute path");
}

#[test]
fn outside_the_plugin_directory() {
    let archive = good_start().file("other.txt", b"x").xz();
    refused(&archive, "other.txt: not under mlx/");
}

#[test]
fn symlinks_that_leave_the_directory() {
    for target in ["../../etc/passwd", "/etc/passwd"] {
        // Not in the manifest.
        let archive = good_start()
            .file(GOOD_FILE.0, GOOD_FILE.1)
            .symlink("mlx/escape", target)
            .xz();
        refused(&archive, "mlx/escape: not in the manifest");
        // In the manifest too: its check refuses the target.
        let listed = manifest(&[GOOD_FILE], &[("mlx/escape", target)]);
        let archive = Crafted::new()
            .manifest(&listed)
            .dir("mlx")
            .file(GOOD_FILE.0, GOOD_FILE.1)
            .symlink("mlx/escape", target)
            .xz();
        refused(&archive, "mlx/escape: symlink target");
    }
}

#[test]
fn symlink_target_differs_from_the_manifest() {
    let listed = manifest(&[GOOD_FILE], &[("mlx/link", "a.txt")]);
    let archive = Crafted::new()
        .manifest(&listed)
        .dir("mlx")
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .symlink("mlx/link", "../../../etc/passwd")
        .xz();
    refused(
        &archive,
        "mlx/link: symlink to \"../../../etc/passwd\" in the archive",
    );
}

#[test]
fn a_path_through_a_symlink() {
    // `mlx/dir -> .` is inside, but nothing may be written through it.
    let listed = manifest(&[GOOD_FILE, ("mlx/dir/x", b"x")], &[("mlx/dir", ".")]);
    let archive = Crafted::new()
        .manifest(&listed)
        .dir("mlx")
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .symlink("mlx/dir", ".")
        .file("mlx/dir/x", b"x")
        .xz();
    refused(
        &archive,
        "mlx/dir/x: its directory mlx/dir is not in the archive",
    );
}

#[test]
fn a_directory_missing_before_its_contents() {
    let listed = manifest(&[("mlx/sub/a", b"a")], &[]);
    let archive = Crafted::new()
        .manifest(&listed)
        .dir("mlx")
        .file("mlx/sub/a", b"a")
        .xz();
    refused(&archive, "its directory mlx/sub is not in the archive");
}

#[test]
fn hard_link() {
    let archive = good_start()
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .raw(EntryType::Link, b"mlx/hard", b"mlx/a.txt", 0, b"")
        .xz();
    refused(&archive, "mlx/hard: a hard link");
}

#[test]
fn devices_and_fifos() {
    for (entry_type, words) in [
        (EntryType::Char, "mlx/dev: a character device"),
        (EntryType::Block, "mlx/dev: a block device"),
        (EntryType::Fifo, "mlx/dev: a fifo"),
        (EntryType::XHeader, "a pax extended header"),
        (EntryType::GNUSparse, "a sparse file"),
        (EntryType::new(b'Z'), "unsupported type 'Z'"),
    ] {
        let archive = good_start()
            .file(GOOD_FILE.0, GOOD_FILE.1)
            .raw(entry_type, b"mlx/dev", b"", 0, b"")
            .xz();
        refused(&archive, words);
    }
}

#[test]
fn manifest_not_first() {
    let archive = Crafted::new()
        .dir("mlx")
        .manifest(&good_manifest())
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .xz();
    refused(&archive, "mlx: the first entry must be manifest.json");
    let archive = Crafted::new().xz();
    refused(&archive, "manifest.json must be its first entry");
}

#[test]
fn malformed_manifests() {
    let archive = Crafted::new()
        .file("manifest.json", b"{ not json")
        .dir("mlx")
        .xz();
    refused(&archive, "manifest.json:");

    let mut wrong_format = good_manifest();
    wrong_format.format = 2;
    let archive = Crafted::new().manifest(&wrong_format).dir("mlx").xz();
    refused(&archive, "format 2 is not supported");

    let mut setuid = good_manifest();
    setuid.files[0].mode = 0o4755;
    let archive = Crafted::new()
        .manifest(&setuid)
        .dir("mlx")
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .xz();
    refused(&archive, "mode 4755");

    let mut escaping = good_manifest();
    escaping.files[0].path = "mlx/../a.txt".into();
    let archive = Crafted::new().manifest(&escaping).dir("mlx").xz();
    refused(&archive, "`..`");

    let mut twice = good_manifest();
    twice.files.push(twice.files[0].clone());
    let archive = Crafted::new().manifest(&twice).dir("mlx").xz();
    refused(&archive, "listed twice");

    let mut bad_name = good_manifest();
    bad_name.name = "..".into();
    let archive = Crafted::new().manifest(&bad_name).xz();
    refused(&archive, "bad plugin name");
}

#[test]
fn file_not_in_the_manifest() {
    let archive = good_start()
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .file("mlx/extra.so", b"smuggled")
        .xz();
    refused(&archive, "mlx/extra.so: not in the manifest");
}

#[test]
fn manifest_file_missing() {
    let archive = good_start().xz();
    refused(
        &archive,
        "mlx/a.txt: in the manifest but missing from the archive",
    );
}

#[test]
fn duplicate_entry() {
    let archive = good_start()
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .xz();
    refused(&archive, "mlx/a.txt: appears twice");
    let archive = good_start().dir("mlx").xz();
    refused(&archive, "mlx: appears twice");
}

#[test]
fn size_bombs() {
    let limits = small_limits();
    // Content over the limit, honestly listed in the manifest.
    let big = vec![0u8; 128 * 1024];
    let listed = manifest(&[("mlx/big", &big)], &[]);
    let archive = Crafted::new()
        .manifest(&listed)
        .dir("mlx")
        .file("mlx/big", &big)
        .xz();
    assert!(archive.len() < 4096, "zeros compress: a real bomb");
    refused_with(&archive, &limits, "more than the limit of 65536 bytes");

    // A header claiming far more than the limit (and than the data there).
    let archive = good_start()
        .raw(EntryType::Regular, b"mlx/a.txt", b"", 1 << 40, b"hello")
        .xz();
    refused_with(
        &archive,
        &limits,
        "mlx/a.txt: 1099511627776 bytes would pass the limit",
    );

    // A manifest.json claiming more than its bound.
    let archive = Crafted::new()
        .raw(EntryType::Regular, b"manifest.json", b"", 1 << 30, b"{}")
        .xz();
    refused(
        &archive,
        "manifest.json: 1073741824 bytes, more than the limit",
    );

    // A GNU long-name record claiming a huge name.
    let archive = good_start()
        .raw(EntryType::GNULongName, b"././@LongLink", b"", 1 << 30, b"x")
        .xz();
    refused(&archive, "long-name record of 1073741824 bytes");
}

#[test]
fn too_many_entries() {
    let mut names = Vec::new();
    let mut crafted = Crafted::new().manifest(&good_manifest()).dir("mlx");
    for i in 0..70 {
        names.push(format!("mlx/d{i}"));
        crafted = crafted.dir(names.last().unwrap());
    }
    let archive = crafted.file(GOOD_FILE.0, GOOD_FILE.1).xz();
    refused_with(&archive, &small_limits(), "more than 64 entries");
    // The same archive is fine under the default limits.
    let tmp = tempdir();
    unpack_verified_bytes(&archive, &tmp.path().join("dest"), &Limits::default()).unwrap();
}

#[test]
fn long_names_are_read() {
    // GNU long names (paths over 100 bytes) round-trip; pack writes them too.
    let long = format!("mlx/{}", "n".repeat(150));
    let entry = FileEntry {
        path: long.clone(),
        size: 1,
        sha256: common::sha256_hex(b"x"),
        mode: 0o755,
        link: None,
    };
    let mut listed = good_manifest();
    listed.files.insert(0, entry);
    listed.files.sort_by(|a, b| a.path.cmp(&b.path));
    let archive = Crafted::new()
        .manifest(&listed)
        .dir("mlx")
        .file(GOOD_FILE.0, GOOD_FILE.1)
        .file(&long, b"x")
        .xz();
    let tmp = tempdir();
    let dest = tmp.path().join("dest");
    unpack_verified_bytes(&archive, &dest, &small_limits()).unwrap();
    assert_eq!(fs::read(dest.join(&long)).unwrap(), b"x");
}

#[test]
fn uncompressed_tar_is_refused() {
    let tar = good_start().file(GOOD_FILE.0, GOOD_FILE.1).tar();
    refused(&tar, "corrupt");
    // And the helper's compression is what makes it acceptable.
    let tmp = tempdir();
    unpack_verified_bytes(&compress(&tar), &tmp.path().join("d"), &small_limits()).unwrap();
}
