//! Header §1: UTF-8 strings with lengths (the only string type that
//! crosses the ABI) and key/value pairs of them.

use abi_stable::StableAbi;

/// A borrowed UTF-8 string: pointer + length, no terminator required.
///
/// Owner and lifetime are stated by each field or parameter that carries
/// one. `{null, 0}` is the empty (or absent) string.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RlxStr {
    pub ptr: *const u8,
    pub len: usize,
}

// SAFETY: an RlxStr is a view of immutable bytes; where it may be shared is governed by the lifetime rules of the field that holds it.
unsafe impl Send for RlxStr {}
// SAFETY: as for Send.
unsafe impl Sync for RlxStr {}

impl RlxStr {
    pub const EMPTY: RlxStr = RlxStr {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// A view of `s`. The caller keeps `s` alive as long as the view is used.
    pub const fn from_str(s: &str) -> RlxStr {
        RlxStr {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }

    /// A view of a string that lives for the rest of the process.
    pub const fn from_static(s: &'static str) -> RlxStr {
        Self::from_str(s)
    }

    pub fn is_empty(&self) -> bool {
        self.ptr.is_null() || self.len == 0
    }

    /// The bytes, or an empty slice for `{null, _}`.
    ///
    /// # Safety
    /// `ptr` must point at `len` readable bytes for the lifetime `'a`.
    pub unsafe fn as_bytes<'a>(&self) -> &'a [u8] {
        if self.ptr.is_null() || self.len == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(self.ptr, self.len)
        }
    }

    /// The string, replacing invalid UTF-8 (a foreign writer's mistake must
    /// not become undefined behaviour on our side).
    ///
    /// # Safety
    /// As for [`RlxStr::as_bytes`].
    pub unsafe fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }

    /// The string if it is valid UTF-8.
    ///
    /// # Safety
    /// As for [`RlxStr::as_bytes`].
    pub unsafe fn to_str<'a>(&self) -> Result<&'a str, std::str::Utf8Error> {
        std::str::from_utf8(self.as_bytes())
    }
}

impl Default for RlxStr {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Leak `s` so that an `RlxStr` of it lives for the rest of the process.
/// Used for the few strings a plugin publishes once (descriptor, tables).
pub fn leak_str(s: impl Into<String>) -> RlxStr {
    let s: &'static str = Box::leak(s.into().into_boxed_str());
    RlxStr::from_static(s)
}

/// A key/value pair of strings (build info). Frozen: it travels in arrays.
#[repr(C)]
#[derive(StableAbi, Clone, Copy)]
pub struct RlxKeyValue {
    pub key: RlxStr,
    pub value: RlxStr,
}
