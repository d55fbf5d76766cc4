use super::*;
use crate::manifest::Manifest;
use crate::version::ABI_VERSION;

const M: Manifest = Manifest::new("demo", "1.2.3")
    .devices(&["cpu", "gpu"])
    .ops(&["Input", "MatMul", "Custom"]);
const LEN: usize = M.encoded_len();
const BYTES: [u8; LEN] = M.encode::<LEN>();

fn message(bytes: &[u8]) -> String {
    parse(bytes).unwrap_err().0
}

#[test]
fn round_trip() {
    let m = parse(&BYTES).unwrap();
    assert_eq!(m.format_version, 1);
    assert_eq!(m.abi_version, ABI_VERSION);
    assert_eq!((m.name.as_str(), m.version.as_str()), ("demo", "1.2.3"));
    assert_eq!(m.devices, ["cpu", "gpu"]);
    assert_eq!(m.ops, ["Input", "MatMul", "Custom"]);
    assert!(m.other.is_empty());
}

#[test]
fn a_plugins_own_entries_round_trip_after_the_defined_ones() {
    const O: Manifest = M.other(&[("mlx.version", "0.32.4"), ("x", "")]);
    const N: usize = O.encoded_len();
    const B: [u8; N] = O.encode::<N>();
    let m = parse(&B).unwrap();
    assert_eq!(m.ops, ["Input", "MatMul", "Custom"]);
    assert_eq!(
        m.other,
        [
            ("mlx.version".to_string(), "0.32.4".to_string()),
            ("x".to_string(), String::new())
        ]
    );
}

#[test]
fn the_header_is_little_endian_at_fixed_offsets() {
    assert_eq!(&BYTES[..8], b"RLXMANIF");
    assert_eq!(&BYTES[8..12], &[1, 0, 32, 0]);
    assert_eq!(u32_at(&BYTES, 12) as usize, LEN);
    assert_eq!(u32_at(&BYTES, 16), ABI_VERSION.major);
    assert_eq!(u32_at(&BYTES, 20), ABI_VERSION.minor);
    assert_eq!(&BYTES[32..44], b"name=demo\0ve");
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    for n in 0..LEN {
        assert!(parse(&BYTES[..n]).is_err(), "{n} bytes parsed");
    }
    assert!(message(&BYTES[..20]).contains("truncated"));
    assert!(message(&BYTES[..LEN - 1]).contains("truncated"));
}

#[test]
fn zero_padding_after_the_manifest_is_accepted_other_bytes_are_not() {
    let mut padded = BYTES.to_vec();
    padded.extend([0; 13]);
    assert_eq!(parse(&padded).unwrap(), parse(&BYTES).unwrap());
    let mut twice = BYTES.to_vec();
    twice.extend(BYTES);
    assert!(message(&twice).contains("two manifests"));
}

#[test]
fn garbage_never_panics() {
    // A fixed-seed xorshift: byte flips, random lengths, random fields.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..20_000 {
        let mut b = BYTES.to_vec();
        for _ in 0..(next() % 4 + 1) {
            let i = next() as usize % b.len();
            b[i] = next() as u8;
        }
        b.truncate(next() as usize % (LEN + 8));
        let _ = parse(&b);
    }
    for _ in 0..2_000 {
        let n = next() as usize % 200;
        let mut b: Vec<u8> = (0..n).map(|_| next() as u8).collect();
        if n >= 8 && next() % 2 == 0 {
            b[..8].copy_from_slice(&MAGIC);
        }
        let _ = parse(&b);
    }
}

fn with_header(format: u16, header: u16, total: Option<u32>, body: &[u8]) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend(format.to_le_bytes());
    b.extend(header.to_le_bytes());
    let total = total.unwrap_or((header as usize + body.len()) as u32);
    b.extend(total.to_le_bytes());
    b.extend([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    b.resize(header as usize, 0);
    b.extend(body);
    b
}

#[test]
fn each_broken_rule_is_named() {
    let ok = b"name=a\0version=1\0";
    assert!(parse(&with_header(1, 32, None, ok)).is_ok());
    assert!(message(b"ELF\0garbage-garbage-garbage-garbage").contains("magic"));
    assert!(message(&with_header(0, 32, None, ok)).contains("format version 0"));
    assert!(message(&with_header(1, 16, None, ok)).contains("header_size 16"));
    assert!(message(&with_header(1, 32, Some(1 << 30), ok)).contains("larger than a manifest"));
    assert!(message(&with_header(1, 32, Some(400), ok)).contains("truncated"));
    assert!(message(&with_header(1, 32, Some(33), ok)).contains("non-zero bytes after"));
    assert!(message(&with_header(1, 32, None, b"name=a\0version=1")).contains("NUL-terminated"));
    assert!(message(&with_header(1, 32, None, b"name=a\0version\0")).contains("key=value"));
    assert!(message(&with_header(1, 32, None, b"=a\0name=a\0version=1\0")).contains("empty key"));
    assert!(message(&with_header(1, 32, None, b"name=\xff\0version=1\0")).contains("UTF-8"));
    assert!(message(&with_header(1, 32, None, b"name=a\0name=b\0version=1\0")).contains("twice"));
    assert!(message(&with_header(1, 32, None, b"name=\0version=1\0")).contains("empty"));
    assert!(message(&with_header(1, 32, None, b"version=1\0")).contains("must give"));
}

#[test]
fn a_newer_format_is_read_by_its_format_1_prefix() {
    // Format 2 with 8 more header bytes and a key this reader does not know;
    // padding NULs between entries (as a C string literal leaves) are skipped.
    let body = b"name=a\0\0version=1\0colour=blue\0op=Add\0\0";
    let m = parse(&with_header(2, 40, None, body)).unwrap();
    assert_eq!((m.format_version, m.name.as_str()), (2, "a"));
    assert_eq!(m.other, [("colour".to_string(), "blue".to_string())]);
    assert_eq!(m.ops, ["Add"]);
}
