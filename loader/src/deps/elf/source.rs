//! An ELF file read at offsets through object's `ReadCache`, which reads
//! only the ranges asked for (a CUDA build of libmlx is 146 MB; the loader
//! needs its headers and a few kilobytes of tables).
//!
//! `ReadCache` reports a failed read without its cause. The I/O error is
//! kept beside it, so that a read that failed (`ElfError::Io`: the walk
//! goes on, as the loader does) is told apart from a range past the end of
//! the file (`ElfError::Malformed`: the loader stops there).

use super::ElfError;
use object::read::ReadCache;
use object::ReadRef;
use std::cell::Cell;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::rc::Rc;

/// The file, keeping the last I/O error its reads and seeks met.
pub(super) struct Recorded {
    file: File,
    error: Rc<Cell<Option<String>>>,
}

impl Recorded {
    fn keep<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            // `read_exact` retries an interrupted read itself.
            if e.kind() != io::ErrorKind::Interrupted {
                self.error.set(Some(e.to_string()));
            }
        }
        r
    }
}

impl Read for Recorded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.file.read(buf);
        self.keep(r)
    }
}

impl Seek for Recorded {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let r = self.file.seek(pos);
        self.keep(r)
    }
}

/// What [`Source::data`] hands to object's parsers.
pub(super) type Data<'a> = &'a ReadCache<Recorded>;

/// An open file with its length.
pub(super) struct Source {
    cache: ReadCache<Recorded>,
    error: Rc<Cell<Option<String>>>,
    pub len: u64,
}

impl Source {
    pub fn open(path: &Path) -> Result<Source, ElfError> {
        let file = File::open(path).map_err(|e| ElfError::Io(e.to_string()))?;
        let meta = file.metadata().map_err(|e| ElfError::Io(e.to_string()))?;
        if meta.is_dir() {
            return Err(ElfError::Io("it is a directory".into()));
        }
        let error = Rc::new(Cell::new(None));
        Ok(Source {
            cache: ReadCache::new(Recorded {
                file,
                error: error.clone(),
            }),
            error,
            len: meta.len(),
        })
    }

    pub fn data(&self) -> Data<'_> {
        &self.cache
    }

    /// The `what` at bytes `off..off + n`.
    pub fn bytes(&self, off: u64, n: u64, what: &str) -> Result<&[u8], ElfError> {
        self.data()
            .read_bytes_at(off, n)
            .map_err(|()| self.failed(what, off, n, "cannot be read"))
    }

    /// Why reading the `what` at bytes `off..off + n` failed: an I/O error,
    /// the end of the file, or else `detail` (object's word for it).
    pub fn failed(&self, what: &str, off: u64, n: u64, detail: impl fmt::Display) -> ElfError {
        if let Some(e) = self.error.take() {
            return ElfError::Io(e);
        }
        match off.checked_add(n) {
            Some(end) if end <= self.len => ElfError::Malformed(format!("the {what}: {detail}")),
            _ => ElfError::Malformed(format!(
                "the {what} (bytes {off}..{}) runs past the end of the file ({} bytes; truncated?)",
                off.saturating_add(n),
                self.len
            )),
        }
    }
}
