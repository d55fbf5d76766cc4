//! Packing a plugin directory into its release archive (format 1): first
//! `manifest.json`, then the directory under the plugin's name, in sorted
//! order with reproducible headers, compressed with fixed xz settings.

use crate::digest::{sha256_reader, HashingReader};
use crate::durable::AtomicFile;
use crate::error::PackageError;
use crate::header::header;
use crate::manifest::{FileEntry, PackageManifest, SystemLink, MODE_EXEC, MODE_LINK, MODE_PLAIN};
use crate::paths::{check_name, resolve_link};
use crate::walk::{self, Kind};
use crate::{archive_name, ARCHIVE_STEM, FORMAT, MANIFEST_NAME};
use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use tar::EntryType;

/// What to pack and how to describe it.
#[derive(Clone, Debug)]
pub struct PackInput {
    /// The plugin directory on disk.
    pub dir: PathBuf,
    /// The plugin's name: the archive's top-level directory.
    pub name: String,
    pub version: String,
    pub abi_version: String,
    pub platform: String,
    pub mlx_version: String,
    pub mlx_backend: String,
    /// Relative paths (within dir) left out, e.g. "nvidia".
    pub exclude: Vec<String>,
}

/// Writes out_dir/archive_name(ARCHIVE_STEM, version, platform); returns its path and the manifest it holds.
///
/// The archive is written under a temporary name and renamed into place, so a
/// failed pack leaves no archive behind. Fails on anything that would make
/// the archive unsafe or irreproducible to unpack: file types other than
/// directories, regular files and symlinks; symlinks whose target is absolute
/// or leaves the plugin directory; a file that changes while being packed.
pub fn pack(input: &PackInput, out_dir: &Path) -> Result<(PathBuf, PackageManifest), PackageError> {
    check_name(&input.name).map_err(PackageError::new)?;
    check_label("version", &input.version)?;
    check_label("platform", &input.platform)?;
    let items = walk::list(&input.dir, &input.exclude)?;
    let manifest = describe(input, &items)?;
    manifest.validate()?;

    fs::create_dir_all(out_dir).map_err(|e| PackageError::io(out_dir, e))?;
    let out = out_dir.join(archive_name(ARCHIVE_STEM, &input.version, &input.platform));
    let mut atomic = AtomicFile::create(&out)?;
    let file = atomic
        .file()
        .try_clone()
        .map_err(|e| PackageError::io(&out, e))?;
    write_archive(input, &items, &manifest, BufWriter::new(file), &out)?;
    atomic.commit()?;
    Ok((out, manifest))
}

/// A version or platform: it becomes part of a file name, so one plain
/// component of `[A-Za-z0-9._+-]`.
fn check_label(field: &str, value: &str) -> Result<(), PackageError> {
    let plain = !value.is_empty()
        && value != "."
        && value != ".."
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'));
    if plain {
        Ok(())
    } else {
        Err(PackageError::new(format!(
            "bad {field} {value:?}: only A-Z a-z 0-9 . _ - + are allowed"
        )))
    }
}

/// The manifest of the listed items: hashes every file, checks every symlink.
fn describe(input: &PackInput, items: &[walk::Item]) -> Result<PackageManifest, PackageError> {
    let member = |rel: &str| format!("{}/{rel}", input.name);
    let links: BTreeSet<String> = items
        .iter()
        .filter(|i| matches!(i.kind, Kind::Symlink { .. }))
        .map(|i| member(&i.rel))
        .collect();
    let mut files = Vec::new();
    let mut system_links = Vec::new();
    for item in items {
        let path = member(&item.rel);
        let source = input.dir.join(&item.rel);
        let entry = match &item.kind {
            Kind::Dir => continue,
            Kind::Symlink { target } if is_system_link(target) => {
                system_links.push(SystemLink {
                    path,
                    target: target.clone(),
                });
                continue;
            }
            Kind::File { exec } => {
                let file = File::open(&source).map_err(|e| PackageError::io(&source, e))?;
                let (sha256, size) =
                    sha256_reader(file).map_err(|e| PackageError::io(&source, e))?;
                FileEntry {
                    path,
                    size,
                    sha256,
                    mode: if *exec { MODE_EXEC } else { MODE_PLAIN },
                    link: None,
                }
            }
            Kind::Symlink { target } => {
                resolve_link(&path, target, |p| links.contains(p)).map_err(|why| {
                    PackageError::new(format!(
                        "{}: cannot pack this symlink ({why}); only relative links that \
                         stay inside the plugin directory are kept",
                        source.display()
                    ))
                })?;
                FileEntry {
                    path,
                    size: 0,
                    sha256: String::new(),
                    mode: MODE_LINK,
                    link: Some(target.clone()),
                }
            }
        };
        files.push(entry);
    }
    Ok(PackageManifest {
        format: FORMAT,
        name: input.name.clone(),
        version: input.version.clone(),
        abi_version: input.abi_version.clone(),
        platform: input.platform.clone(),
        mlx_version: input.mlx_version.clone(),
        mlx_backend: input.mlx_backend.clone(),
        files,
        system_links,
    })
}

/// An absolute symlink: a pointer to a file of the machine's own (the
/// system OpenBLAS), recorded in the manifest for the installer to make,
/// not packed.
fn is_system_link(target: &str) -> bool {
    target.starts_with('/')
}

/// Writes the tar.xz stream to `out` (named `out_path` in errors): manifest,
/// top-level directory, then every item. Each file is hashed again as it is
/// copied, so one that changed since [`describe`] fails the pack instead of
/// contradicting the manifest.
fn write_archive<W: Write>(
    input: &PackInput,
    items: &[walk::Item],
    manifest: &PackageManifest,
    out: W,
    out_path: &Path,
) -> Result<(), PackageError> {
    let at_out = |e: io::Error| PackageError::io(out_path, e);
    let mut tar = tar::Builder::new(crate::xz::encoder(out)?);
    let json = manifest.to_json();
    let mut head = header(EntryType::Regular, json.len() as u64, MODE_PLAIN);
    tar.append_data(&mut head, MANIFEST_NAME, json.as_slice())
        .map_err(at_out)?;
    let mut head = header(EntryType::Directory, 0, MODE_EXEC);
    tar.append_data(&mut head, &input.name, io::empty())
        .map_err(at_out)?;

    // Items other than directories are the manifest's files, in the same order.
    let mut files = manifest.files.iter();
    for item in items {
        let path = format!("{}/{}", input.name, item.rel);
        if matches!(&item.kind, Kind::Symlink { target } if is_system_link(target)) {
            continue;
        }
        if let Kind::Dir = item.kind {
            let mut head = header(EntryType::Directory, 0, MODE_EXEC);
            tar.append_data(&mut head, &path, io::empty())
                .map_err(at_out)?;
            continue;
        }
        let entry = files
            .next()
            .expect("one manifest entry per file or symlink");
        debug_assert_eq!(entry.path, path);
        match &entry.link {
            Some(target) => {
                let mut head = header(EntryType::Symlink, 0, MODE_LINK);
                tar.append_link(&mut head, &path, target).map_err(at_out)?;
            }
            None => {
                let source = input.dir.join(&item.rel);
                let file = File::open(&source).map_err(|e| PackageError::io(&source, e))?;
                let mut hashed = HashingReader::new(file.take(entry.size));
                let mut head = header(EntryType::Regular, entry.size, entry.mode);
                tar.append_data(&mut head, &path, &mut hashed)
                    .map_err(at_out)?;
                if hashed.finish() != (entry.sha256.clone(), entry.size) {
                    return Err(PackageError::new(format!(
                        "{}: changed while it was being packed",
                        source.display()
                    )));
                }
            }
        }
    }
    let encoder = tar.into_inner().map_err(at_out)?;
    encoder.finish().and_then(|mut w| w.flush()).map_err(at_out)
}
