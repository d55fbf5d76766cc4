//! Packing is reproducible: the same plugin directory gives the same bytes,
//! whatever its files' times and creation order.

mod common;

use common::{input, sample_plugin, sample_plugin_in_order, tempdir, SAMPLE_FILES};
use rlx_plugin_package::{archive_name, pack, ARCHIVE_STEM};
use std::fs::{self, File};
use std::time::{Duration, SystemTime};

#[test]
fn packing_twice_gives_identical_archives() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    let (a, manifest_a) = pack(&input(&dir), &tmp.path().join("out1")).unwrap();
    let (b, manifest_b) = pack(&input(&dir), &tmp.path().join("out2")).unwrap();
    assert_eq!(
        a.file_name().unwrap().to_str().unwrap(),
        archive_name(ARCHIVE_STEM, "0.1.0", "linux-x86_64")
    );
    assert_eq!(
        a.file_name(),
        Some("rlx-mlx-0.1.0-linux-x86_64.tar.xz".as_ref())
    );
    assert_eq!(manifest_a, manifest_b);
    assert_eq!(fs::read(a).unwrap(), fs::read(b).unwrap());
}

#[test]
fn times_and_creation_order_do_not_change_the_archive() {
    let tmp = tempdir();
    let first = sample_plugin(tmp.path());
    let (a, _) = pack(&input(&first), &tmp.path().join("out1")).unwrap();

    // The same content, created in the opposite order a while later, with
    // every file's mtime moved.
    std::thread::sleep(Duration::from_millis(20));
    let second = tmp.path().join("again/mlx");
    let reversed: Vec<usize> = (0..SAMPLE_FILES.len()).rev().collect();
    sample_plugin_in_order(&second, &reversed);
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_234_567_890);
    for (rel, _, _) in SAMPLE_FILES {
        File::options()
            .write(true)
            .open(second.join(rel))
            .unwrap()
            .set_modified(when)
            .unwrap();
    }
    let (b, _) = pack(&input(&second), &tmp.path().join("out2")).unwrap();
    assert_eq!(fs::read(a).unwrap(), fs::read(b).unwrap());
}

#[test]
fn headers_carry_no_machine_state() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    let (archive, _) = pack(&input(&dir), &tmp.path().join("out")).unwrap();
    let mut tar = tar::Archive::new(xz2::read::XzDecoder::new(File::open(archive).unwrap()));
    let mut paths = Vec::new();
    for entry in tar.entries().unwrap() {
        let entry = entry.unwrap();
        let header = entry.header();
        assert!(header.as_gnu().is_some(), "GNU headers throughout");
        assert_eq!(header.mtime().unwrap(), 0);
        assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (0, 0));
        assert_eq!(header.username_bytes(), Some(&b""[..]));
        assert_eq!(header.groupname_bytes(), Some(&b""[..]));
        let mode = header.mode().unwrap();
        let expected: &[u32] = match header.entry_type() {
            tar::EntryType::Directory => &[0o755],
            tar::EntryType::Regular => &[0o755, 0o644],
            tar::EntryType::Symlink => &[0o777],
            other => panic!("unexpected entry type {other:?}"),
        };
        assert!(expected.contains(&mode), "mode {mode:o}");
        paths.push(String::from_utf8(entry.path_bytes().into_owned()).unwrap());
    }
    assert_eq!(
        paths,
        [
            "manifest.json",
            "mlx",
            "mlx/empty",
            "mlx/lib",
            "mlx/lib/libmlx.so",
            "mlx/lib/libmlx.so.0.32",
            "mlx/librlx_mlx.so",
            "mlx/plugin.toml",
            "mlx/share",
            "mlx/share/kernels",
            "mlx/share/kernels/add.metal",
        ]
    );
}
