//! The checks and writes of unpacking, one member at a time: nothing is
//! written that the manifest does not vouch for, nothing is written outside
//! `dest`, and nothing more than the limits allow is read.

use crate::error::PackageError;
use crate::manifest::{FileEntry, PackageManifest, MODE_PLAIN};
use crate::members::{corrupt, Kind, Member, Members};
use crate::paths::check_member;
use crate::{MANIFEST_NAME, MAX_MANIFEST_BYTES};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bounds on what one archive may make us read and write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of content (manifest.json and files together).
    pub max_total_bytes: u64,
    /// Most tar entries (directories, files, symlinks, long-name records).
    pub max_entries: usize,
}

impl Default for Limits {
    /// 16 GiB and 100 000 entries: far above any plugin, far below a full disk.
    fn default() -> Self {
        Limits {
            max_total_bytes: 16 << 30,
            max_entries: 100_000,
        }
    }
}

/// Mode of every unpacked directory.
const DIR_MODE: u32 = 0o755;

/// Unpacks the xz-compressed tar `src` into the existing, empty `dest`.
/// Returns the manifest and the directories created (for syncing). On error,
/// `dest` holds partial output that the caller removes.
pub(crate) fn extract<R: BufRead>(
    src: R,
    dest: &Path,
    limits: &Limits,
) -> Result<(PackageManifest, Vec<PathBuf>), PackageError> {
    let mut archive = tar::Archive::new(crate::xz::decoder(src)?);
    let unpacked = unpack_members(&mut archive, dest, limits)?;
    crate::xz::finish_decoding(&mut archive.into_inner())?;
    Ok(unpacked)
}

/// Everything up to the tar stream's end marker.
fn unpack_members<R: Read>(
    archive: &mut tar::Archive<R>,
    dest: &Path,
    limits: &Limits,
) -> Result<(PackageManifest, Vec<PathBuf>), PackageError> {
    let mut members = Members::new(archive, limits.max_entries)?;
    let (manifest, manifest_bytes) = read_manifest(&mut members, limits)?;
    write_file(
        &dest.join(MANIFEST_NAME),
        MANIFEST_NAME,
        MODE_PLAIN,
        &manifest_bytes,
    )?;

    let mut unpacker = Unpacker {
        dest,
        listed: manifest
            .files
            .iter()
            .map(|f| (f.path.as_str(), f))
            .collect(),
        name: &manifest.name,
        seen: BTreeSet::new(),
        dirs: BTreeSet::new(),
        created: Vec::new(),
        budget: limits.max_total_bytes - manifest_bytes.len() as u64,
        max_total_bytes: limits.max_total_bytes,
    };
    while let Some(member) = members.next_member()? {
        unpacker.member(member)?;
    }
    if let Some(missing) = manifest
        .files
        .iter()
        .find(|f| !unpacker.seen.contains(&f.path))
    {
        return Err(PackageError::new(format!(
            "{}: in the manifest but missing from the archive",
            missing.path
        )));
    }
    let created = unpacker.created;
    Ok((manifest, created))
}

/// Reads and checks the first member, which must be `manifest.json`, under
/// both the manifest's own bound and the content limit.
fn read_manifest<R: Read>(
    members: &mut Members<'_, R>,
    limits: &Limits,
) -> Result<(PackageManifest, Vec<u8>), PackageError> {
    let Some(mut first) = members.next_member()? else {
        return Err(PackageError::new(
            "the archive is empty: manifest.json must be its first entry",
        ));
    };
    if first.kind != Kind::File || first.path != MANIFEST_NAME {
        return Err(PackageError::new(format!(
            "{}: the first entry must be {MANIFEST_NAME}",
            first.path
        )));
    }
    let bound = MAX_MANIFEST_BYTES.min(limits.max_total_bytes);
    if first.size > bound {
        return Err(PackageError::new(format!(
            "{MANIFEST_NAME}: {} bytes, more than the limit of {bound}",
            first.size
        )));
    }
    let mut bytes = Vec::with_capacity(first.size as usize);
    (&mut first.entry)
        .take(bound + 1)
        .read_to_end(&mut bytes)
        .map_err(corrupt)?;
    if bytes.len() as u64 != first.size {
        return Err(PackageError::new(format!(
            "truncated archive: {MANIFEST_NAME} is cut short"
        )));
    }
    let manifest = PackageManifest::from_json(&bytes)?;
    let listed = manifest.total_size();
    if listed.saturating_add(bytes.len() as u64) > limits.max_total_bytes {
        return Err(PackageError::new(format!(
            "{MANIFEST_NAME}: lists {listed} bytes of files, more than the limit of {} bytes",
            limits.max_total_bytes
        )));
    }
    Ok((manifest, bytes))
}

/// Where unpacking stands.
struct Unpacker<'m> {
    dest: &'m Path,
    /// The manifest's files by path.
    listed: BTreeMap<&'m str, &'m FileEntry>,
    name: &'m str,
    /// Every member path unpacked so far.
    seen: BTreeSet<String>,
    /// Member paths of the directories created: the only places a member may go.
    dirs: BTreeSet<String>,
    /// The same directories on disk, in creation order.
    created: Vec<PathBuf>,
    /// Bytes of file content still allowed.
    budget: u64,
    max_total_bytes: u64,
}

impl Unpacker<'_> {
    fn member<R: Read>(&mut self, member: Member<'_, R>) -> Result<(), PackageError> {
        let path = member.path.clone();
        let fail = |why: String| Err(PackageError::new(format!("{path}: {why}")));
        check_member(&path, self.name, member.kind == Kind::Dir).map_err(PackageError::new)?;
        if !self.seen.insert(path.clone()) {
            return fail("appears twice in the archive".into());
        }
        // Members go only into directories this archive created, so nothing
        // can be written through a symlink or outside `dest`.
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !self.dirs.contains(parent) {
                return fail(format!(
                    "its directory {parent} is not in the archive before it"
                ));
            }
        }
        let target = self.dest.join(&path);
        let listed = self.listed.get(path.as_str()).copied();
        match member.kind {
            Kind::Dir => {
                if listed.is_some() {
                    return fail("a directory in the archive but a file in the manifest".into());
                }
                DirBuilder::new()
                    .mode(DIR_MODE)
                    .create(&target)
                    .and_then(|()| {
                        fs::set_permissions(&target, fs::Permissions::from_mode(DIR_MODE))
                    })
                    .map_err(|e| PackageError::new(format!("{path}: {e}")))?;
                self.dirs.insert(path);
                self.created.push(target);
                Ok(())
            }
            Kind::Symlink => {
                let link = member.link.unwrap_or_default();
                match listed.map(|f| &f.link) {
                    None => fail("not in the manifest".into()),
                    Some(None) => {
                        fail("a symlink in the archive but a file in the manifest".into())
                    }
                    Some(Some(expected)) if *expected != link => fail(format!(
                        "symlink to {link:?} in the archive, to {expected:?} in the manifest"
                    )),
                    // The manifest's targets were checked to stay inside the
                    // plugin directory when it was parsed.
                    Some(Some(_)) => std::os::unix::fs::symlink(&link, &target)
                        .map_err(|e| PackageError::new(format!("{path}: {e}"))),
                }
            }
            Kind::File => {
                let Some(entry) = listed else {
                    return fail("not in the manifest".into());
                };
                if entry.link.is_some() {
                    return fail("a file in the archive but a symlink in the manifest".into());
                }
                self.file(member, entry)
            }
        }
    }

    /// Writes one file's content, checking it against its manifest entry.
    fn file<R: Read>(
        &mut self,
        mut member: Member<'_, R>,
        entry: &FileEntry,
    ) -> Result<(), PackageError> {
        let path = &member.path;
        if member.size > self.budget {
            return Err(PackageError::new(format!(
                "{path}: {} bytes would pass the limit of {} bytes of content",
                member.size, self.max_total_bytes
            )));
        }
        if member.size != entry.size {
            return Err(PackageError::new(format!(
                "{path}: size mismatch (manifest {}, archive {})",
                entry.size, member.size
            )));
        }
        let target = self.dest.join(path);
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&target)
            .map_err(|e| PackageError::new(format!("{path}: {e}")))?;
        // Bounded by the budget, not only by the header's claim.
        let mut content = (&mut member.entry).take(self.budget + 1);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut count = 0u64;
        loop {
            let n = match content.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(PackageError::new(format!("{path}: {}", corrupt(e)))),
            };
            count += n as u64;
            if count > self.budget {
                return Err(PackageError::new(format!(
                    "{path}: more content than the limit of {} bytes",
                    self.max_total_bytes
                )));
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| PackageError::new(format!("{path}: {e}")))?;
        }
        if count != entry.size {
            return Err(PackageError::new(format!(
                "{path}: truncated archive ({count} of {} bytes)",
                entry.size
            )));
        }
        let actual = crate::digest::hex(&hasher.finalize());
        if actual != entry.sha256 {
            return Err(PackageError::new(format!(
                "{path}: sha256 mismatch (manifest {}, archive {actual})",
                entry.sha256
            )));
        }
        self.budget -= count;
        out.set_permissions(fs::Permissions::from_mode(entry.mode))
            .and_then(|()| out.sync_all())
            .map_err(|e| PackageError::new(format!("{path}: {e}")))
    }
}

/// Writes a whole small file durably (the manifest's copy in `dest`).
fn write_file(target: &Path, shown: &str, mode: u32, bytes: &[u8]) -> Result<(), PackageError> {
    let fail = |e: io::Error| PackageError::new(format!("{shown}: {e}"));
    let mut out: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(target)
        .map_err(fail)?;
    out.write_all(bytes).map_err(fail)?;
    out.set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| out.sync_all())
        .map_err(fail)
}
