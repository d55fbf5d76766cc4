//! Platform names of release archives, and which of them a machine can run.
//!
//! A platform name is `<os>-<arch>`, optionally followed by a flavour of the
//! same machine (`linux-x86_64-cuda13`): the flavour picks a build, the
//! `<os>-<arch>` part decides whether it can load at all.

/// "linux-x86_64", "linux-aarch64", "macos-arm64" for the machine this was built for; None elsewhere.
pub fn host_platform() -> Option<&'static str> {
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        Some("linux-x86_64")
    } else if cfg!(all(target_os = "linux", target_arch = "aarch64")) {
        Some("linux-aarch64")
    } else if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        Some("macos-arm64")
    } else {
        None
    }
}

/// The os-arch part of a platform name: "linux-x86_64-cuda13" -> "linux-x86_64".
pub fn base_platform(platform: &str) -> &str {
    match platform.match_indices('-').nth(1) {
        Some((at, _)) => &platform[..at],
        None => platform,
    }
}

/// Ok when an archive of `platform` can run on `host` (same base platform); Err says both.
pub fn platform_fits(platform: &str, host: &str) -> Result<(), String> {
    let (want, have) = (base_platform(platform), base_platform(host));
    if want == have {
        Ok(())
    } else {
        Err(format!(
            "the archive is built for {platform} ({want}), this machine is {host} ({have})"
        ))
    }
}
