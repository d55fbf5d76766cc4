//! Whether an archive may be installed: signed sums from a trusted key, or,
//! when the user trusts no key, `--allow-unsigned` (and then whatever
//! checks are still possible, said out loud).

use super::record::Verification;
use crate::{parse_sums, verify, PackageError};
use std::path::{Path, PathBuf};

/// What came with the archive: the release's `SHA256SUMS` and its
/// signature, when they could be found.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    pub sums: Option<String>,
    pub signature: Option<String>,
}

/// The keys under `dir` (`*.pub`), as (file, text); none when it is missing.
pub fn trusted_keys(dir: &Path) -> Result<Vec<(String, String)>, PackageError> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pub"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).map_err(|e| PackageError::io(&p, e))?;
            Ok((p.display().to_string(), text))
        })
        .collect()
}

/// Judge the archive; `Ok` with how it is verified and what was skipped.
pub(super) fn judge(
    archive: &Path,
    archive_sha256: &str,
    ev: &Evidence,
    keys: &[(String, String)],
    allow_unsigned: bool,
) -> Result<(Verification, Vec<String>), PackageError> {
    let file = archive
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| PackageError::new(format!("{}: not a file name", archive.display())))?;
    let hash_in_sums = |sums: &str| -> Result<(), PackageError> {
        let listed = parse_sums(sums)?;
        let want = listed
            .get(file)
            .ok_or_else(|| PackageError::new(format!("SHA256SUMS does not list {file}")))?;
        let got = archive_sha256;
        if got != want {
            return Err(PackageError::new(format!(
                "{file}: sha256 {got} is not the {want} SHA256SUMS lists (a damaged or altered archive)"
            )));
        }
        Ok(())
    };
    if !keys.is_empty() {
        let (Some(sums), Some(sig)) = (&ev.sums, &ev.signature) else {
            return Err(PackageError::new(format!(
                "a signature is required (trusted keys: {}), but no SHA256SUMS and \
                 SHA256SUMS.minisig were found beside the archive",
                keys.iter()
                    .map(|(f, _)| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let texts: Vec<String> = keys.iter().map(|(_, t)| t.clone()).collect();
        let which = verify(sums.as_bytes(), sig, &texts).map_err(|e| {
            PackageError::new(format!(
                "SHA256SUMS.minisig: {e} (no trusted key verifies it)"
            ))
        })?;
        hash_in_sums(sums)?;
        return Ok((
            Verification::Signed {
                key: keys[which].0.clone(),
            },
            Vec::new(),
        ));
    }
    if !allow_unsigned {
        return Err(PackageError::new(
            "no trusted key: pass --key PUBKEY (the publisher's minisign .pub), put it in \
             $RLX_HOME/trusted-keys/, or pass --allow-unsigned to install without a signature",
        ));
    }
    let mut skipped = vec!["the signature (no trusted key)".to_string()];
    match &ev.sums {
        Some(sums) => hash_in_sums(sums)?,
        None => skipped.push("the archive's hash in SHA256SUMS (none beside it)".into()),
    }
    Ok((
        Verification::Unsigned {
            sums: ev.sums.is_some(),
        },
        skipped,
    ))
}
