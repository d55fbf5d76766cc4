//! What a plugin declares, and its encoding, both `const`: the manifest is
//! bytes in the library's data, written by the compiler, so no code of the
//! plugin runs to produce it.

use super::{keys, FORMAT_VERSION, HEADER_SIZE, MAGIC, MAX_SIZE};
use crate::version::{RlxAbiVersion, ABI_VERSION};

/// A plugin's manifest, as it declares it:
///
/// ```
/// use rlx_plugin_api::manifest::Manifest;
/// const MANIFEST: Manifest = Manifest::new("demo", "0.1.0")
///     .devices(&["cpu"])
///     .ops(&["Input", "Binary", "MatMul"]);
/// const LEN: usize = MANIFEST.encoded_len();
/// const BYTES: [u8; LEN] = MANIFEST.encode::<LEN>();
/// let m = rlx_plugin_api::manifest::parse(&BYTES).unwrap();
/// assert_eq!((m.name.as_str(), m.ops.len()), ("demo", 3));
/// ```
///
/// Strings must not contain NUL; a manifest that breaks a rule fails to
/// compile (the encoder panics in `const` evaluation).
#[derive(Clone, Copy, Debug)]
pub struct Manifest {
    /// The ABI version the plugin's entry claims; [`ABI_VERSION`] unless a
    /// test builds a plugin that pretends to be another build.
    pub abi_version: RlxAbiVersion,
    /// The descriptor name the plugin reports when loaded.
    pub name: &'static str,
    pub version: &'static str,
    /// Device kinds the build can drive (`"cpu"`, `"gpu"`). Which devices a
    /// load finds depends on the machine and may differ.
    pub devices: &'static [&'static str],
    /// The op kinds it lowers (rlx-ir names); empty when not listed.
    pub ops: &'static [&'static str],
    /// The plugin's own `key=value` entries (keys the format does not
    /// define, which a reader keeps as they are): facts about the build a
    /// packer or a host reads without loading it, such as the MLX plugin's
    /// `mlx.version`.
    pub other: &'static [(&'static str, &'static str)],
}

impl Manifest {
    pub const fn new(name: &'static str, version: &'static str) -> Manifest {
        Manifest {
            abi_version: ABI_VERSION,
            name,
            version,
            devices: &[],
            ops: &[],
            other: &[],
        }
    }

    pub const fn devices(self, devices: &'static [&'static str]) -> Manifest {
        Manifest { devices, ..self }
    }

    pub const fn ops(self, ops: &'static [&'static str]) -> Manifest {
        Manifest { ops, ..self }
    }

    /// Entries of the plugin's own; a key must be non-empty, hold no `=`
    /// and not be one the format defines.
    pub const fn other(self, other: &'static [(&'static str, &'static str)]) -> Manifest {
        Manifest { other, ..self }
    }

    pub const fn abi_version(self, abi_version: RlxAbiVersion) -> Manifest {
        Manifest {
            abi_version,
            ..self
        }
    }

    /// The encoded size in bytes: the header and every entry.
    pub const fn encoded_len(&self) -> usize {
        let mut n = HEADER_SIZE as usize
            + entry_len(keys::NAME, self.name)
            + entry_len(keys::VERSION, self.version);
        n += list_len(keys::DEVICE, self.devices);
        n += list_len(keys::OP, self.ops);
        let mut i = 0;
        while i < self.other.len() {
            n += entry_len(self.other[i].0, self.other[i].1);
            i += 1;
        }
        assert!(
            n <= MAX_SIZE,
            "the manifest is larger than a reader accepts"
        );
        n
    }

    /// The encoding (docs/ABI.md §19). `N` must be [`Self::encoded_len`].
    pub const fn encode<const N: usize>(&self) -> [u8; N] {
        assert!(
            N == self.encoded_len(),
            "encode::<N>: N is not encoded_len()"
        );
        assert!(!self.name.is_empty(), "the manifest's name is empty");
        assert!(!self.version.is_empty(), "the manifest's version is empty");
        let mut out = [0u8; N];
        let mut at = put(&mut out, 0, &MAGIC);
        at = put(&mut out, at, &FORMAT_VERSION.to_le_bytes());
        at = put(&mut out, at, &HEADER_SIZE.to_le_bytes());
        at = put(&mut out, at, &(N as u32).to_le_bytes());
        at = put(&mut out, at, &self.abi_version.major.to_le_bytes());
        at = put(&mut out, at, &self.abi_version.minor.to_le_bytes());
        at = put(&mut out, at, &self.abi_version.patch.to_le_bytes());
        at = put(&mut out, at, &0u32.to_le_bytes()); // reserved
        assert!(at == HEADER_SIZE as usize);
        at = put_entry(&mut out, at, keys::NAME, self.name);
        at = put_entry(&mut out, at, keys::VERSION, self.version);
        at = put_list(&mut out, at, keys::DEVICE, self.devices);
        at = put_list(&mut out, at, keys::OP, self.ops);
        let mut i = 0;
        while i < self.other.len() {
            let (key, value) = self.other[i];
            assert!(
                own_key(key),
                "a manifest's own key is empty, holds '=' or is the format's"
            );
            at = put_entry(&mut out, at, key, value);
            i += 1;
        }
        assert!(at == N);
        out
    }
}

/// Whether `key` may name a plugin's own entry.
const fn own_key(key: &str) -> bool {
    let b = key.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'=' || b[i] == 0 {
            return false;
        }
        i += 1;
    }
    !b.is_empty()
        && !const_eq(b, keys::NAME.as_bytes())
        && !const_eq(b, keys::VERSION.as_bytes())
        && !const_eq(b, keys::DEVICE.as_bytes())
        && !const_eq(b, keys::OP.as_bytes())
}

const fn const_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `key=value\0`
const fn entry_len(key: &str, value: &str) -> usize {
    key.len() + 1 + value.len() + 1
}

const fn list_len(key: &str, values: &[&str]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < values.len() {
        n += entry_len(key, values[i]);
        i += 1;
    }
    n
}

const fn put<const N: usize>(out: &mut [u8; N], at: usize, bytes: &[u8]) -> usize {
    let mut i = 0;
    while i < bytes.len() {
        out[at + i] = bytes[i];
        i += 1;
    }
    at + bytes.len()
}

const fn put_entry<const N: usize>(out: &mut [u8; N], at: usize, key: &str, value: &str) -> usize {
    let v = value.as_bytes();
    let mut i = 0;
    while i < v.len() {
        assert!(v[i] != 0, "a manifest string contains NUL");
        i += 1;
    }
    let at = put(out, at, key.as_bytes());
    let at = put(out, at, b"=");
    let at = put(out, at, v);
    put(out, at, &[0])
}

const fn put_list<const N: usize>(
    out: &mut [u8; N],
    mut at: usize,
    key: &str,
    values: &[&str],
) -> usize {
    let mut i = 0;
    while i < values.len() {
        at = put_entry(out, at, key, values[i]);
        i += 1;
    }
    at
}
