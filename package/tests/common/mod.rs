//! Shared by the integration tests: a sample plugin directory, hand-crafted
//! archives (hostile ones included), and the "refused and nothing left
//! behind" check. Each test binary uses a part of it.
#![allow(dead_code)]

use rlx_plugin_package::{
    unpack_verified, unpack_verified_bytes, FileEntry, Limits, PackInput, PackageManifest,
};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tar::{EntryType, Header};

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// Writes `contents` at `dir/rel` with `mode`, creating parent directories.
pub fn write(dir: &Path, rel: &str, contents: &[u8], mode: u32) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, contents).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
}

/// The sample plugin's files: (relative path, contents, source mode).
pub const SAMPLE_FILES: &[(&str, &[u8], u32)] = &[
    ("librlx_mlx.so", b"\x7fELF pretend plugin library", 0o775),
    ("plugin.toml", b"name = \"mlx\"\nabi = \"1.10\"\n", 0o664),
    ("lib/libmlx.so.0.32", b"pretend libmlx", 0o700),
    ("share/kernels/add.metal", b"kernel void add() {}\n", 0o600),
    ("nvidia/libcudart.so", b"left out by exclude", 0o755),
];

/// The sample plugin's symlinks: (relative path, target).
pub const SAMPLE_LINKS: &[(&str, &str)] = &[("lib/libmlx.so", "libmlx.so.0.32")];

/// Creates the sample plugin directory at `dir`, files in `order`
/// (indices into [`SAMPLE_FILES`]) so tests can vary creation order.
pub fn sample_plugin_in_order(dir: &Path, order: &[usize]) {
    fs::create_dir_all(dir.join("empty")).unwrap();
    for &i in order {
        let (rel, contents, mode) = SAMPLE_FILES[i];
        write(dir, rel, contents, mode);
    }
    for (rel, target) in SAMPLE_LINKS {
        std::os::unix::fs::symlink(target, dir.join(rel)).unwrap();
    }
}

/// The sample plugin directory at `root/mlx`.
pub fn sample_plugin(root: &Path) -> PathBuf {
    let dir = root.join("mlx");
    sample_plugin_in_order(&dir, &(0..SAMPLE_FILES.len()).collect::<Vec<_>>());
    dir
}

/// What `cargo xtask package` would pass for the sample plugin.
pub fn input(dir: &Path) -> PackInput {
    PackInput {
        dir: dir.to_path_buf(),
        name: "mlx".into(),
        version: "0.1.0".into(),
        abi_version: "1.10".into(),
        platform: "linux-x86_64".into(),
        mlx_version: "0.32.4".into(),
        mlx_backend: "cpu".into(),
        exclude: vec!["nvidia".into()],
    }
}

pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A manifest for plugin `mlx` listing these files (mode 0644) and symlinks.
pub fn manifest(files: &[(&str, &[u8])], links: &[(&str, &str)]) -> PackageManifest {
    let mut entries: Vec<FileEntry> = files
        .iter()
        .map(|(path, data)| FileEntry {
            path: path.to_string(),
            size: data.len() as u64,
            sha256: sha256_hex(data),
            mode: 0o644,
            link: None,
        })
        .chain(links.iter().map(|(path, target)| FileEntry {
            path: path.to_string(),
            size: 0,
            sha256: String::new(),
            mode: 0o777,
            link: Some(target.to_string()),
        }))
        .collect();
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    PackageManifest {
        format: 1,
        name: "mlx".into(),
        version: "0.1.0".into(),
        abi_version: "1.10".into(),
        platform: "linux-x86_64".into(),
        mlx_version: "0.32.4".into(),
        mlx_backend: "cpu".into(),
        files: entries,
        system_links: Vec::new(),
    }
}

/// A tar stream built entry by entry, including entries `pack` never
/// writes (bad names, hard links, devices, lying sizes), then xz-compressed.
pub struct Crafted {
    tar: tar::Builder<Vec<u8>>,
}

impl Default for Crafted {
    fn default() -> Self {
        Crafted::new()
    }
}

impl Crafted {
    pub fn new() -> Self {
        Crafted {
            tar: tar::Builder::new(Vec::new()),
        }
    }

    /// `manifest.json` holding this manifest.
    pub fn manifest(self, manifest: &PackageManifest) -> Self {
        self.file("manifest.json", &manifest.to_json())
    }

    pub fn dir(mut self, path: &str) -> Self {
        let mut header = header(EntryType::Directory, 0);
        self.tar.append_data(&mut header, path, &[][..]).unwrap();
        self
    }

    pub fn file(mut self, path: &str, data: &[u8]) -> Self {
        let mut header = header(EntryType::Regular, data.len() as u64);
        self.tar.append_data(&mut header, path, data).unwrap();
        self
    }

    pub fn symlink(mut self, path: &str, target: &str) -> Self {
        let mut header = header(EntryType::Symlink, 0);
        self.tar.append_link(&mut header, path, target).unwrap();
        self
    }

    /// An entry whose name (and link name) bytes go into the header as they
    /// are, unchecked, with `claimed_size` in the header whatever `data` is.
    pub fn raw(
        mut self,
        entry_type: EntryType,
        name: &[u8],
        link: &[u8],
        claimed_size: u64,
        data: &[u8],
    ) -> Self {
        let mut header = header(entry_type, claimed_size);
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name);
        old.linkname[..link.len()].copy_from_slice(link);
        header.set_cksum();
        self.tar.append(&header, data).unwrap();
        self
    }

    /// The plain tar bytes.
    pub fn tar(self) -> Vec<u8> {
        self.tar.into_inner().unwrap()
    }

    /// The .tar.xz bytes.
    pub fn xz(self) -> Vec<u8> {
        compress(&self.tar())
    }
}

fn header(entry_type: EntryType, size: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(entry_type);
    header.set_size(size);
    header.set_mode(if entry_type == EntryType::Directory {
        0o755
    } else {
        0o644
    });
    header.set_mtime(0);
    header
}

pub fn compress(data: &[u8]) -> Vec<u8> {
    let mut encoder = xz2::write::XzEncoder::new(Vec::new(), 6);
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

/// A well-formed crafted archive: what the hostile variants start from.
pub const GOOD_FILE: (&str, &[u8]) = ("mlx/a.txt", b"hello");

pub fn good_manifest() -> PackageManifest {
    manifest(&[GOOD_FILE], &[])
}

/// `manifest.json` and the top-level directory of [`good_manifest`].
pub fn good_start() -> Crafted {
    Crafted::new().manifest(&good_manifest()).dir("mlx")
}

/// Limits small enough for the bomb tests.
pub fn small_limits() -> Limits {
    Limits {
        max_total_bytes: 64 * 1024,
        max_entries: 64,
    }
}

/// Asserts `archive` is refused with an error containing `expect`, by both
/// entry points, and that the destination is not left behind. Returns the
/// in-memory entry point's message.
pub fn refused_with(archive: &[u8], limits: &Limits, expect: &str) -> String {
    let tmp = tempdir();
    let dest = tmp.path().join("staging/dest");
    let err = unpack_verified_bytes(archive, &dest, limits)
        .expect_err("a hostile archive must be refused")
        .to_string();
    assert!(
        err.contains(expect),
        "error {err:?} does not say {expect:?}"
    );
    assert!(
        fs::symlink_metadata(&dest).is_err(),
        "{} left behind",
        dest.display()
    );

    let file = tmp.path().join("hostile.tar.xz");
    fs::write(&file, archive).unwrap();
    let err2 = unpack_verified(&file, &dest, limits)
        .expect_err("a hostile archive must be refused")
        .to_string();
    assert!(
        err2.contains(expect),
        "error {err2:?} does not say {expect:?}"
    );
    assert!(err2.contains("hostile.tar.xz"), "{err2:?} names no archive");
    assert!(fs::symlink_metadata(&dest).is_err());
    err
}

/// [`refused_with`] under the default limits.
pub fn refused(archive: &[u8], expect: &str) -> String {
    refused_with(archive, &Limits::default(), expect)
}
