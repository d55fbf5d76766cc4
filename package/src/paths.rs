//! The rules for names inside an archive, shared by the packer (so it never
//! writes what the unpacker would refuse) and the unpacker (so hostile
//! archives cannot write outside the directory they are unpacked into).

/// Longest member path accepted (Linux's PATH_MAX): also bounds the GNU
/// long-name records the unpacker reads into memory.
pub(crate) const MAX_PATH_BYTES: usize = 4096;

/// Checks a plugin name: the archive's top-level directory, so one plain
/// path component of `[A-Za-z0-9._-]` that is not `.` or `..`.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("bad plugin name {name:?}"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!(
            "bad plugin name {name:?}: only A-Z a-z 0-9 . _ - are allowed"
        ));
    }
    Ok(())
}

/// Checks a member path relative to the archive root: not absolute, every
/// component a plain name (no empty, `.` or `..` component), the first one
/// `name`. `top_allowed` lets the path be `name` itself (the top-level
/// directory entry); files must be strictly inside it.
pub(crate) fn check_member(path: &str, name: &str, top_allowed: bool) -> Result<(), String> {
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("{path}: path longer than {MAX_PATH_BYTES} bytes"));
    }
    if path.starts_with('/') {
        return Err(format!("{path}: absolute path"));
    }
    if path.contains('\0') {
        return Err(format!("{path:?}: path holds a NUL byte"));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(format!("{path}: empty path component")),
            "." => return Err(format!("{path}: `.` path component")),
            ".." => return Err(format!("{path}: `..` path component")),
            _ => {}
        }
    }
    match path.split_once('/') {
        Some((top, _)) if top == name => Ok(()),
        None if top_allowed && path == name => Ok(()),
        _ => Err(format!("{path}: not under {name}/")),
    }
}

/// Resolves the target of the symlink at member path `link` lexically and
/// returns the member path it names, refusing targets that are empty,
/// absolute, or leave the top-level directory.
///
/// Lexical resolution equals what the kernel does only if no component the
/// walk passes *through* is itself a symlink (`a -> .` makes `a/..` the
/// parent of the plugin directory, not the plugin directory); `is_link` says
/// which member paths are symlinks, and passing through one is refused.
pub(crate) fn resolve_link(
    link: &str,
    target: &str,
    is_link: impl Fn(&str) -> bool,
) -> Result<String, String> {
    let refuse = |why: &str| Err(format!("{link}: symlink target {target:?} {why}"));
    if target.is_empty() {
        return refuse("is empty");
    }
    if target.starts_with('/') {
        return refuse("is absolute");
    }
    if target.len() > MAX_PATH_BYTES || target.contains('\0') {
        return refuse("is not a usable path");
    }
    // Start from the directory holding the link.
    let mut stack: Vec<&str> = link.split('/').collect();
    stack.pop();
    let mut components = target.split('/').filter(|c| !c.is_empty() && *c != ".");
    let mut next = components.next();
    while let Some(component) = next {
        next = components.next();
        if component == ".." {
            if stack.len() <= 1 {
                return refuse("leaves the plugin directory");
            }
            stack.pop();
        } else {
            stack.push(component);
            let so_far = stack.join("/");
            if next.is_some() && is_link(&so_far) {
                return refuse(&format!("passes through the symlink {so_far}"));
            }
        }
    }
    Ok(stack.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members() {
        assert!(check_member("mlx", "mlx", true).is_ok());
        assert!(check_member("mlx", "mlx", false).is_err());
        assert!(check_member("mlx/a/b", "mlx", false).is_ok());
        for bad in [
            "/mlx/a", "mlx//a", "mlx/./a", "mlx/../a", "mlx/a/", "other/a", "mlxx/a",
        ] {
            assert!(check_member(bad, "mlx", false).is_err(), "{bad}");
        }
    }

    #[test]
    fn links() {
        let none = |_: &str| false;
        assert_eq!(resolve_link("mlx/a", "b", none).unwrap(), "mlx/b");
        assert_eq!(resolve_link("mlx/d/a", "../b", none).unwrap(), "mlx/b");
        assert_eq!(
            resolve_link("mlx/d/a", "./x//y", none).unwrap(),
            "mlx/d/x/y"
        );
        assert!(resolve_link("mlx/a", "../b", none).is_err());
        assert!(resolve_link("mlx/a", "/etc/passwd", none).is_err());
        assert!(resolve_link("mlx/d/a", "../../../etc/passwd", none).is_err());
        assert!(resolve_link("mlx/a", "", none).is_err());
        // `self -> .` then `x -> self/..` would be the plugin directory's parent.
        assert!(resolve_link("mlx/x", "self/..", |p| p == "mlx/self").is_err());
        assert!(resolve_link("mlx/x", "self", |p| p == "mlx/self").is_ok());
    }
}
