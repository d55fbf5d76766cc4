//! Minisign keys and signatures in minisign's own file formats, so releases
//! can be signed here or with the `minisign` CLI and checked with either.
//! `minisign` makes keys and signatures; the smaller `minisign-verify` (no
//! key handling, no password prompts) checks them.

use crate::durable::{sync_dir, write_atomic};
use crate::error::PackageError;
use minisign::{KeyPair, PublicKey, SecretKey, SecretKeyBox};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Writes `dir/<name>.key` (secret, mode 0600) and `dir/<name>.pub`; no password when `password` is None (unencrypted key, for CI). Refuses to overwrite existing files.
pub fn generate_keypair(
    dir: &Path,
    name: &str,
    password: Option<&str>,
) -> Result<(PathBuf, PathBuf), PackageError> {
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        return Err(PackageError::new(format!("bad key name {name:?}")));
    }
    let secret_path = dir.join(format!("{name}.key"));
    let public_path = dir.join(format!("{name}.pub"));
    for path in [&secret_path, &public_path] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(PackageError::new(format!(
                "{}: already exists (not overwriting a key)",
                path.display()
            )));
        }
    }
    let minisign_err = |e: minisign::PError| PackageError::new(format!("generating a key: {e}"));
    let (pair, comment) = match password {
        None => (
            KeyPair::generate_unencrypted_keypair().map_err(minisign_err)?,
            "minisign secret key (unencrypted)",
        ),
        Some("") => {
            return Err(PackageError::new(
                "an empty password: pass None for a key without one",
            ))
        }
        Some(password) => (
            KeyPair::generate_encrypted_keypair(Some(password.to_string()))
                .map_err(minisign_err)?,
            "minisign encrypted secret key",
        ),
    };
    let secret = pair.sk.to_box(Some(comment)).map_err(minisign_err)?;
    let public = pair.pk.to_box().map_err(minisign_err)?;

    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&secret_path)
        .map_err(|e| PackageError::io(&secret_path, e))?;
    out.write_all(&secret.to_bytes())
        .and_then(|()| out.sync_all())
        .map_err(|e| PackageError::io(&secret_path, e))?;
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&public_path)
        .map_err(|e| PackageError::io(&public_path, e))?;
    out.write_all(&public.to_bytes())
        .and_then(|()| out.sync_all())
        .map_err(|e| PackageError::io(&public_path, e))?;
    sync_dir(dir)?;
    Ok((secret_path, public_path))
}

/// Writes `<file>.minisig` beside `file`, signed with the secret key file; returns the signature path.
///
/// The trusted comment is minisign's own (`timestamp:<t>\tfile:<name>\thashed`).
/// A key with a password needs `password`; without one, `None`.
pub fn sign_file(
    file: &Path,
    secret_key: &Path,
    password: Option<&str>,
) -> Result<PathBuf, PackageError> {
    let text = fs::read_to_string(secret_key).map_err(|e| PackageError::io(secret_key, e))?;
    let key_err = |e: minisign::PError| PackageError::new(format!("{}: {e}", secret_key.display()));
    let boxed = SecretKeyBox::from_string(&text).map_err(key_err)?;
    let sk = match password {
        // Never lets minisign prompt on the terminal.
        None => SecretKey::from_unencrypted_box(boxed).map_err(|e| {
            PackageError::new(format!(
                "{}: {e} (a key with a password needs the password)",
                secret_key.display()
            ))
        })?,
        Some(password) => {
            SecretKey::from_box(boxed, Some(password.to_string())).map_err(key_err)?
        }
    };
    let pk = PublicKey::from_secret_key(&sk).map_err(key_err)?;

    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let trusted = format!("timestamp:{timestamp}\tfile:{name}\thashed");
    let data = File::open(file).map_err(|e| PackageError::io(file, e))?;
    let signature = minisign::sign(
        Some(&pk),
        &sk,
        data,
        Some(&trusted),
        Some("signature from minisign secret key"),
    )
    .map_err(|e| PackageError::new(format!("{}: signing failed: {e}", file.display())))?;

    let mut sig_name = file.as_os_str().to_owned();
    sig_name.push(".minisig");
    let sig_path = PathBuf::from(sig_name);
    write_atomic(&sig_path, signature.into_string().as_bytes())?;
    Ok(sig_path)
}

/// Verifies `data` against the signature text with any of the public keys (minisign .pub file texts); Ok(index of the key that verified).
///
/// A key may also be given as its bare base64 line. Only prehashed
/// signatures (minisign's default since 0.8) are accepted. A key that does
/// not parse is an error, not a key skipped: it means a broken trust list.
pub fn verify(data: &[u8], signature: &str, public_keys: &[String]) -> Result<usize, PackageError> {
    let signature = minisign_verify::Signature::decode(signature)
        .map_err(|e| PackageError::new(format!("malformed signature: {e}")))?;
    let keys = public_keys
        .iter()
        .enumerate()
        .map(|(i, text)| {
            parse_public_key(text)
                .map_err(|e| PackageError::new(format!("public key {i}: malformed: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(PackageError::new(
            "no public keys to verify the signature with",
        ));
    }
    keys.iter()
        .position(|key| key.verify(data, &signature, false).is_ok())
        .ok_or_else(|| {
            PackageError::new(format!(
                "the signature does not verify with any of the {} trusted public key(s)",
                keys.len()
            ))
        })
}

/// A `.pub` file's text (comment line, then key), or the bare key line.
fn parse_public_key(text: &str) -> Result<minisign_verify::PublicKey, minisign_verify::Error> {
    let text = text.trim();
    if text.lines().count() == 1 {
        minisign_verify::PublicKey::from_base64(text)
    } else {
        minisign_verify::PublicKey::decode(text)
    }
}
