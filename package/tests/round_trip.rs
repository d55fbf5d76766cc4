//! What `pack` writes, `unpack_verified` gives back: the same contents,
//! normalised modes, the same symlinks and the same manifest. And what
//! `pack` refuses to write.

mod common;

use common::{input, sample_plugin, tempdir, write, SAMPLE_FILES, SAMPLE_LINKS};
use rlx_plugin_package::{
    pack, unpack_verified, verify_tree, Limits, PackageManifest, MANIFEST_NAME,
};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn unpacking_gives_back_what_was_packed() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    let (archive, manifest) = pack(&input(&dir), &tmp.path().join("out")).unwrap();
    let dest = tmp.path().join("installed");
    let unpacked = unpack_verified(&archive, &dest, &Limits::default()).unwrap();
    assert_eq!(unpacked, manifest);
    assert_eq!(
        PackageManifest::from_json(&fs::read(dest.join(MANIFEST_NAME)).unwrap()).unwrap(),
        manifest
    );

    for (rel, contents, source_mode) in SAMPLE_FILES {
        let got = dest.join("mlx").join(rel);
        if rel.starts_with("nvidia") {
            assert!(!got.exists(), "{rel} was excluded");
            continue;
        }
        assert_eq!(fs::read(&got).unwrap(), *contents, "{rel}");
        let expected = if source_mode & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        assert_eq!(mode(&got), expected, "{rel}");
    }
    for (rel, target) in SAMPLE_LINKS {
        let got = dest.join("mlx").join(rel);
        assert_eq!(fs::read_link(&got).unwrap(), Path::new(target));
        assert_eq!(
            fs::read(&got).unwrap(),
            b"pretend libmlx",
            "the link resolves"
        );
    }
    assert!(dest.join("mlx/empty").is_dir());
    assert_eq!(mode(&dest), 0o755);
    assert_eq!(mode(&dest.join("mlx/share/kernels")), 0o755);
    verify_tree(&dest, &manifest).unwrap();

    let entry = |p: &str| manifest.files.iter().find(|f| f.path == p).unwrap();
    assert_eq!(entry("mlx/librlx_mlx.so").mode, 0o755);
    assert_eq!(entry("mlx/plugin.toml").mode, 0o644);
    assert_eq!(
        entry("mlx/lib/libmlx.so").link.as_deref(),
        Some("libmlx.so.0.32")
    );
    assert!(manifest.files.iter().all(|f| f.path.starts_with("mlx/")));
    assert!(manifest
        .files
        .iter()
        .all(|f| !f.path.starts_with("mlx/nvidia")));
}

#[test]
fn verify_tree_notices_a_changed_file() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    let (archive, manifest) = pack(&input(&dir), &tmp.path().join("out")).unwrap();
    let dest = tmp.path().join("installed");
    unpack_verified(&archive, &dest, &Limits::default()).unwrap();
    write(&dest.join("mlx"), "plugin.toml", b"changed", 0o644);
    let err = verify_tree(&dest, &manifest).unwrap_err().to_string();
    assert!(err.contains("plugin.toml"), "{err}");
    fs::remove_file(dest.join("mlx/plugin.toml")).unwrap();
    let err = verify_tree(&dest, &manifest).unwrap_err().to_string();
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn unpacking_refuses_an_existing_destination_and_keeps_it() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    let (archive, _) = pack(&input(&dir), &tmp.path().join("out")).unwrap();
    let dest = tmp.path().join("installed");
    write(&dest, "keep.txt", b"mine", 0o644);
    let err = unpack_verified(&archive, &dest, &Limits::default()).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(fs::read(dest.join("keep.txt")).unwrap(), b"mine");
}

/// Packs `dir` expecting an error that names `expect`, and no archive left.
fn pack_fails(dir: &Path, out: &Path, expect: &str) {
    let err = pack(&input(dir), out).unwrap_err().to_string();
    assert!(err.contains(expect), "{err:?} does not name {expect:?}");
    let left: Vec<_> = fs::read_dir(out)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn pack_refuses_symlinks_that_leave_the_directory() {
    // An absolute one is a system link (below), not a link in the archive.
    for target in ["../../etc/passwd", "../../mlx/lib"] {
        let tmp = tempdir();
        let dir = sample_plugin(tmp.path());
        std::os::unix::fs::symlink(target, dir.join("lib/escape")).unwrap();
        pack_fails(&dir, &tmp.path().join("out"), "lib/escape");
    }
}

#[test]
fn pack_refuses_other_file_types() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    let _socket = std::os::unix::net::UnixListener::bind(dir.join("lib/control.sock")).unwrap();
    pack_fails(&dir, &tmp.path().join("out"), "control.sock");
}

#[test]
fn pack_refuses_bad_names() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    for (name, version, platform) in [
        ("../mlx", "0.1.0", "linux-x86_64"),
        ("mlx", "0.1.0/..", "linux-x86_64"),
        ("mlx", "0.1.0", "linux/x86_64"),
        ("", "0.1.0", "linux-x86_64"),
    ] {
        let mut bad = input(&dir);
        bad.name = name.into();
        bad.version = version.into();
        bad.platform = platform.into();
        assert!(
            pack(&bad, &tmp.path().join("out")).is_err(),
            "{name} {version} {platform}"
        );
    }
}

#[test]
fn an_inner_symlink_to_a_directory_is_kept() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    std::os::unix::fs::symlink("share/kernels", dir.join("kernels")).unwrap();
    let (archive, _) = pack(&input(&dir), &tmp.path().join("out")).unwrap();
    let dest = tmp.path().join("installed");
    unpack_verified(&archive, &dest, &Limits::default()).unwrap();
    assert_eq!(
        fs::read(dest.join("mlx/kernels/add.metal")).unwrap(),
        b"kernel void add() {}\n"
    );
}

/// An absolute symlink (the MLX CPU directory's `blas/optimized/` links to
/// the system OpenBLAS) is not packed: the manifest lists it as a system
/// link, and the installer makes it with `make_system_links`, dangling
/// where the machine lacks the target.
#[test]
fn absolute_links_travel_as_system_links_made_at_install() {
    let tmp = tempdir();
    let dir = sample_plugin(tmp.path());
    fs::create_dir_all(dir.join("blas/optimized")).unwrap();
    let target = "/usr/lib/no-such-dir/libopenblas.so.0";
    std::os::unix::fs::symlink(target, dir.join("blas/optimized/libblas.so.3")).unwrap();
    let (archive, manifest) = pack(&input(&dir), &tmp.path().join("out")).unwrap();
    assert_eq!(manifest.system_links.len(), 1);
    assert_eq!(
        manifest.system_links[0].path,
        "mlx/blas/optimized/libblas.so.3"
    );
    assert!(manifest.files.iter().all(|f| !f.path.contains("optimized")));
    let dest = tmp.path().join("installed");
    unpack_verified(&archive, &dest, &Limits::default()).unwrap();
    let link = dest.join("mlx/blas/optimized/libblas.so.3");
    assert!(fs::symlink_metadata(&link).is_err(), "unpacking made it");
    rlx_plugin_package::make_system_links(&dest, &manifest).unwrap();
    assert_eq!(fs::read_link(&link).unwrap(), Path::new(target));
    verify_tree(&dest, &manifest).unwrap();
    // Never over what is there.
    let again = rlx_plugin_package::make_system_links(&dest, &manifest).unwrap_err();
    assert!(again.to_string().contains("already exists"), "{again}");
}

#[test]
fn a_system_link_must_name_an_absolute_plain_target_inside_the_directory() {
    let mut m = common::manifest(&[("mlx/a", b"x")], &[]);
    for (path, target, why) in [
        ("mlx/l", "relative/x", "absolute path"),
        ("mlx/l", "/usr/../etc/passwd", "absolute path"),
        ("other/l", "/usr/lib/x", "mlx/"),
        ("mlx/a", "/usr/lib/x", "both a file and a system link"),
    ] {
        m.system_links = vec![rlx_plugin_package::SystemLink {
            path: path.into(),
            target: target.into(),
        }];
        let e = m.validate().unwrap_err().to_string();
        assert!(e.contains(why), "{path} -> {target}: {e}");
    }
}
