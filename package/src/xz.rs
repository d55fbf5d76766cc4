//! The xz settings of the archive format, in one place: a fixed preset and
//! block size when writing (the same input always compresses to the same
//! bytes, however many threads compress it), a memory cap and no trailing
//! data when reading.

use crate::error::PackageError;
use std::io::{self, BufRead, Read, Write};
use xz2::stream::{Check, MtStreamBuilder, Stream};

/// The compression preset (xz's default, `xz -6`).
const PRESET: u32 = 6;

/// Decoder memory cap. Preset 6 needs about 9 MiB to decode; a hostile stream
/// asking for a huge dictionary is refused instead of allocated.
const DECODER_MEMLIMIT: u64 = 64 << 20;

/// Most decompressed bytes accepted after the tar stream's end marker (the
/// marker's second block and any record padding; we write 512 bytes).
const MAX_TRAILER: u64 = 1 << 20;

/// The uncompressed bytes of each xz block. liblzma's multi-threaded
/// encoder compresses blocks independently, so the bytes depend on this
/// size and never on the number of threads; 8 MiB (the preset's dictionary
/// size) lets a plugin directory of tens of MB use every core for about
/// 2 % more bytes than one block.
const BLOCK_BYTES: u64 = 8 << 20;

/// At most this many compressing threads (each holds about 100 MiB at
/// preset 6).
const MAX_THREADS: u32 = 4;

/// An xz encoder at [`PRESET`] with a CRC64 check, in blocks of
/// [`BLOCK_BYTES`] compressed by up to [`MAX_THREADS`] threads.
pub(crate) fn encoder<W: Write>(out: W) -> Result<xz2::write::XzEncoder<W>, PackageError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get() as u32)
        .min(MAX_THREADS);
    encoder_with(out, threads, BLOCK_BYTES)
}

fn encoder_with<W: Write>(
    out: W,
    threads: u32,
    block_bytes: u64,
) -> Result<xz2::write::XzEncoder<W>, PackageError> {
    let build = |threads: u32| {
        MtStreamBuilder::new()
            .preset(PRESET)
            .check(Check::Crc64)
            .block_size(block_bytes)
            .threads(threads)
            .encoder()
    };
    // Fewer threads give the same bytes: one is enough where the memory for
    // more is refused.
    let stream = build(threads)
        .or_else(|_| build(1))
        .map_err(|e| PackageError::new(format!("cannot start the xz encoder: {e}")))?;
    Ok(xz2::write::XzEncoder::new_stream(out, stream))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Compressible bytes that are not one repeated pattern.
    fn sample(len: usize) -> Vec<u8> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        (0..len)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if i % 3 == 0 {
                    (state % 7) as u8
                } else {
                    (i / 64 % 251) as u8
                }
            })
            .collect()
    }

    fn compress(data: &[u8], threads: u32, block: u64) -> Vec<u8> {
        let mut enc = encoder_with(Vec::new(), threads, block).unwrap();
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn the_bytes_do_not_depend_on_the_number_of_threads() {
        let data = sample(1 << 20);
        let block = 128 << 10;
        let one = compress(&data, 1, block);
        for threads in [2, 3] {
            assert!(compress(&data, threads, block) == one, "{threads} threads");
        }
        // Blocks of another size are other bytes: the size is the format's.
        assert!(compress(&data, 2, block * 2) != one);
        let mut back = Vec::new();
        decoder(one.as_slice())
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == data, "the stream decodes to its input");
    }
}
