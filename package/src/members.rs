//! Reading an archive's tar entries as members, strictly: only regular files,
//! directories and symlinks, with GNU long names read under a bound. The
//! `tar` crate is used in raw mode because its own handling of long names and
//! pax records reads them into memory whatever size a header claims.

use crate::error::PackageError;
use crate::paths::MAX_PATH_BYTES;
use std::io::Read;

/// What a member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
}

/// One archive member, its content not yet read.
pub(crate) struct Member<'a, R: Read + 'a> {
    pub kind: Kind,
    /// The path as stored (a directory's trailing `/` removed), not yet checked.
    pub path: String,
    /// A symlink's target.
    pub link: Option<String>,
    /// The content length the header claims (0 unless `File`).
    pub size: u64,
    /// The content: reads at most `size` bytes.
    pub entry: tar::Entry<'a, R>,
}

/// The members of an archive, in order, counting raw entries (long-name
/// records included) against a bound.
pub(crate) struct Members<'a, R: Read + 'a> {
    entries: tar::Entries<'a, R>,
    count: usize,
    max_entries: usize,
}

impl<'a, R: Read + 'a> Members<'a, R> {
    pub(crate) fn new(
        archive: &'a mut tar::Archive<R>,
        max_entries: usize,
    ) -> Result<Self, PackageError> {
        let entries = archive.entries().map_err(corrupt)?.raw(true);
        Ok(Members {
            entries,
            count: 0,
            max_entries,
        })
    }

    /// The next member, or None at the tar stream's end marker. A member's
    /// content must be read (or the member dropped) before asking for the next.
    pub(crate) fn next_member(&mut self) -> Result<Option<Member<'a, R>>, PackageError> {
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        loop {
            let mut entry = match self.entries.next() {
                None if long_name.is_some() || long_link.is_some() => {
                    return Err(PackageError::new(
                        "corrupt archive: a long-name record ends the archive",
                    ))
                }
                None => return Ok(None),
                Some(entry) => entry.map_err(corrupt)?,
            };
            self.count += 1;
            if self.count > self.max_entries {
                return Err(PackageError::new(format!(
                    "the archive has more than {} entries (the limit)",
                    self.max_entries
                )));
            }
            let type_byte = entry.header().entry_type().as_byte();
            let size = entry.size();
            if matches!(type_byte, b'L' | b'K') {
                let slot = if type_byte == b'L' {
                    &mut long_name
                } else {
                    &mut long_link
                };
                if slot.is_some() {
                    return Err(PackageError::new(
                        "corrupt archive: two long-name records for one entry",
                    ));
                }
                *slot = Some(read_long_name(&mut entry, size)?);
                continue;
            }

            let path_bytes = match long_name.take() {
                Some(bytes) => bytes,
                None => entry.path_bytes().into_owned(),
            };
            let mut path = utf8(path_bytes, "entry name")?;
            let kind = match type_byte {
                b'0' => Kind::File,
                b'5' => Kind::Dir,
                b'2' => Kind::Symlink,
                other => {
                    return Err(PackageError::new(format!(
                        "{path}: {} (only files, directories and symlinks are allowed)",
                        describe(other)
                    )))
                }
            };
            if kind == Kind::Dir && path.len() > 1 && path.ends_with('/') {
                path.pop();
            }
            if kind != Kind::File && size != 0 {
                return Err(PackageError::new(format!(
                    "{path}: a directory or symlink entry with {size} bytes of content"
                )));
            }
            let link = match (kind, long_link.take()) {
                (Kind::Symlink, Some(bytes)) => Some(utf8(bytes, "symlink target")?),
                (Kind::Symlink, None) => Some(utf8(
                    entry
                        .link_name_bytes()
                        .map(|b| b.into_owned())
                        .unwrap_or_default(),
                    "symlink target",
                )?),
                (_, Some(_)) => {
                    return Err(PackageError::new(format!(
                        "{path}: a link-name record for an entry that is not a symlink"
                    )))
                }
                (_, None) => None,
            };
            return Ok(Some(Member {
                kind,
                path,
                link,
                size,
                entry,
            }));
        }
    }
}

/// A GNU long name or long link record's content, without its final NUL.
fn read_long_name(entry: &mut impl Read, size: u64) -> Result<Vec<u8>, PackageError> {
    // The name plus the NUL GNU tar ends it with.
    if size > MAX_PATH_BYTES as u64 + 1 {
        return Err(PackageError::new(format!(
            "corrupt archive: a long-name record of {size} bytes (at most {MAX_PATH_BYTES})"
        )));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    entry.read_to_end(&mut bytes).map_err(corrupt)?;
    if bytes.len() as u64 != size {
        return Err(PackageError::new(
            "truncated archive: a long-name record is cut short",
        ));
    }
    if bytes.last() == Some(&0) {
        bytes.pop();
    }
    Ok(bytes)
}

fn utf8(bytes: Vec<u8>, what: &str) -> Result<String, PackageError> {
    String::from_utf8(bytes).map_err(|e| {
        PackageError::new(format!(
            "{}: {what} is not UTF-8",
            String::from_utf8_lossy(e.as_bytes())
        ))
    })
}

/// Words for a refused entry type.
fn describe(type_byte: u8) -> String {
    match type_byte {
        b'1' => "a hard link".into(),
        b'3' => "a character device".into(),
        b'4' => "a block device".into(),
        b'6' => "a fifo".into(),
        b'x' | b'g' => "a pax extended header (not used by this format)".into(),
        b'S' => "a sparse file".into(),
        other => format!("an entry of unsupported type {:?}", other as char),
    }
}

/// A failure of the tar or xz stream itself.
pub(crate) fn corrupt(e: std::io::Error) -> PackageError {
    PackageError::new(format!("corrupt or truncated archive: {e}"))
}
