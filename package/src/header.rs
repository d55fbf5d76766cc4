//! Tar headers that depend only on what is archived: GNU format, mtime 0,
//! owner 0:0 with no user or group names, modes normalised. This is what
//! makes two packings of the same directory byte-identical.

use tar::{EntryType, Header};

/// A header for an entry of `entry_type` with `size` bytes of content and
/// `mode`; the path (and link target) are set when appending it.
pub(crate) fn header(entry_type: EntryType, size: u64, mode: u32) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(entry_type);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}
