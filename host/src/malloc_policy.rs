//! The process's allocation policy for large tensors (glibc only).
//!
//! glibc serves an allocation above its mmap threshold (128 KiB at start,
//! raised dynamically as mapped chunks are freed) with a fresh `mmap`,
//! gives it back with `munmap` when freed, and returns free heap top to
//! the kernel above its trim threshold. A model run allocates and frees
//! buffers of the same sizes every time (MLX's CPU outputs, the copies
//! across the plugin ABI), so each run paid page faults and zeroing for
//! every megabyte it touched. Measured with `rlx-host bench add-broadcast`
//! (4 MiB in, 4 MiB out) on the MLX plugin, lazy mode: 5.4 ms a run with
//! glibc's defaults, 1.9 to 2.6 ms with this policy, peak RSS unchanged
//! (docs/PERFORMANCE.md). The policy keeps allocations up to 32 MiB on the
//! heap and up to 256 MiB of free heap top mapped. Setting either
//! `MALLOC_MMAP_THRESHOLD_` or `MALLOC_TRIM_THRESHOLD_` (glibc's own
//! variables) leaves glibc's settings to the user.

/// Allocations up to this many bytes stay on the heap (glibc's documented
/// maximum for the threshold on 64-bit targets).
pub const MMAP_THRESHOLD: i32 = 32 << 20;
/// Free heap top up to this many bytes stays mapped.
pub const TRIM_THRESHOLD: i32 = 256 << 20;

/// Apply the policy, unless the user tuned glibc's malloc themselves.
/// Returns whether it was applied. Call it first in `main`.
pub fn keep_run_buffers() -> bool {
    let user_tuned = ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    !user_tuned && apply()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() -> bool {
    // SAFETY: mallopt only changes malloc's parameters; it takes malloc's
    // own lock, so it is sound at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply() -> bool {
    false
}

#[cfg(test)]
mod tests {
    /// With the policy, a 4 MiB buffer comes from the heap, not from a
    /// fresh mapping (glibc's default for the first one that size).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_run_sized_buffer_is_not_a_fresh_mapping() {
        assert!(super::apply(), "glibc refused the thresholds");
        // SAFETY: mallinfo2 reads malloc's statistics; the buffer is
        // freed once, below.
        unsafe {
            let before = libc::mallinfo2().hblkhd;
            let p = libc::malloc(4 << 20);
            assert!(!p.is_null());
            let after = libc::mallinfo2().hblkhd;
            libc::free(p);
            assert!(
                after < before + (4 << 20),
                "mmapped bytes {before} -> {after}"
            );
        }
    }
}
