//! May code be loaded from this file or directory? Loading a library runs
//! its code, so a file someone else can write is code someone else chose.
//! The rule is ssh's and sudo's habit: the path and every directory above
//! it are owned by the process's user or root, and none is writable by
//! another user.
//!
//! Two refinements, each sound on its own:
//! - an ancestor directory writable by everyone but with the sticky bit
//!   (`/tmp`) is accepted: there others may add entries but not rename or
//!   replace ours, and whatever they add is checked on its own when used;
//! - a group-writable path is accepted when its group is the process's
//!   *user private group* (the group named like the user, with no other
//!   members: the default on distributions whose users' umask is 002),
//!   since nobody else is in it.
//!
//! Both sides use it: the host before it `dlopen`s a plugin, the MLX
//! plugin before its compiled mode lets MLX `dlopen` kernels from the
//! kernel cache. Windows has no such bits here: every path passes.

use std::path::Path;

/// What a path must satisfy beyond "nobody else can write it".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Owned by the process's user or root; writable by no other user.
    NotWritableByOthers,
    /// Owned by the process's user (root will not do unless it is the
    /// process's user); writable by no other user.
    Own,
    /// Owned by the process's user and only accessible to it (mode 0700
    /// or tighter): a directory whose contents are loaded as code.
    OwnedAndPrivate,
}

/// Check `path` itself (following a final symlink, and the link too).
#[cfg(unix)]
pub fn check_path(path: &Path, need: Need) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let target = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Ok(link) = std::fs::symlink_metadata(path) {
        if link.file_type().is_symlink() {
            check_owner(path, "a symlink", link.uid(), need)?;
        }
    }
    check_owner(path, kind_of(&target), target.uid(), need)?;
    let mode = target.mode() & 0o7777;
    match need {
        Need::NotWritableByOthers | Need::Own => {
            check_not_writable(path, kind_of(&target), &target, false)
        }
        Need::OwnedAndPrivate if mode & 0o077 != 0 => Err(format!(
            "{} {} has mode {:04o}; it must be accessible to its owner only (0700)",
            kind_of(&target),
            path.display(),
            mode
        )),
        Need::OwnedAndPrivate => Ok(()),
    }
}

/// Check every directory above `path` (canonicalised), from its parent to
/// the root: owned by the process's user or root, and writable by no other
/// user unless sticky.
#[cfg(unix)]
pub fn check_ancestors(path: &Path) -> Result<(), String> {
    let canon = path
        .canonicalize()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    for dir in canon.ancestors().skip(1) {
        let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        check_owner(
            dir,
            "directory",
            std::os::unix::fs::MetadataExt::uid(&m),
            Need::NotWritableByOthers,
        )?;
        check_not_writable(dir, "directory", &m, true)?;
    }
    Ok(())
}

/// MLX's CPU kernel cache for MLX `version` under the temporary directory
/// `tmp`: `tmp/mlx/<version>/cpu`, where MLX's compiled mode writes and
/// `dlopen`s its kernels.
pub fn kernel_cache_dir(tmp: &Path, version: &str) -> std::path::PathBuf {
    tmp.join("mlx").join(version).join("cpu")
}

/// May MLX load kernels from the existing cache `cpu`
/// ([`kernel_cache_dir`])? Every directory above `mlx/` is the user's or
/// root's and writable by no one else, `mlx/`, `<version>/` and `cpu/` are
/// the user's own. `Ok(true)`: `cpu/` is already private (0700);
/// `Ok(false)`: it is the user's but still needs tightening to 0700 (as
/// MLX makes it, 0755); `Err`: why it must not be used.
pub fn judge_kernel_cache(cpu: &Path) -> Result<bool, String> {
    let ver = cpu.parent().unwrap_or(cpu);
    let mlx = ver.parent().unwrap_or(ver);
    check_ancestors(mlx)?;
    check_path(mlx, Need::Own)?;
    check_path(ver, Need::Own)?;
    if check_path(cpu, Need::OwnedAndPrivate).is_ok() {
        return Ok(true);
    }
    check_path(cpu, Need::Own)?;
    Ok(false)
}

#[cfg(not(unix))]
pub fn check_path(_path: &Path, _need: Need) -> Result<(), String> {
    Ok(())
}

#[cfg(not(unix))]
pub fn check_ancestors(_path: &Path) -> Result<(), String> {
    Ok(())
}

#[cfg(unix)]
fn kind_of(m: &std::fs::Metadata) -> &'static str {
    if m.is_dir() {
        "directory"
    } else {
        "file"
    }
}

#[cfg(unix)]
fn check_owner(path: &Path, what: &str, uid: u32, need: Need) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let ok = uid == me || (uid == 0 && need == Need::NotWritableByOthers);
    if ok {
        return Ok(());
    }
    let allowed = if need == Need::NotWritableByOthers && me != 0 {
        format!("uid {me} (this process) or root")
    } else {
        format!("uid {me} (this process)")
    };
    Err(format!(
        "{what} {} is owned by uid {uid}{}, not by {allowed}",
        path.display(),
        user_name(uid)
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    ))
}

#[cfg(unix)]
fn check_not_writable(
    path: &Path,
    what: &str,
    m: &std::fs::Metadata,
    sticky_ok: bool,
) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let mode = m.mode() & 0o7777;
    let sticky = mode & 0o1000 != 0;
    if mode & 0o002 != 0 && !(sticky_ok && sticky && m.is_dir()) {
        return Err(format!(
            "{what} {} is writable by every user (mode {mode:04o})",
            path.display()
        ));
    }
    if mode & 0o020 != 0 && !(sticky_ok && sticky && m.is_dir()) && !is_private_group(m.gid()) {
        return Err(format!(
            "{what} {} is writable by group {}{} (mode {mode:04o}), which is not this user's \
             private group",
            path.display(),
            m.gid(),
            group_name(m.gid())
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ));
    }
    Ok(())
}

/// Is `gid` the process user's private group: the user's primary group,
/// named like the user, with no listed members?
#[cfg(unix)]
fn is_private_group(gid: u32) -> bool {
    // SAFETY: getegid/geteuid have no preconditions.
    let (egid, euid) = unsafe { (libc::getegid(), libc::geteuid()) };
    if gid != egid {
        return false;
    }
    match (group_entry(gid), user_name(euid)) {
        (Some((name, members)), Some(user)) => name == user && members.is_empty(),
        _ => false,
    }
}

#[cfg(unix)]
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value for an out-parameter.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives the reads below.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_name is a NUL-terminated string in buf.
    Some(
        unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }
            .to_string_lossy()
            .into_owned(),
    )
}

#[cfg(unix)]
fn group_name(gid: u32) -> Option<String> {
    group_entry(gid).map(|(n, _)| n)
}

/// A group's name and listed members.
#[cfg(unix)]
fn group_entry(gid: u32) -> Option<(String, Vec<String>)> {
    let mut buf = vec![0 as libc::c_char; 64 * 1024];
    // SAFETY: an all-zero group is a valid value for an out-parameter.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives the reads below.
    let rc = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || gr.gr_name.is_null() {
        return None;
    }
    // SAFETY: getgrgid_r succeeded: gr_name is a NUL-terminated string and
    // gr_mem a null-terminated array of them, all in buf.
    unsafe {
        let name = std::ffi::CStr::from_ptr(gr.gr_name)
            .to_string_lossy()
            .into_owned();
        let mut members = Vec::new();
        let mut p = gr.gr_mem;
        while !p.is_null() && !(*p).is_null() {
            members.push(std::ffi::CStr::from_ptr(*p).to_string_lossy().into_owned());
            p = p.add(1);
        }
        Some((name, members))
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn modes() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("libx.so");
        std::fs::write(&f, b"x").unwrap();
        chmod(&f, 0o644);
        assert_eq!(check_path(&f, Need::NotWritableByOthers), Ok(()));
        assert_eq!(check_ancestors(&f), Ok(()));
        chmod(&f, 0o646);
        let e = check_path(&f, Need::NotWritableByOthers).unwrap_err();
        assert!(e.contains("writable by every user (mode 0646)"), "{e}");
        // A world-writable directory above it, sticky or not.
        chmod(&f, 0o644);
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let g = d.join("liby.so");
        std::fs::write(&g, b"y").unwrap();
        chmod(&d, 0o777);
        let e = check_ancestors(&g).unwrap_err();
        assert!(e.contains("directory") && e.contains("mode 0777"), "{e}");
        chmod(&d, 0o1777);
        assert_eq!(check_ancestors(&g), Ok(()));
        // A private directory must be 0700.
        chmod(&d, 0o755);
        let e = check_path(&d, Need::OwnedAndPrivate).unwrap_err();
        assert!(e.contains("mode 0755") && e.contains("0700"), "{e}");
        chmod(&d, 0o700);
        assert_eq!(check_path(&d, Need::OwnedAndPrivate), Ok(()));
    }

    #[test]
    fn owners() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: changing a file's owner needs root");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("libx.so");
        std::fs::write(&f, b"x").unwrap();
        std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
        let e = check_path(&f, Need::NotWritableByOthers).unwrap_err();
        assert!(e.contains("owned by uid 65534"), "{e}");
        // Root's own files pass; a private directory must be the user's.
        std::os::unix::fs::chown(&f, Some(0), None).unwrap();
        assert_eq!(check_path(&f, Need::NotWritableByOthers), Ok(()));
    }
}
