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

/// The temporary directory as libstdc++'s `temp_directory_path` finds it
/// (where MLX puts its kernel caches): the first of `TMPDIR`, `TMP`,
/// `TEMP`, `TEMPDIR` that is set, else `/tmp`.
pub fn temp_dir() -> std::path::PathBuf {
    ["TMPDIR", "TMP", "TEMP", "TEMPDIR"]
        .iter()
        .find_map(|v| std::env::var_os(v).filter(|s| !s.is_empty()))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/tmp"))
}
