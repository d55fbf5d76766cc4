//! Reading, from an ELF shared library, what the dynamic loader reads
//! before it maps the file: the identification bytes, the file type, the
//! machine, and from the dynamic segment the `DT_NEEDED` names, the soname,
//! `DT_RPATH`, `DT_RUNPATH` and `DF_1_NODEFLIB`.
//!
//! Only the headers and the dynamic string table are read, never the whole
//! file (a CUDA build of libmlx is 146 MB). Every offset is checked against
//! the file's length: a truncated or corrupt file is an error, not a panic.
//! Both classes and both byte orders are read, so that a library of the
//! wrong class can be named as such.

use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

const ET_DYN: u16 = 3;
const ET_EXEC: u16 = 2;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
const DF_1_NODEFLIB: u64 = 0x800;
const DF_1_PIE: u64 = 0x0800_0000;
/// A dynamic string table larger than this is taken for corruption (the
/// largest real ones are a few MB).
const MAX_STRTAB: u64 = 64 << 20;

/// What the loader compares before it accepts a file: class, byte order
/// and machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElfKind {
    pub class64: bool,
    pub little_endian: bool,
    /// `e_machine` (62 is x86-64). 0 (`EM_NONE`) in an expectation means
    /// "any machine".
    pub machine: u16,
}

impl ElfKind {
    /// The kind of the code this program was compiled to, for when the
    /// running executable cannot be read.
    pub fn compiled() -> ElfKind {
        let machine = match std::env::consts::ARCH {
            "x86_64" => 62,
            "x86" => 3,
            "aarch64" => 183,
            "arm" => 40,
            "riscv64" => 243,
            "powerpc64" => 21,
            "s390x" => 22,
            "loongarch64" => 258,
            _ => 0,
        };
        ElfKind {
            class64: cfg!(target_pointer_width = "64"),
            little_endian: cfg!(target_endian = "little"),
            machine,
        }
    }

    pub fn class_name(&self) -> &'static str {
        if self.class64 {
            "ELFCLASS64"
        } else {
            "ELFCLASS32"
        }
    }

    /// A name for `e_machine`, for messages.
    pub fn machine_name(&self) -> String {
        match self.machine {
            3 => "i386".into(),
            40 => "ARM".into(),
            62 => "x86-64".into(),
            183 => "AArch64".into(),
            243 => "RISC-V".into(),
            21 => "PowerPC64".into(),
            22 => "S/390".into(),
            258 => "LoongArch".into(),
            m => format!("machine {m}"),
        }
    }
}

impl fmt::Display for ElfKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.class_name(),
            if self.little_endian { "LSB" } else { "MSB" },
            self.machine_name()
        )
    }
}

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
    phoff: u64,
    phentsize: u64,
    phnum: u64,
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

/// An open file with its length, read at checked offsets.
struct Source {
    file: File,
    len: u64,
}

impl Source {
    fn open(path: &Path) -> Result<Source, ElfError> {
        let file = File::open(path).map_err(|e| ElfError::Io(e.to_string()))?;
        let meta = file.metadata().map_err(|e| ElfError::Io(e.to_string()))?;
        if meta.is_dir() {
            return Err(ElfError::Io("it is a directory".into()));
        }
        Ok(Source {
            file,
            len: meta.len(),
        })
    }

    fn read(&mut self, off: u64, n: u64, what: &str) -> Result<Vec<u8>, ElfError> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => {}
            _ => {
                return Err(ElfError::Malformed(format!(
                "the {what} (bytes {off}..{}) runs past the end of the file ({} bytes; truncated?)",
                off.saturating_add(n),
                self.len
            )))
            }
        }
        let mut buf = vec![0u8; n as usize];
        self.file
            .seek(SeekFrom::Start(off))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| ElfError::Io(e.to_string()))?;
        Ok(buf)
    }
}

/// Fixed-width fields of one class and byte order.
#[derive(Clone, Copy)]
struct Fields {
    class64: bool,
    little: bool,
}

impl Fields {
    fn uint(&self, b: &[u8], off: usize, n: usize) -> Result<u64, ElfError> {
        let s = b
            .get(off..off + n)
            .ok_or_else(|| ElfError::Malformed(format!("a field at byte {off} is cut off")))?;
        let mut v = 0u64;
        for i in 0..n {
            let byte = if self.little { s[n - 1 - i] } else { s[i] };
            v = (v << 8) | byte as u64;
        }
        Ok(v)
    }

    /// An address-sized field (`Elf32_Addr`/`Elf64_Addr` and friends).
    fn word(&self, b: &[u8], off: usize) -> Result<u64, ElfError> {
        self.uint(b, off, if self.class64 { 8 } else { 4 })
    }
}

/// Read the file header: enough to tell whether the loader would accept
/// the file's class, byte order and machine.
pub fn read_header(path: &Path) -> Result<Header, ElfError> {
    let mut src = Source::open(path)?;
    header(&mut src)
}

fn header(src: &mut Source) -> Result<Header, ElfError> {
    let ident_len = src.len.min(64);
    let b = src.read(0, ident_len, "ELF header")?;
    if !b.starts_with(b"\x7fELF") {
        let n = b.len().min(4);
        return Err(ElfError::NotElf(format!(
            "no ELF magic (first bytes {:02x?})",
            &b[..n]
        )));
    }
    let class64 = match b.get(4) {
        Some(1) => false,
        Some(2) => true,
        other => return Err(ElfError::Malformed(format!("unknown ELF class {other:?}"))),
    };
    let little = match b.get(5) {
        Some(1) => true,
        Some(2) => false,
        other => {
            return Err(ElfError::Malformed(format!(
                "unknown ELF byte order {other:?}"
            )))
        }
    };
    let f = Fields { class64, little };
    let need = if class64 { 64 } else { 52 };
    if b.len() < need {
        return Err(ElfError::Malformed(format!(
            "the file is {} bytes, shorter than an ELF header ({need})",
            b.len()
        )));
    }
    let (phoff, base) = if class64 {
        (f.uint(&b, 0x20, 8)?, 0x36)
    } else {
        (f.uint(&b, 0x1c, 4)?, 0x2a)
    };
    Ok(Header {
        kind: ElfKind {
            class64,
            little_endian: little,
            machine: f.uint(&b, 18, 2)? as u16,
        },
        e_type: f.uint(&b, 16, 2)? as u16,
        phoff,
        phentsize: f.uint(&b, base, 2)?,
        phnum: f.uint(&b, base + 2, 2)?,
    })
}

impl Header {
    /// Is this a file the loader can map as a library (or an executable,
    /// for reading its interpreter and search paths)?
    pub fn type_problem(&self) -> Option<String> {
        match self.e_type {
            ET_DYN => None,
            ET_EXEC => Some("an executable (ET_EXEC), not a shared library".into()),
            1 => Some("a relocatable object (ET_REL, a .o file), not a shared library".into()),
            4 => Some("a core dump, not a shared library".into()),
            t => Some(format!("ELF file type {t}, not a shared library")),
        }
    }
}

struct Segment {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

/// Read the header and the dynamic segment.
pub fn read(path: &Path) -> Result<(Header, Dynamic), ElfError> {
    let mut src = Source::open(path)?;
    let h = header(&mut src)?;
    let d = dynamic(&mut src, &h)?;
    Ok((h, d))
}

fn segments(src: &mut Source, h: &Header) -> Result<Vec<Segment>, ElfError> {
    let f = Fields {
        class64: h.kind.class64,
        little: h.kind.little_endian,
    };
    let min = if f.class64 { 56 } else { 32 };
    if h.phnum > 0 && h.phentsize < min {
        return Err(ElfError::Malformed(format!(
            "program header entries of {} bytes (at least {min} expected)",
            h.phentsize
        )));
    }
    let table = src.read(h.phoff, h.phentsize * h.phnum, "program header table")?;
    let mut out = Vec::with_capacity(h.phnum as usize);
    for i in 0..h.phnum as usize {
        let p = i * h.phentsize as usize;
        let seg = if f.class64 {
            Segment {
                kind: f.uint(&table, p, 4)? as u32,
                offset: f.uint(&table, p + 8, 8)?,
                vaddr: f.uint(&table, p + 16, 8)?,
                filesz: f.uint(&table, p + 32, 8)?,
            }
        } else {
            Segment {
                kind: f.uint(&table, p, 4)? as u32,
                offset: f.uint(&table, p + 4, 4)?,
                vaddr: f.uint(&table, p + 8, 4)?,
                filesz: f.uint(&table, p + 16, 4)?,
            }
        };
        // The loader maps loadable segments as described; one that runs
        // past the end of the file is a truncated copy (and would fault
        // when touched).
        if seg.kind == PT_LOAD
            && seg
                .offset
                .checked_add(seg.filesz)
                .is_none_or(|e| e > src.len)
        {
            return Err(ElfError::Malformed(format!(
                "loadable segment {i} needs bytes {}..{} but the file has {} (truncated?)",
                seg.offset,
                seg.offset.saturating_add(seg.filesz),
                src.len
            )));
        }
        out.push(seg);
    }
    Ok(out)
}

fn dynamic(src: &mut Source, h: &Header) -> Result<Dynamic, ElfError> {
    let f = Fields {
        class64: h.kind.class64,
        little: h.kind.little_endian,
    };
    let segs = segments(src, h)?;
    let mut out = Dynamic::default();
    if let Some(s) = segs.iter().find(|s| s.kind == PT_INTERP) {
        let b = src.read(s.offset, s.filesz.min(4096), "program interpreter name")?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        out.interp = Some(String::from_utf8_lossy(&b[..end]).into_owned());
    }
    // No dynamic segment: a static object, which needs nothing.
    let Some(dynseg) = segs.iter().find(|s| s.kind == PT_DYNAMIC) else {
        return Ok(out);
    };
    let b = src.read(dynseg.offset, dynseg.filesz, "dynamic segment")?;
    let ent = if f.class64 { 16 } else { 8 };
    let half = ent / 2;
    let mut entries = Vec::new();
    for off in (0..b.len() / ent).map(|i| i * ent) {
        let tag = f.word(&b, off)?;
        if tag == DT_NULL {
            break;
        }
        entries.push((tag, f.word(&b, off + half)?));
    }
    let find = |t: u64| entries.iter().find(|e| e.0 == t).map(|e| e.1);
    if let Some(flags) = find(DT_FLAGS_1) {
        out.nodeflib = flags & DF_1_NODEFLIB != 0;
        out.pie = flags & DF_1_PIE != 0;
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
        .find(|s| s.kind == PT_LOAD && s.vaddr <= strtab && strtab - s.vaddr < s.filesz)
        .ok_or_else(|| ElfError::Malformed("DT_STRTAB lies in no loadable segment".into()))?;
    let start = strtab - seg.vaddr + seg.offset;
    let seg_left = seg.filesz - (strtab - seg.vaddr);
    let size = find(DT_STRSZ).unwrap_or(seg_left).min(seg_left);
    if size > MAX_STRTAB {
        return Err(ElfError::Malformed(format!(
            "a dynamic string table of {size} bytes"
        )));
    }
    let strings = src.read(start, size, "dynamic string table")?;
    let string = |off: u64| -> Result<String, ElfError> {
        let tail = strings.get(off as usize..).ok_or_else(|| {
            ElfError::Malformed(format!(
                "a dynamic entry names string {off}, past the string table's {size} bytes"
            ))
        })?;
        let len = tail
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| ElfError::Malformed("an unterminated dynamic string".into()))?;
        Ok(String::from_utf8_lossy(&tail[..len]).into_owned())
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
