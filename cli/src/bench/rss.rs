//! This process's peak resident set size.
//!
//! Each backend is measured in its own process, so the peak is the
//! backend's: the plugin and its libraries loaded, the graph compiled,
//! params bound and every run done.

/// Peak RSS in bytes and where it was read (`VmHWM` or `getrusage`);
/// `None` where neither is available.
pub fn peak_rss() -> Option<(u64, &'static str)> {
    vm_hwm()
        .map(|b| (b, "VmHWM"))
        .or_else(|| getrusage_max_rss().map(|b| (b, "getrusage")))
}

/// `VmHWM` ("high water mark") from `/proc/self/status` (Linux), in kB
/// there.
fn vm_hwm() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// `ru_maxrss` of `getrusage(RUSAGE_SELF)`: kilobytes on Linux and the
/// BSDs, bytes on macOS.
///
/// Declared here rather than through the `libc` crate: only this one call
/// is needed. The layout below (two `struct timeval` of two 64-bit fields,
/// then fourteen `long`s, `ru_maxrss` the first) is that of every 64-bit
/// Unix; elsewhere there is no figure.
#[cfg(all(unix, target_pointer_width = "64"))]
fn getrusage_max_rss() -> Option<u64> {
    #[repr(C)]
    struct Rusage {
        times: [i64; 4],
        longs: [i64; 14],
    }
    extern "C" {
        fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
    const RUSAGE_SELF: i32 = 0;
    let mut u = Rusage {
        times: [0; 4],
        longs: [0; 14],
    };
    // SAFETY: `u` is a writable struct of the size and layout the call
    // fills on this platform (see above).
    let rc = unsafe { getrusage(RUSAGE_SELF, &mut u) };
    if rc != 0 || u.longs[0] <= 0 {
        return None;
    }
    let v = u.longs[0] as u64;
    Some(if cfg!(target_os = "macos") {
        v
    } else {
        v * 1024
    })
}

#[cfg(not(all(unix, target_pointer_width = "64")))]
fn getrusage_max_rss() -> Option<u64> {
    None
}

/// `123.4 MiB`, or `n/a`.
pub fn format_bytes(b: Option<u64>) -> String {
    match b {
        Some(b) => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        None => "n/a".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_hwm_lines_parse() {
        let s = "Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(s), Some(2 * 1024 * 1024));
        assert_eq!(parse_vm_hwm("Name: x\n"), None);
    }

    #[test]
    fn this_process_has_a_peak() {
        let (b, _) = peak_rss().expect("a peak RSS on this platform");
        assert!(b > 0);
        #[cfg(all(unix, target_pointer_width = "64"))]
        assert!(getrusage_max_rss().is_some_and(|r| r > 0));
    }
}
