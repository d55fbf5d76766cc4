//! Renaming a shared library's soname, and a library's need for it, in
//! place in its ELF dynamic string table.
//!
//! Why: the CPU and the CUDA builds of libmlx both call themselves
//! `libmlx.so`, and the dynamic loader binds a library's `DT_NEEDED` name to
//! an already loaded object of that soname, whichever directory it came
//! from. With both plugin directories in one process, the second plugin
//! would run on the first one's libmlx. The CUDA directory therefore gets a
//! libmlx whose soname is [`CUDA_LIBMLX`], and a copy of the plugin library
//! that needs it by that name.
//!
//! The rewrite is in place: the new name must not be longer than the old
//! one (the rest of the old string becomes NULs), and the old string must
//! not be shared as the tail of another string (linkers merge string
//! tails). Only 64-bit little-endian ELF (x86-64, AArch64 Linux) is handled;
//! other files are an error, never a silent no-op. The headers and tables
//! are read with the `object` crate; only the rewrite is done here.

use object::elf::{
    FileHeader64, DT_NEEDED, DT_NULL, DT_SONAME, DT_STRSZ, DT_STRTAB, ELFMAG, PT_DYNAMIC, PT_LOAD,
};
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::{LittleEndian, ReadRef, StringTable};
use std::mem::size_of;
use std::ops::Range;

/// The soname (and file name) of the CUDA build's libmlx in the
/// `mlx-cuda` plugin directory. No longer than `libmlx.so`, so that the
/// in-place rewrite fits.
pub const CUDA_LIBMLX: &str = "mlx-cu.so";
/// The soname both MLX wheels give libmlx.
pub const WHEEL_LIBMLX: &str = "libmlx.so";

/// The one layout handled (see above).
type Elf = FileHeader64<LittleEndian>;
const LE: LittleEndian = LittleEndian;

/// Which dynamic entries to rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The library's own name (`DT_SONAME`).
    Soname,
    /// A library it needs (`DT_NEEDED`).
    Needed,
}

impl Entry {
    fn tag(self) -> i64 {
        match self {
            Entry::Soname => DT_SONAME,
            Entry::Needed => DT_NEEDED,
        }
    }
}

/// The dynamic entries (tag, value) and the file range of the dynamic
/// string table.
struct Dynamic {
    entries: Vec<(i64, u64)>,
    strtab: Range<usize>,
}

fn dynamic(b: &[u8]) -> Result<Dynamic, String> {
    if !b.starts_with(&ELFMAG) {
        return Err("not an ELF file".into());
    }
    // Not `FileHeader::parse`: it also refuses an `EI_VERSION` other than
    // 1, which the rewrite has no reason to.
    let h: &Elf = b
        .read_at(0)
        .map_err(|()| "the file ends inside the ELF header")?;
    if !h.is_class_64() || !h.is_little_endian() {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let segs = h.program_headers(LE, b).map_err(|e| e.to_string())?;
    let dynseg = segs
        .iter()
        .find(|s| s.p_type(LE) == PT_DYNAMIC)
        .ok_or("no dynamic segment (a static executable?)")?;
    let bytes = dynseg
        .data(LE, b)
        .map_err(|()| "the dynamic segment runs past the end of the file")?;
    // Entries up to DT_NULL, as the loader reads them; a partial entry at
    // the end of the segment is none.
    let count = bytes.len() / size_of::<<Elf as FileHeader>::Dyn>();
    let (dyns, _) = object::slice_from_bytes::<<Elf as FileHeader>::Dyn>(bytes, count)
        .map_err(|()| "the dynamic segment cannot be read")?;
    let entries: Vec<(i64, u64)> = dyns
        .iter()
        .map(|d| (d.tag(LE), d.val(LE)))
        .take_while(|e| e.0 != DT_NULL)
        .collect();
    let find = |t: i64| entries.iter().find(|e| e.0 == t).map(|e| e.1);
    let strtab = find(DT_STRTAB).ok_or("no DT_STRTAB")?;
    let strsz = find(DT_STRSZ).ok_or("no DT_STRSZ")?;
    // DT_STRTAB is an address; the loadable segment holding it maps it to
    // a file offset.
    let seg = segs
        .iter()
        .find(|s| {
            s.p_type(LE) == PT_LOAD
                && s.p_vaddr(LE) <= strtab
                && strtab - s.p_vaddr(LE) < s.p_filesz(LE)
        })
        .ok_or("DT_STRTAB lies in no loadable segment")?;
    let past_end = "the dynamic string table runs past the end of the file";
    let start = (strtab - seg.p_vaddr(LE))
        .checked_add(seg.p_offset(LE))
        .and_then(|s| usize::try_from(s).ok())
        .ok_or(past_end)?;
    let end = usize::try_from(strsz)
        .ok()
        .and_then(|n| start.checked_add(n))
        .filter(|&e| e <= b.len())
        .ok_or(past_end)?;
    Ok(Dynamic {
        entries,
        strtab: start..end,
    })
}

fn string_at(b: &[u8], strtab: &Range<usize>, off: u64) -> Result<String, String> {
    let table = StringTable::new(b, strtab.start as u64, strtab.end as u64);
    match u32::try_from(off).map(|o| table.get(o)) {
        Ok(Ok(s)) => Ok(String::from_utf8_lossy(s).into_owned()),
        _ if off < strtab.len() as u64 => Err("an unterminated string".into()),
        _ => Err("a dynamic entry points past the string table".into()),
    }
}

/// The names the `which` entries hold (the sonames it needs, or its own).
pub fn names(b: &[u8], which: Entry) -> Result<Vec<String>, String> {
    let Dynamic { entries, strtab } = dynamic(b)?;
    let tag = which.tag();
    entries
        .iter()
        .filter(|e| e.0 == tag)
        .map(|e| string_at(b, &strtab, e.1))
        .collect()
}

/// Rewrites the `which` entry equal to `from` into `to`, in place. Errors
/// when no such entry exists, when `to` is longer than `from`, or when the
/// string is shared with another one.
pub fn rename(b: &mut [u8], which: Entry, from: &str, to: &str) -> Result<(), String> {
    if to.len() > from.len() || to.is_empty() || to.contains('\0') {
        return Err(format!(
            "cannot rename {from:?} to {to:?} in place: the new name must be non-empty and \
             at most {} bytes",
            from.len()
        ));
    }
    let Dynamic { entries, strtab } = dynamic(b)?;
    let tag = which.tag();
    let mut offsets = Vec::new();
    for e in entries.iter().filter(|e| e.0 == tag) {
        if string_at(b, &strtab, e.1)? == from {
            offsets.push(strtab.start + e.1 as usize);
        }
    }
    offsets.dedup();
    if offsets.is_empty() {
        return Err(format!("no {which:?} entry named {from:?}"));
    }
    // Every check before any write, so a refused rename changes nothing.
    for &start in &offsets {
        // Another string ending in `from` would be shortened too.
        if start > strtab.start && b[start - 1] != 0 {
            return Err(format!(
                "{from:?} shares its bytes with a longer string; cannot rename it in place"
            ));
        }
    }
    for start in offsets {
        let slot = &mut b[start..start + from.len()];
        slot.fill(0);
        slot[..to.len()].copy_from_slice(to.as_bytes());
    }
    Ok(())
}

/// Copies the library at `src` to `dst` with one entry renamed, through a
/// temporary file so that a loader never sees half a library.
pub fn copy_renamed(
    src: &std::path::Path,
    dst: &std::path::Path,
    which: Entry,
    from: &str,
    to: &str,
) -> Result<(), String> {
    let mut bytes = std::fs::read(src).map_err(|e| format!("reading {}: {e}", src.display()))?;
    rename(&mut bytes, which, from, to).map_err(|e| format!("{}: {e}", src.display()))?;
    let tmp = dst.with_file_name(format!(
        ".{}.{}",
        dst.file_name()
            .map_or("lib".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    std::fs::write(&tmp, &bytes).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(src)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o755);
        let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode));
    }
    std::fs::rename(&tmp, dst).map_err(|e| format!("installing {}: {e}", dst.display()))
}
