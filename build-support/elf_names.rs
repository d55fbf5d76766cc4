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
//! other files are an error, never a silent no-op.

/// The soname (and file name) of the CUDA build's libmlx in the
/// `mlx-cuda` plugin directory. No longer than `libmlx.so`, so that the
/// in-place rewrite fits.
pub const CUDA_LIBMLX: &str = "mlx-cu.so";
/// The soname both MLX wheels give libmlx.
pub const WHEEL_LIBMLX: &str = "libmlx.so";

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;

/// Which dynamic entries to rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The library's own name (`DT_SONAME`).
    Soname,
    /// A library it needs (`DT_NEEDED`).
    Needed,
}

fn u16_at(b: &[u8], off: usize) -> Result<u16, String> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| format!("the file ends inside the ELF header (byte {off})"))
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, String> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("the file ends inside an ELF table (byte {off})"))
}

fn u64_at(b: &[u8], off: usize) -> Result<u64, String> {
    b.get(off..off + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("the file ends inside an ELF table (byte {off})"))
}

struct Segment {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

fn segments(b: &[u8]) -> Result<Vec<Segment>, String> {
    if !b.starts_with(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let phoff = u64_at(b, 0x20)? as usize;
    let phentsize = u16_at(b, 0x36)? as usize;
    let phnum = u16_at(b, 0x38)? as usize;
    (0..phnum)
        .map(|i| {
            let p = phoff + i * phentsize;
            Ok(Segment {
                kind: u32_at(b, p)?,
                offset: u64_at(b, p + 8)?,
                vaddr: u64_at(b, p + 16)?,
                filesz: u64_at(b, p + 32)?,
            })
        })
        .collect()
}

/// The dynamic entries (tag, value) and the file range of the dynamic
/// string table.
struct Dynamic {
    entries: Vec<(u64, u64)>,
    strtab: std::ops::Range<usize>,
}

fn dynamic(b: &[u8]) -> Result<Dynamic, String> {
    let segs = segments(b)?;
    let dynseg = segs
        .iter()
        .find(|s| s.kind == PT_DYNAMIC)
        .ok_or("no dynamic segment (a static executable?)")?;
    let mut entries = Vec::new();
    let mut off = dynseg.offset as usize;
    let end = off + dynseg.filesz as usize;
    while off + 16 <= end {
        let tag = u64_at(b, off)?;
        if tag == DT_NULL {
            break;
        }
        entries.push((tag, u64_at(b, off + 8)?));
        off += 16;
    }
    let find = |t: u64| entries.iter().find(|e| e.0 == t).map(|e| e.1);
    let strtab = find(DT_STRTAB).ok_or("no DT_STRTAB")?;
    let strsz = find(DT_STRSZ).ok_or("no DT_STRSZ")?;
    // DT_STRTAB is an address; the loadable segment holding it maps it to
    // a file offset.
    let seg = segs
        .iter()
        .find(|s| s.kind == PT_LOAD && s.vaddr <= strtab && strtab < s.vaddr + s.filesz)
        .ok_or("DT_STRTAB lies in no loadable segment")?;
    let start = (strtab - seg.vaddr + seg.offset) as usize;
    let range = start..start + strsz as usize;
    if range.end > b.len() {
        return Err("the dynamic string table runs past the end of the file".into());
    }
    Ok(Dynamic {
        entries,
        strtab: range,
    })
}

fn string_at(b: &[u8], strtab: &std::ops::Range<usize>, off: u64) -> Result<String, String> {
    let start = strtab.start + off as usize;
    let tail = b
        .get(start..strtab.end)
        .ok_or("a dynamic entry points past the string table")?;
    let len = tail
        .iter()
        .position(|&c| c == 0)
        .ok_or("an unterminated string")?;
    Ok(String::from_utf8_lossy(&tail[..len]).into_owned())
}

/// The names the `which` entries hold (the sonames it needs, or its own).
pub fn names(b: &[u8], which: Entry) -> Result<Vec<String>, String> {
    let Dynamic { entries, strtab } = dynamic(b)?;
    let tag = match which {
        Entry::Soname => DT_SONAME,
        Entry::Needed => DT_NEEDED,
    };
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
    let tag = match which {
        Entry::Soname => DT_SONAME,
        Entry::Needed => DT_NEEDED,
    };
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
