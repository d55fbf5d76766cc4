//! Facts about the machine that both sides need: the plugin bounds its
//! tensors by them, and a host bounds the buffers it makes.

/// The machine's physical memory in bytes (`u64::MAX` when the OS does not
/// say: no limit rather than a wrong one).
#[cfg(unix)]
pub fn physical_memory() -> u64 {
    // SAFETY: sysconf takes no pointers and is thread-safe.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || size <= 0 {
        return u64::MAX;
    }
    (pages as u64).saturating_mul(size as u64)
}

#[cfg(not(unix))]
pub fn physical_memory() -> u64 {
    u64::MAX
}
