//! Reading a manifest's bytes. The input comes from a file that may be
//! anything (truncated, corrupt, hostile), so every read is bounds-checked
//! and every rule broken is an error that says which; nothing panics.

use super::{keys, HEADER_SIZE, MAGIC, MAX_SIZE};
use crate::version::RlxAbiVersion;
use std::fmt;

/// A manifest as read from a library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddedManifest {
    /// The format the writer used (1 for this build's writer).
    pub format_version: u16,
    pub abi_version: RlxAbiVersion,
    pub name: String,
    pub version: String,
    /// Device kinds the build can drive; a load may find others.
    pub devices: Vec<String>,
    /// Op kinds; empty when the plugin does not list them.
    pub ops: Vec<String>,
    /// Entries of keys this reader does not know (a newer writer's), in
    /// order, for display.
    pub other: Vec<(String, String)>,
}

/// Why bytes are not a valid manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestError(pub String);

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ManifestError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ManifestError> {
    Err(ManifestError(msg.into()))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decode the contents of a manifest section. The manifest starts at the
/// section's first byte; bytes after its `total_size` must be zero (a
/// linker may pad a section, but two manifests in one are ambiguous).
pub fn parse(section: &[u8]) -> Result<EmbeddedManifest, ManifestError> {
    let len = section.len();
    if !section.starts_with(&MAGIC) {
        let shown = &section[..len.min(MAGIC.len())];
        return err(format!(
            "the section does not start with the manifest magic {:?} (first bytes {shown:02x?})",
            String::from_utf8_lossy(&MAGIC)
        ));
    }
    let fixed = HEADER_SIZE as usize;
    if len < fixed {
        return err(format!(
            "truncated: the section holds {len} bytes, the manifest header alone is {fixed}"
        ));
    }
    // Within the 32 bytes just checked.
    let format_version = u16_at(section, 8);
    let header_size = u16_at(section, 10) as usize;
    let total = u32_at(section, 12) as usize;
    let abi_version = RlxAbiVersion {
        major: u32_at(section, 16),
        minor: u32_at(section, 20),
        patch: u32_at(section, 24),
    };
    if format_version == 0 {
        return err("manifest format version 0 is not defined (format 1 is the first)");
    }
    if header_size < fixed {
        return err(format!(
            "header_size {header_size} is smaller than format 1's header ({fixed} bytes)"
        ));
    }
    if total > MAX_SIZE {
        return err(format!(
            "total_size {total} is larger than a manifest may be ({MAX_SIZE} bytes)"
        ));
    }
    if total > len {
        return err(format!(
            "truncated: total_size is {total} bytes but the section holds {len}"
        ));
    }
    if header_size > total {
        return err(format!(
            "header_size {header_size} is larger than total_size {total}"
        ));
    }
    if section[total..].iter().any(|&b| b != 0) {
        return err(format!(
            "the section has non-zero bytes after the manifest's {total} (two manifests in one \
             section, or a corrupt total_size)"
        ));
    }
    let body = &section[header_size..total];
    if body.last().is_some_and(|&b| b != 0) {
        return err("the last entry is not NUL-terminated (truncated?)");
    }
    let mut m = EmbeddedManifest {
        format_version,
        abi_version,
        name: String::new(),
        version: String::new(),
        devices: Vec::new(),
        ops: Vec::new(),
        other: Vec::new(),
    };
    let (mut name, mut version) = (None, None);
    // Empty strings (runs of NULs) are padding and skipped.
    for (i, raw) in body
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .enumerate()
    {
        let Ok(entry) = std::str::from_utf8(raw) else {
            return err(format!(
                "entry {i} is not UTF-8 ({:?})",
                String::from_utf8_lossy(raw)
            ));
        };
        let Some((key, value)) = entry.split_once('=') else {
            return err(format!("entry {i} ({entry:?}) is not key=value"));
        };
        if key.is_empty() {
            return err(format!("entry {i} ({entry:?}) has an empty key"));
        }
        let once = |slot: &mut Option<String>| {
            if slot.is_some() {
                return err(format!("`{key}` is given twice"));
            }
            if value.is_empty() {
                return err(format!("`{key}` is empty"));
            }
            *slot = Some(value.to_string());
            Ok(())
        };
        match key {
            keys::NAME => once(&mut name)?,
            keys::VERSION => once(&mut version)?,
            keys::DEVICE => m.devices.push(value.to_string()),
            keys::OP => m.ops.push(value.to_string()),
            _ => m.other.push((key.to_string(), value.to_string())),
        }
    }
    let (Some(name), Some(version)) = (name, version) else {
        return err("a manifest must give `name` and `version`");
    };
    m.name = name;
    m.version = version;
    Ok(m)
}

#[cfg(test)]
mod tests;
