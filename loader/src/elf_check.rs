//! A structural check of ELF files before they reach the dynamic loader.
//!
//! glibc maps a library's segments as its program headers describe them;
//! when the file is shorter than a segment (a truncated copy, an interrupted
//! download), touching the missing pages raises SIGBUS inside `dlopen` and
//! kills the host. Checking that every table and loadable segment lies
//! within the file turns that into a load error.

/// Check an ELF image's headers against its length. `Ok` for non-ELF
/// files (other formats are left to their loaders).
pub fn check_elf_bounds(bytes: &[u8]) -> Result<(), String> {
    if !bytes.starts_with(b"\x7fELF") {
        return Ok(());
    }
    let len = bytes.len() as u64;
    let class64 = match bytes.get(4) {
        Some(1) => false,
        Some(2) => true,
        other => return Err(format!("unknown ELF class {other:?}")),
    };
    let little = match bytes.get(5) {
        Some(1) => true,
        Some(2) => false,
        other => return Err(format!("unknown ELF byte order {other:?}")),
    };
    let rd = |off: u64, n: usize| -> Result<u64, String> {
        let s = bytes
            .get(off as usize..off as usize + n)
            .ok_or_else(|| format!("the file ends at byte {len}, inside the ELF header tables"))?;
        let mut v = 0u64;
        for i in 0..n {
            let b = if little { s[n - 1 - i] } else { s[i] };
            v = (v << 8) | b as u64;
        }
        Ok(v)
    };
    let (phoff, shoff) = if class64 {
        (rd(0x20, 8)?, rd(0x28, 8)?)
    } else {
        (rd(0x1c, 4)?, rd(0x20, 4)?)
    };
    let base = if class64 { 0x36 } else { 0x2a };
    let (phentsize, phnum) = (rd(base, 2)?, rd(base + 2, 2)?);
    let (shentsize, shnum) = (rd(base + 4, 2)?, rd(base + 6, 2)?);
    let table_end = |off: u64, ent: u64, num: u64| off.checked_add(ent.checked_mul(num)?);
    match table_end(phoff, phentsize, phnum) {
        Some(end) if end <= len => {}
        _ => {
            return Err(format!(
                "program headers end past the file's {len} bytes (truncated?)"
            ))
        }
    }
    if shnum > 0 {
        match table_end(shoff, shentsize, shnum) {
            Some(end) if end <= len => {}
            _ => {
                return Err(format!(
                    "section headers end past the file's {len} bytes (truncated?)"
                ))
            }
        }
    }
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let p_type = rd(ph, 4)?;
        const PT_LOAD: u64 = 1;
        if p_type != PT_LOAD {
            continue;
        }
        let (offset, filesz) = if class64 {
            (rd(ph + 8, 8)?, rd(ph + 32, 8)?)
        } else {
            (rd(ph + 4, 4)?, rd(ph + 16, 4)?)
        };
        match offset.checked_add(filesz) {
            Some(end) if end <= len => {}
            _ => {
                return Err(format!(
                "loadable segment {i} needs bytes {offset}..{} but the file has {len} (truncated?)",
                offset.saturating_add(filesz)
            ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_images_pass_and_truncated_ones_do_not() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        if !exe.starts_with(b"\x7fELF") {
            return; // not an ELF platform
        }
        assert_eq!(check_elf_bounds(&exe), Ok(()));
        let e = check_elf_bounds(&exe[..exe.len() / 2]).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        assert!(check_elf_bounds(&exe[..20]).is_err());
        assert_eq!(check_elf_bounds(b"not elf"), Ok(()));
    }
}
