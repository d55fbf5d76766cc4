//! `SHA256SUMS`: the one file a release signs, naming every archive's hash
//! in `sha256sum`'s format so `sha256sum -c` checks it too.

use crate::digest::{is_sha256_hex, sha256_reader};
use crate::durable::write_atomic;
use crate::error::PackageError;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// The file's name in a release.
pub const SUMS_NAME: &str = "SHA256SUMS";

/// Lowercase hex SHA-256 of a file's content.
pub fn sha256_file(path: &Path) -> Result<String, PackageError> {
    let mut file = File::open(path).map_err(|e| PackageError::io(path, e))?;
    let (hex, _) = sha256_reader(&mut file).map_err(|e| PackageError::io(path, e))?;
    Ok(hex)
}

/// Write `out_dir/SHA256SUMS` for these files (lines `"<hex>  <file name>\n"`, sorted by name), return its path.
pub fn write_sums(out_dir: &Path, files: &[PathBuf]) -> Result<PathBuf, PackageError> {
    let mut sums = BTreeMap::new();
    for path in files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| check_file_name(n).is_ok())
            .ok_or_else(|| {
                PackageError::new(format!(
                    "{}: not a plain UTF-8 file name for {SUMS_NAME}",
                    path.display()
                ))
            })?;
        let hex = sha256_file(path)?;
        if sums.insert(name.to_string(), hex).is_some() {
            return Err(PackageError::new(format!(
                "{name}: named twice in the files for {SUMS_NAME}"
            )));
        }
    }
    let text: String = sums
        .iter()
        .map(|(name, hex)| format!("{hex}  {name}\n"))
        .collect();
    fs::create_dir_all(out_dir).map_err(|e| PackageError::io(out_dir, e))?;
    let out = out_dir.join(SUMS_NAME);
    write_atomic(&out, text.as_bytes())?;
    Ok(out)
}

/// name -> hex; refuses malformed lines. Accepts `sha256sum`'s binary marker
/// (`<hex> *<name>`) and upper-case hex, which it lowers.
pub fn parse_sums(text: &str) -> Result<BTreeMap<String, String>, PackageError> {
    let mut sums = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let bad =
            |why: &str| PackageError::new(format!("{SUMS_NAME} line {}: {why}: {line:?}", i + 1));
        let (hex, rest) = line
            .split_at_checked(64)
            .ok_or_else(|| bad("not a SHA-256 in hex followed by a name"))?;
        let hex = hex.to_ascii_lowercase();
        if !is_sha256_hex(&hex) {
            return Err(bad("not a SHA-256 in hex"));
        }
        let name = rest
            .strip_prefix("  ")
            .or_else(|| rest.strip_prefix(" *"))
            .ok_or_else(|| bad("expected two spaces after the hash"))?;
        check_file_name(name).map_err(&bad)?;
        if sums.insert(name.to_string(), hex).is_some() {
            return Err(bad("file named twice"));
        }
    }
    Ok(sums)
}

/// A name that `SHA256SUMS` can hold unambiguously: a plain file name.
fn check_file_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name == "." || name == ".." {
        return Err("no file name");
    }
    if name.contains(['/', '\\', '\n', '\r', '\0']) {
        return Err("the file name is not a plain name");
    }
    if name.trim() != name {
        return Err("the file name begins or ends with white space");
    }
    Ok(())
}
