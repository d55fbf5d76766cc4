//! A structural check of an ELF file before it reaches the dynamic loader.
//!
//! glibc maps a library's segments as its program headers describe them;
//! when the file is shorter than a segment (a truncated copy, an interrupted
//! download), touching the missing pages raises SIGBUS inside `dlopen` and
//! kills the host. Checking that the header tables and every loadable
//! segment lie within the file turns that into a load error. Only the
//! headers and the two tables are read (`source.rs`), never the segments.

use super::source::Source;
use super::{file_start, header, program_headers, ElfError};
use object::elf::{FileHeader32, FileHeader64};
use object::read::elf::FileHeader;
use object::Endianness;
use std::mem::size_of;
use std::path::Path;

/// Check that the ELF file at `path` holds its header tables and loadable
/// segments. [`ElfError::NotElf`] for another format, which is left to its
/// own loader.
pub fn check_elf_bounds(path: &Path) -> Result<(), ElfError> {
    let src = Source::open(path)?;
    let h = header(&src)?;
    if h.kind.class64 {
        tables::<FileHeader64<Endianness>>(&src, h.endian())
    } else {
        tables::<FileHeader32<Endianness>>(&src, h.endian())
    }
}

fn tables<Elf: FileHeader<Endian = Endianness>>(
    src: &Source,
    endian: Endianness,
) -> Result<(), ElfError> {
    let h: &Elf = file_start(src)?;
    program_headers(src, h, endian)?;
    // The loader never reads the section headers; a table cut off is
    // still a sign of a truncated copy.
    h.section_headers(endian, src.data()).map_err(|e| {
        let size = size_of::<Elf::SectionHeader>() as u64 * u64::from(h.e_shnum(endian));
        src.failed("section header table", h.e_shoff(endian).into(), size, e)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: &[u8]) -> Result<(), ElfError> {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("lib.so");
        std::fs::write(&p, bytes).unwrap();
        check_elf_bounds(&p)
    }

    #[test]
    fn whole_images_pass_and_truncated_ones_do_not() {
        let exe = std::env::current_exe().unwrap();
        if check_elf_bounds(&exe).is_err_and(|e| matches!(e, ElfError::NotElf(_))) {
            return; // not an ELF platform
        }
        assert_eq!(check_elf_bounds(&exe), Ok(()));
        let bytes = std::fs::read(&exe).unwrap();
        for cut in [bytes.len() / 2, 4096] {
            match check(&bytes[..cut]) {
                Err(ElfError::Malformed(e)) => assert!(e.contains("truncated"), "{e}"),
                r => panic!("{cut} bytes: {r:?}"),
            }
        }
        assert!(matches!(check(&bytes[..20]), Err(ElfError::Malformed(_))));
        assert!(matches!(check(b"not elf"), Err(ElfError::NotElf(_))));
        assert!(matches!(
            check_elf_bounds(&exe.with_file_name("absent")),
            Err(ElfError::Io(_))
        ));
    }

    #[test]
    fn corrupt_headers_are_errors_not_panics() {
        use std::io::{Seek, SeekFrom, Write};
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        if !bytes.starts_with(b"\x7fELF") || bytes[4] != 2 || bytes[5] != 1 {
            return; // the offsets below are those of a 64-bit LSB header
        }
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("lib.so");
        std::fs::write(&p, &bytes).unwrap();
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        let fields = [
            ("EI_CLASS", 4, 1),
            ("EI_DATA", 5, 1),
            ("e_phoff", 0x20, 8),
            ("e_shoff", 0x28, 8),
            ("e_phentsize", 0x36, 2),
            ("e_phnum", 0x38, 2),
            ("e_shentsize", 0x3a, 2),
            ("e_shnum", 0x3c, 2),
        ];
        for (name, at, n) in fields {
            for v in [0u8, 3, 0xff] {
                let mut h = bytes[..64].to_vec();
                h[at..at + n].fill(v);
                f.seek(SeekFrom::Start(0)).unwrap();
                f.write_all(&h).unwrap();
                let r = check_elf_bounds(&p);
                let refused = matches!(r, Err(ElfError::Malformed(_)));
                assert!(refused || r.is_ok(), "{name}={v:#x}: {r:?}");
                // Fewer headers, or none (a count or offset of 0), can be
                // consistent; a bad class, byte order or entry size, or a
                // table past the end, cannot.
                let must_refuse = match name {
                    "e_phoff" | "e_shoff" => v != 0,
                    "e_phnum" => false,
                    "e_shnum" => v == 0xff,
                    _ => true,
                };
                assert!(refused || !must_refuse, "{name}={v:#x}: {r:?}");
            }
        }
    }
}
