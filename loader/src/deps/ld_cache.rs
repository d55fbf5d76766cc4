//! The system's library cache, `/etc/ld.so.cache`, as glibc's loader reads
//! it: a table of (soname, flags, path) written by `ldconfig`.
//!
//! The file is read in the "glibc-ld.so.cache1.1" format (alone, as glibc
//! 2.32 and later write it, or after the old "ld.so-1.7.0" table). A file
//! in neither format is read through `ldconfig -p` instead. Entries a
//! loader of another ELF class or machine would use are told apart by
//! their flags, as the loader does (`_dl_cache_check_flags`).

use super::elf::ElfKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where glibc's loader looks for its cache.
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";

const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const FLAG_TYPE_MASK: u32 = 0x00ff;
const FLAG_ELF_LIBC6: u32 = 0x0003;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    name: String,
    path: PathBuf,
    /// The entry's flags; `None` when read from `ldconfig -p` output with
    /// an architecture tag not known here (the caller's header check then
    /// decides).
    flags: Option<u32>,
    /// Non-zero for entries of glibc-hwcaps or legacy hwcap
    /// subdirectories, which the loader prefers only where the CPU
    /// supports them; they are not used here.
    hwcap: u64,
}

/// A parsed library cache.
#[derive(Clone, Debug, Default)]
pub struct LdCache {
    entries: Vec<Entry>,
    /// Where it came from, for reports: the file's path, `ldconfig -p`, or
    /// why there is none.
    pub source: String,
}

impl LdCache {
    /// No cache at all (the loader then goes on to its default
    /// directories).
    pub fn empty(why: &str) -> LdCache {
        LdCache {
            entries: Vec::new(),
            source: why.to_string(),
        }
    }

    /// The system's cache: [`LD_SO_CACHE`], else `ldconfig -p`.
    pub fn system() -> LdCache {
        let path = Path::new(LD_SO_CACHE);
        match std::fs::read(path) {
            Ok(bytes) => match LdCache::parse(&bytes) {
                Ok(mut c) => {
                    c.source = LD_SO_CACHE.to_string();
                    c
                }
                Err(_) => LdCache::from_ldconfig(),
            },
            // No cache file: the loader uses none.
            Err(e) => LdCache::empty(&format!("{LD_SO_CACHE}: {e}")),
        }
    }

    fn from_ldconfig() -> LdCache {
        let out = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
            .iter()
            .find_map(|exe| Command::new(exe).arg("-p").output().ok());
        match out {
            Some(o) if o.status.success() => {
                let mut c = LdCache::parse_ldconfig_output(&String::from_utf8_lossy(&o.stdout));
                c.source = format!("{LD_SO_CACHE} (read through `ldconfig -p`)");
                c
            }
            _ => LdCache::empty(&format!(
                "{LD_SO_CACHE}: an unknown format, and `ldconfig -p` did not run"
            )),
        }
    }

    /// Parse the cache file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<LdCache, String> {
        let u32_at = |off: usize, little: bool| -> Result<u32, String> {
            let s: [u8; 4] = bytes
                .get(off..off + 4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| format!("the cache ends at byte {}", bytes.len()))?;
            Ok(if little {
                u32::from_le_bytes(s)
            } else {
                u32::from_be_bytes(s)
            })
        };
        // The old format (a table of 12-byte entries) may precede the new
        // one, which then starts at the next 8-byte boundary.
        let start = if bytes.starts_with(OLD_MAGIC) {
            let n = u32_at(12, cfg!(target_endian = "little"))? as usize;
            (16 + n * 12).next_multiple_of(8)
        } else {
            0
        };
        if bytes.get(start..start + NEW_MAGIC.len()) != Some(NEW_MAGIC) {
            return Err("not a glibc-ld.so.cache1.1 file".into());
        }
        // Byte 28 of the header says the byte order: 2 little, 3 big, 0
        // (older ldconfig) the machine's own.
        let little = match bytes.get(start + 28) {
            Some(2) => true,
            Some(3) => false,
            _ => cfg!(target_endian = "little"),
        };
        let nlibs = u32_at(start + 20, little)? as usize;
        let mut entries = Vec::with_capacity(nlibs.min(1 << 16));
        // String offsets count from the start of the new header.
        let string = |off: u32| -> Result<String, String> {
            let tail = bytes
                .get(start + off as usize..)
                .ok_or("a cache entry points past the end of the file")?;
            let len = tail
                .iter()
                .position(|&c| c == 0)
                .ok_or("an unterminated string in the cache")?;
            Ok(String::from_utf8_lossy(&tail[..len]).into_owned())
        };
        for i in 0..nlibs {
            // struct file_entry_new: flags, key, value, osversion, hwcap.
            let e = start + 48 + i * 24;
            let flags = u32_at(e, little)?;
            let name = string(u32_at(e + 4, little)?)?;
            let path = PathBuf::from(string(u32_at(e + 8, little)?)?);
            let (lo, hi) = (u32_at(e + 16, little)?, u32_at(e + 20, little)?);
            let hwcap = if little {
                (hi as u64) << 32 | lo as u64
            } else {
                (lo as u64) << 32 | hi as u64
            };
            entries.push(Entry {
                name,
                path,
                flags: Some(flags),
                hwcap,
            });
        }
        Ok(LdCache {
            entries,
            source: String::new(),
        })
    }

    /// Parse `ldconfig -p` output: `\tNAME (TAGS) => PATH` lines.
    pub fn parse_ldconfig_output(text: &str) -> LdCache {
        let mut entries = Vec::new();
        for line in text.lines() {
            let Some((left, path)) = line.split_once(" => ") else {
                continue;
            };
            let Some((name, tags)) = left.trim().split_once(" (") else {
                continue;
            };
            let tags = tags.trim_end_matches(')');
            // Entries of hwcap subdirectories carry an extra tag
            // (`hwcap: ...`); they are skipped like the file's.
            let hwcap = u64::from(tags.contains("hwcap"));
            entries.push(Entry {
                name: name.to_string(),
                path: PathBuf::from(path.trim()),
                flags: flags_of_tags(tags),
                hwcap,
            });
        }
        LdCache {
            entries,
            source: "ldconfig -p".into(),
        }
    }

    /// The paths the cache gives for `name` to a loader of kind `kind`, in
    /// the cache's order (the loader takes the first).
    pub fn lookup(&self, name: &str, kind: &ElfKind) -> Vec<&Path> {
        let want = cache_flags(kind);
        self.entries
            .iter()
            .filter(|e| e.name == name && e.hwcap == 0)
            .filter(|e| match (e.flags, want) {
                (Some(f), Some(w)) => f == w,
                (Some(f), None) => f & FLAG_TYPE_MASK == FLAG_ELF_LIBC6,
                (None, _) => true,
            })
            .map(|e| e.path.as_path())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The flags a glibc loader of `kind` accepts (`_DL_CACHE_DEFAULT_ID` of
/// its port); `None` for machines not listed here.
fn cache_flags(kind: &ElfKind) -> Option<u32> {
    let arch = match (kind.machine, kind.class64) {
        (62, true) => 0x0300,  // x86-64
        (62, false) => 0x0800, // x32
        (3, false) => 0x0000,  // i386
        (183, true) => 0x0a00, // AArch64
        (21, true) => 0x0500,  // PowerPC64
        (22, true) => 0x0400,  // s390x
        _ => return None,
    };
    Some(FLAG_ELF_LIBC6 | arch)
}

/// The flags `ldconfig -p` spells as a tag list such as `libc6,x86-64`.
fn flags_of_tags(tags: &str) -> Option<u32> {
    let mut parts = tags.split(',').map(str::trim);
    if parts.next() != Some("libc6") {
        // libc5 and a.out entries: no glibc loader uses them.
        return Some(0);
    }
    let arch = match parts.next() {
        None => 0x0000,
        Some("x86-64") => 0x0300,
        Some("x32") => 0x0800,
        Some("AArch64") => 0x0a00,
        Some("64bit") => 0x0500,
        Some(_) => return None,
    };
    Some(FLAG_ELF_LIBC6 | arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_64: ElfKind = ElfKind {
        class64: true,
        little_endian: true,
        machine: 62,
    };
    const I386: ElfKind = ElfKind {
        class64: false,
        little_endian: true,
        machine: 3,
    };

    /// A cache file in the new format with the given entries.
    fn cache_file(entries: &[(u32, &str, &str, u64)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let strings_at = 48 + entries.len() * 24;
        let mut table = Vec::new();
        for (flags, name, path, hwcap) in entries {
            let key = strings_at + strings.len();
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
            let value = strings_at + strings.len();
            strings.extend_from_slice(path.as_bytes());
            strings.push(0);
            for v in [*flags, key as u32, value as u32, 0] {
                table.extend_from_slice(&v.to_le_bytes());
            }
            table.extend_from_slice(&hwcap.to_le_bytes());
        }
        let mut b = NEW_MAGIC.to_vec();
        b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        b.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        b.extend_from_slice(&[2, 0, 0, 0]);
        b.extend_from_slice(&[0; 16]);
        assert_eq!(b.len(), 48);
        b.extend(table);
        b.extend(strings);
        b
    }

    #[test]
    fn entries_are_picked_by_the_loaders_flags() {
        let bytes = cache_file(&[
            (0x0003, "libz.so.1", "/lib/i386-linux-gnu/libz.so.1", 0),
            (0x0303, "libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", 0),
            (
                0x0303,
                "libz.so.1",
                "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libz.so.1",
                1 << 62,
            ),
            (0x0303, "libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6", 0),
        ]);
        let c = LdCache::parse(&bytes).unwrap();
        assert_eq!(c.len(), 4);
        assert_eq!(
            c.lookup("libz.so.1", &X86_64),
            [Path::new("/lib/x86_64-linux-gnu/libz.so.1")]
        );
        assert_eq!(
            c.lookup("libz.so.1", &I386),
            [Path::new("/lib/i386-linux-gnu/libz.so.1")]
        );
        assert!(c.lookup("libm.so.6", &I386).is_empty());
        assert!(c.lookup("libnone.so", &X86_64).is_empty());

        // Behind an old-format table.
        let mut old = OLD_MAGIC.to_vec();
        old.push(0);
        old.extend_from_slice(&1u32.to_ne_bytes());
        old.extend_from_slice(&[0; 12]);
        old.resize(32, 0);
        // String offsets count from the new header, so the same bytes work.
        old.extend_from_slice(&bytes);
        let c = LdCache::parse(&old).unwrap();
        assert_eq!(c.lookup("libm.so.6", &X86_64).len(), 1);

        assert!(LdCache::parse(b"garbage").is_err());
        assert!(LdCache::parse(&bytes[..60]).is_err());
        let mut bad = bytes.clone();
        bad[48 + 4] = 0xff; // a key far past the end
        bad[48 + 5] = 0xff;
        assert!(LdCache::parse(&bad).is_err());
    }

    #[test]
    fn ldconfig_output_is_read_the_same_way() {
        let c = LdCache::parse_ldconfig_output(
            "3 libs found in cache `/etc/ld.so.cache'\n\
             \tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n\
             \tlibz.so.1 (libc6) => /lib/i386-linux-gnu/libz.so.1\n\
             \tlibz.so.1 (libc6,x86-64, hwcap: \"x86-64-v3\") => /lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libz.so.1\n",
        );
        assert_eq!(c.len(), 3);
        assert_eq!(
            c.lookup("libz.so.1", &X86_64),
            [Path::new("/lib/x86_64-linux-gnu/libz.so.1")]
        );
        assert_eq!(
            c.lookup("libz.so.1", &I386),
            [Path::new("/lib/i386-linux-gnu/libz.so.1")]
        );
    }

    /// The system's cache file and `ldconfig -p` agree (where both exist).
    #[test]
    fn the_system_cache_matches_ldconfig() {
        let Ok(bytes) = std::fs::read(LD_SO_CACHE) else {
            return;
        };
        let Ok(file) = LdCache::parse(&bytes) else {
            return;
        };
        let Some(out) = Command::new("ldconfig").arg("-p").output().ok() else {
            return;
        };
        let listed = LdCache::parse_ldconfig_output(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(file.len(), listed.len());
        let kind = ElfKind::compiled();
        for e in &listed.entries {
            if e.hwcap == 0 && e.flags == cache_flags(&kind) {
                assert!(
                    file.lookup(&e.name, &kind).contains(&e.path.as_path()),
                    "{e:?}"
                );
            }
        }
    }
}
