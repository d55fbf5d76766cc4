//! The xz settings of the archive format, in one place: a fixed preset and a
//! single thread when writing (the same input always compresses to the same
//! bytes), a memory cap and no trailing data when reading.

use crate::error::PackageError;
use std::io::{self, BufRead, Read, Write};
use xz2::stream::{Check, Stream};

/// The compression preset (xz's default, `xz -6`).
const PRESET: u32 = 6;

/// Decoder memory cap. Preset 6 needs about 9 MiB to decode; a hostile stream
/// asking for a huge dictionary is refused instead of allocated.
const DECODER_MEMLIMIT: u64 = 64 << 20;

/// Most decompressed bytes accepted after the tar stream's end marker (the
/// marker's second block and any record padding; we write 512 bytes).
const MAX_TRAILER: u64 = 1 << 20;

/// A single-threaded xz encoder at [`PRESET`] with a CRC64 check.
pub(crate) fn encoder<W: Write>(out: W) -> xz2::write::XzEncoder<W> {
    let stream =
        Stream::new_easy_encoder(PRESET, Check::Crc64).expect("xz preset 6 is always valid");
    xz2::write::XzEncoder::new_stream(out, stream)
}

/// A decoder of exactly one xz stream, under [`DECODER_MEMLIMIT`].
pub(crate) fn decoder<R: BufRead>(src: R) -> Result<xz2::bufread::XzDecoder<R>, PackageError> {
    let stream = Stream::new_stream_decoder(DECODER_MEMLIMIT, 0)
        .map_err(|e| PackageError::new(format!("cannot start the xz decoder: {e}")))?;
    Ok(xz2::bufread::XzDecoder::new_stream(src, stream))
}

/// After the tar stream's end: the rest of the decompressed data must be
/// zeros (bounded), the xz stream must end properly (its checks pass), and
/// no bytes may follow it.
pub(crate) fn finish_decoding<R: BufRead>(
    decoder: &mut xz2::bufread::XzDecoder<R>,
) -> Result<(), PackageError> {
    let corrupt = |e: io::Error| PackageError::new(format!("corrupt or truncated archive: {e}"));
    let mut rest = decoder.take(MAX_TRAILER + 1);
    let mut buf = [0u8; 8192];
    let mut total = 0u64;
    loop {
        let n = match rest.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(e)),
        };
        total += n as u64;
        if total > MAX_TRAILER || buf[..n].iter().any(|&b| b != 0) {
            return Err(PackageError::new(
                "corrupt archive: data after the end of the tar stream",
            ));
        }
    }
    // xz2 already reports bytes after the stream as a corrupt stream; this
    // keeps the rule should it ever stop doing so.
    let src = decoder.get_mut();
    if !src.fill_buf().map_err(corrupt)?.is_empty() {
        return Err(PackageError::new(
            "corrupt archive: bytes after the end of the xz stream",
        ));
    }
    Ok(())
}
