//! Minisign keys, signing `SHA256SUMS` and verifying it.

mod common;

use common::tempdir;
use rlx_plugin_package::{generate_keypair, sign_file, verify, write_sums};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A release directory with one archive and its SHA256SUMS.
fn release(dir: &Path) -> PathBuf {
    let archive = dir.join("rlx-mlx-0.1.0-linux-x86_64.tar.xz");
    fs::write(&archive, b"pretend archive").unwrap();
    write_sums(dir, &[archive]).unwrap()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

#[test]
fn an_unencrypted_key_signs_and_the_right_key_verifies() {
    let tmp = tempdir();
    let (secret, public) = generate_keypair(tmp.path(), "release", None).unwrap();
    assert_eq!(secret, tmp.path().join("release.key"));
    assert_eq!(public, tmp.path().join("release.pub"));
    assert_eq!(
        fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(read(&public).starts_with("untrusted comment: minisign public key"));
    assert_eq!(read(&public).lines().count(), 2);
    let (_, other) = generate_keypair(tmp.path(), "other", None).unwrap();

    let sums = release(tmp.path());
    let sig = sign_file(&sums, &secret, None).unwrap();
    assert_eq!(sig, tmp.path().join("SHA256SUMS.minisig"));
    let signature = read(&sig);
    assert!(
        signature.contains("trusted comment: timestamp:"),
        "{signature}"
    );
    let data = fs::read(&sums).unwrap();

    assert_eq!(verify(&data, &signature, &[read(&public)]).unwrap(), 0);
    assert_eq!(
        verify(&data, &signature, &[read(&other), read(&public)]).unwrap(),
        1
    );
    // The bare key line works too.
    let bare = read(&public).lines().nth(1).unwrap().to_string();
    assert_eq!(verify(&data, &signature, &[bare]).unwrap(), 0);

    let err = verify(&data, &signature, &[read(&other)]).unwrap_err();
    assert!(err.to_string().contains("does not verify"), "{err}");
    assert!(verify(&data, &signature, &[]).is_err());

    let mut changed = data.clone();
    changed[3] ^= 1;
    assert!(verify(&changed, &signature, &[read(&public)]).is_err());

    // One character of the signature line changed.
    let mut lines: Vec<String> = signature.lines().map(String::from).collect();
    let mut sig_line: Vec<char> = lines[1].chars().collect();
    sig_line[20] = if sig_line[20] == 'A' { 'B' } else { 'A' };
    lines[1] = sig_line.into_iter().collect();
    let garbled = lines.join("\n");
    assert!(verify(&data, &garbled, &[read(&public)]).is_err());
    assert!(verify(&data, "not a signature", &[read(&public)]).is_err());
    // A tampered trusted comment breaks the global signature.
    let retimed = signature.replace("timestamp:", "timestamp:1");
    assert!(verify(&data, &retimed, &[read(&public)]).is_err());
    // A malformed key is an error, not a key skipped.
    assert!(verify(&data, &signature, &["junk".into(), read(&public)]).is_err());
}

#[test]
fn a_key_with_a_password() {
    let tmp = tempdir();
    let (secret, public) = generate_keypair(tmp.path(), "ci", Some("correct horse")).unwrap();
    let sums = release(tmp.path());
    assert!(
        sign_file(&sums, &secret, None).is_err(),
        "needs the password"
    );
    assert!(sign_file(&sums, &secret, Some("wrong")).is_err());
    let sig = sign_file(&sums, &secret, Some("correct horse")).unwrap();
    let data = fs::read(&sums).unwrap();
    assert_eq!(verify(&data, &read(&sig), &[read(&public)]).unwrap(), 0);
}

#[test]
fn keys_are_never_overwritten() {
    let tmp = tempdir();
    let (secret, _) = generate_keypair(tmp.path(), "release", None).unwrap();
    let before = read(&secret);
    let err = generate_keypair(tmp.path(), "release", None).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(read(&secret), before);
    assert!(generate_keypair(tmp.path(), "../escape", None).is_err());
}
