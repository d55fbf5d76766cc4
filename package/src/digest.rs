//! SHA-256 as the lowercase hex text that manifests and `SHA256SUMS` carry.

use sha2::{Digest, Sha256};
use std::io::{self, Read};

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Whether `text` is a SHA-256 in the form we write: 64 lowercase hex digits.
pub(crate) fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Hex SHA-256 of everything `src` yields, and how many bytes that was.
pub(crate) fn sha256_reader(src: impl Read) -> io::Result<(String, u64)> {
    let mut hashing = HashingReader::new(src);
    io::copy(&mut hashing, &mut io::sink())?;
    Ok(hashing.finish())
}

/// A reader that hashes what passes through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// The hex SHA-256 and length of everything read so far.
    pub(crate) fn finish(self) -> (String, u64) {
        (hex(&self.hasher.finalize()), self.count)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}
