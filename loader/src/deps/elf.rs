//! Reading, from an ELF shared library, what the dynamic loader reads
//! before it maps the file: the identification bytes, the file type, the
//! machine, and from the dynamic segment the `DT_NEEDED` names, the soname,
//! `DT_RPATH`, `DT_RUNPATH` and `DF_1_NODEFLIB`.
//!
//! The structures are object's (`object::read::elf`); only the headers, the
//! program headers, the dynamic segment and the dynamic string table are
//! read, never the whole file (`source.rs`). A truncated or corrupt file is
//! an error, not a panic. Both classes and both byte orders are read, so
//! that a library of the wrong class can be named as such.

mod bounds;
mod kind;
mod source;

pub use bounds::check_elf_bounds;
pub use kind::ElfKind;

use object::elf::{
    FileHeader32, FileHeader64, DF_1_NODEFLIB, DF_1_PIE, DT_FLAGS_1, DT_NEEDED, DT_NULL, DT_RPATH,
    DT_RUNPATH, DT_SONAME, DT_STRSZ, DT_STRTAB, ELFMAG, ET_CORE, ET_DYN, ET_EXEC, ET_REL,
    PT_DYNAMIC, PT_INTERP, PT_LOAD,
};
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::{Endianness, FileKind, ReadRef, StringTable};
use source::Source;
use std::fmt;
use std::mem::size_of;
use std::path::Path;

/// A dynamic string table larger than this is taken for corruption (the
/// largest real ones are a few MB).
const MAX_STRTAB: u64 = 64 << 20;
/// The most of a `PT_INTERP` segment read: a path, which a corrupt size
/// must not turn into a read of gigabytes.
const MAX_INTERP: u64 = 4096;
/// `EI_NIDENT`: the identification bytes that open every ELF file.
const IDENT_LEN: u64 = 16;

/// Why a file could not be read as an ELF shared library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ElfError {
    /// Opening or reading failed (permissions, a directory, I/O).
    Io(String),
    /// No ELF magic: another format, a text file, an empty file.
    NotElf(String),
    /// ELF, but the tables are inconsistent or run past the end of the file.
    Malformed(String),
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::Io(e) => write!(f, "cannot read it: {e}"),
            ElfError::NotElf(e) => write!(f, "not an ELF file: {e}"),
            ElfError::Malformed(e) => write!(f, "a malformed ELF file: {e}"),
        }
    }
}

/// The ELF file header fields the checks need.
#[derive(Clone, Debug)]
pub struct Header {
    pub kind: ElfKind,
    pub e_type: u16,
}

impl Header {
    /// Is this a file the loader can map as a library (or an executable,
    /// for reading its interpreter and search paths)?
    pub fn type_problem(&self) -> Option<String> {
        match self.e_type {
            ET_DYN => None,
            ET_EXEC => Some("an executable (ET_EXEC), not a shared library".into()),
            ET_REL => Some("a relocatable object (ET_REL, a .o file), not a shared library".into()),
            ET_CORE => Some("a core dump, not a shared library".into()),
            t => Some(format!("ELF file type {t}, not a shared library")),
        }
    }

    fn endian(&self) -> Endianness {
        endianness(self.kind.little_endian)
    }
}

/// What the dependency walk needs from one object.
#[derive(Clone, Debug, Default)]
pub struct Dynamic {
    pub needed: Vec<String>,
    pub soname: Option<String>,
    pub rpath: Option<String>,
    pub runpath: Option<String>,
    /// `DF_1_NODEFLIB`: the loader skips its cache and default directories
    /// for this object's dependencies.
    pub nodeflib: bool,
    /// `DF_1_PIE`: a position-independent executable, which glibc refuses
    /// to load as a library.
    pub pie: bool,
    /// `PT_INTERP`, the program interpreter an executable names.
    pub interp: Option<String>,
}

/// Read the file header: enough to tell whether the loader would accept
/// the file's class, byte order and machine.
pub fn read_header(path: &Path) -> Result<Header, ElfError> {
    header(&Source::open(path)?)
}

/// Read the header and the dynamic segment.
pub fn read(path: &Path) -> Result<(Header, Dynamic), ElfError> {
    let src = Source::open(path)?;
    let h = header(&src)?;
    let d = if h.kind.class64 {
        dynamic::<FileHeader64<Endianness>>(&src, h.endian())?
    } else {
        dynamic::<FileHeader32<Endianness>>(&src, h.endian())?
    };
    Ok((h, d))
}

fn header(src: &Source) -> Result<Header, ElfError> {
    let magic = src.bytes(0, src.len.min(4), "ELF magic")?;
    if magic != ELFMAG {
        return Err(ElfError::NotElf(format!(
            "no ELF magic (first bytes {magic:02x?})"
        )));
    }
    if src.len < IDENT_LEN {
        return Err(ElfError::Malformed(format!(
            "the file is {} bytes, shorter than an ELF identification ({IDENT_LEN})",
            src.len
        )));
    }
    let class64 = match FileKind::parse(src.data()) {
        Ok(FileKind::Elf32) => false,
        Ok(FileKind::Elf64) => true,
        _ => {
            return Err(src.failed(
                "ELF identification",
                0,
                IDENT_LEN,
                "unknown ELF class (neither ELFCLASS32 nor ELFCLASS64)",
            ))
        }
    };
    if class64 {
        kind_and_type(file_start::<FileHeader64<Endianness>>(src)?)
    } else {
        kind_and_type(file_start::<FileHeader32<Endianness>>(src)?)
    }
}

fn kind_and_type<Elf: FileHeader<Endian = Endianness>>(h: &Elf) -> Result<Header, ElfError> {
    let little_endian = if h.is_little_endian() {
        true
    } else if h.is_big_endian() {
        false
    } else {
        return Err(ElfError::Malformed(format!(
            "unknown ELF byte order {}",
            h.e_ident().data
        )));
    };
    let endian = endianness(little_endian);
    Ok(Header {
        kind: ElfKind {
            class64: h.is_class_64(),
            little_endian,
            machine: h.e_machine(endian),
        },
        e_type: h.e_type(endian),
    })
}

fn endianness(little: bool) -> Endianness {
    if little {
        Endianness::Little
    } else {
        Endianness::Big
    }
}

/// The file header. Not `FileHeader::parse`: it also refuses an
/// `EI_VERSION` other than 1, which the loader's checks here leave alone,
/// and its error would not say that the file is too short.
fn file_start<Elf: FileHeader>(src: &Source) -> Result<&Elf, ElfError> {
    let need = size_of::<Elf>() as u64;
    if src.len < need {
        return Err(ElfError::Malformed(format!(
            "the file is {} bytes, shorter than an ELF header ({need})",
            src.len
        )));
    }
    src.data()
        .read_at(0)
        .map_err(|()| src.failed("ELF header", 0, need, "cannot be read"))
}

/// The program headers, each loadable segment checked to lie within the
/// file: the loader maps them as described, and one that runs past the end
/// (a truncated copy) would fault when touched.
fn program_headers<'a, Elf: FileHeader<Endian = Endianness>>(
    src: &'a Source,
    h: &Elf,
    endian: Endianness,
) -> Result<&'a [Elf::ProgramHeader], ElfError> {
    let segs = h.program_headers(endian, src.data()).map_err(|e| {
        // The size object reads: with a wrong e_phentsize, its error says so.
        let size = size_of::<Elf::ProgramHeader>() as u64 * u64::from(h.e_phnum(endian));
        src.failed("program header table", h.e_phoff(endian).into(), size, e)
    })?;
    for (i, seg) in segs.iter().enumerate() {
        let (offset, size) = seg.file_range(endian);
        if seg.p_type(endian) == PT_LOAD && offset.checked_add(size).is_none_or(|e| e > src.len) {
            return Err(ElfError::Malformed(format!(
                "loadable segment {i} needs bytes {offset}..{} but the file has {} (truncated?)",
                offset.saturating_add(size),
                src.len
            )));
        }
    }
    Ok(segs)
}

fn dynamic<Elf: FileHeader<Endian = Endianness>>(
    src: &Source,
    endian: Endianness,
) -> Result<Dynamic, ElfError> {
    let h: &Elf = file_start(src)?;
    let segs = program_headers(src, h, endian)?;
    let find_seg = |t: u32| segs.iter().find(|s| s.p_type(endian) == t);
    let mut out = Dynamic::default();
    if let Some(s) = find_seg(PT_INTERP) {
        let (offset, size) = s.file_range(endian);
        let b = src.bytes(offset, size.min(MAX_INTERP), "program interpreter name")?;
        out.interp = Some(until_nul(b));
    }
    // No dynamic segment: a static object, which needs nothing.
    let Some(dynseg) = find_seg(PT_DYNAMIC) else {
        return Ok(out);
    };
    let (offset, size) = dynseg.file_range(endian);
    let b = src.bytes(offset, size, "dynamic segment")?;
    // Entries up to DT_NULL, as the loader reads them; a partial entry at
    // the end of the segment is none.
    let count = b.len() / size_of::<Elf::Dyn>();
    let (dyns, _) = object::slice_from_bytes::<Elf::Dyn>(b, count)
        .map_err(|()| ElfError::Malformed("the dynamic segment cannot be read".into()))?;
    let entries: Vec<(i64, u64)> = dyns
        .iter()
        .map(|d| (d.tag(endian), d.val(endian)))
        .take_while(|&(tag, _)| tag != DT_NULL)
        .collect();
    let find = |t: i64| entries.iter().find(|e| e.0 == t).map(|e| e.1);
    if let Some(flags) = find(DT_FLAGS_1) {
        out.nodeflib = flags & u64::from(DF_1_NODEFLIB) != 0;
        out.pie = flags & u64::from(DF_1_PIE) != 0;
    }
    let wants_strings = entries
        .iter()
        .any(|e| matches!(e.0, DT_NEEDED | DT_SONAME | DT_RPATH | DT_RUNPATH));
    if !wants_strings {
        return Ok(out);
    }
    let strtab = find(DT_STRTAB).ok_or_else(|| {
        ElfError::Malformed("names in the dynamic segment but no DT_STRTAB".into())
    })?;
    // DT_STRTAB is an address; the loadable segment holding it maps it to
    // a file offset.
    let seg = segs
        .iter()
        .find(|s| {
            let vaddr: u64 = s.p_vaddr(endian).into();
            s.p_type(endian) == PT_LOAD
                && vaddr <= strtab
                && strtab - vaddr < s.p_filesz(endian).into()
        })
        .ok_or_else(|| ElfError::Malformed("DT_STRTAB lies in no loadable segment".into()))?;
    let (seg_offset, seg_size) = seg.file_range(endian);
    let seg_vaddr: u64 = seg.p_vaddr(endian).into();
    let into_seg = strtab - seg_vaddr;
    let seg_left = seg_size - into_seg;
    let size = find(DT_STRSZ).unwrap_or(seg_left).min(seg_left);
    if size > MAX_STRTAB {
        return Err(ElfError::Malformed(format!(
            "a dynamic string table of {size} bytes"
        )));
    }
    let strings = src.bytes(seg_offset + into_seg, size, "dynamic string table")?;
    let table = StringTable::new(strings, 0, size);
    let string = |off: u64| -> Result<String, ElfError> {
        let s = u32::try_from(off).ok().and_then(|o| table.get(o).ok());
        match s {
            Some(s) => Ok(String::from_utf8_lossy(s).into_owned()),
            None if off < size => Err(ElfError::Malformed("an unterminated dynamic string".into())),
            None => Err(ElfError::Malformed(format!(
                "a dynamic entry names string {off}, past the string table's {size} bytes"
            ))),
        }
    };
    for &(tag, val) in &entries {
        match tag {
            DT_NEEDED => out.needed.push(string(val)?),
            DT_SONAME => out.soname = Some(string(val)?),
            DT_RPATH => out.rpath = Some(string(val)?),
            DT_RUNPATH => out.runpath = Some(string(val)?),
            _ => {}
        }
    }
    // glibc ignores DT_RPATH in an object that also has DT_RUNPATH
    // (elf/get-dynamic-info.h), for its own lookups and as an ancestor.
    if out.runpath.is_some() {
        out.rpath = None;
    }
    Ok(out)
}

/// The text up to the first NUL (all of it without one).
fn until_nul(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_test_binary_and_refuses_odd_files() {
        let exe = std::env::current_exe().unwrap();
        let Ok(h) = read_header(&exe) else {
            return; // not an ELF platform
        };
        assert_eq!(h.kind, ElfKind::compiled());
        let (_, d) = read(&exe).unwrap();
        assert!(d.needed.iter().any(|n| n.starts_with("libc.")), "{d:?}");

        let t = tempfile::tempdir().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let cut = t.path().join("cut");
        // Headers intact, the loadable segments cut off.
        std::fs::write(&cut, &bytes[..4096]).unwrap();
        let e = read(&cut).unwrap_err();
        assert!(matches!(e, ElfError::Malformed(_)), "{e}");
        std::fs::write(&cut, &bytes[..30]).unwrap();
        assert!(matches!(read(&cut), Err(ElfError::Malformed(_))));
        std::fs::write(&cut, b"").unwrap();
        assert!(matches!(read(&cut), Err(ElfError::NotElf(_))));
        std::fs::write(&cut, b"INPUT(-lfoo)\n").unwrap();
        assert!(matches!(read(&cut), Err(ElfError::NotElf(_))));
        assert!(matches!(read(t.path()), Err(ElfError::Io(_))));
        assert!(matches!(
            read(&t.path().join("absent")),
            Err(ElfError::Io(_))
        ));
    }
}
