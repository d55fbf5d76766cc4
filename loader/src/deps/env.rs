//! What the loader's search depends on besides the libraries themselves:
//! `LD_LIBRARY_PATH`, the library cache, the default directories, the
//! values of `$LIB` and `$PLATFORM`, the ELF kind it accepts and the
//! executable that will load the plugin. [`SearchEnv::from_process`]
//! reads them from this process and system; tests build one by hand.

use super::elf::{self, ElfKind};
use super::ld_cache::LdCache;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The inputs of a dependency walk.
#[derive(Clone, Debug)]
pub struct SearchEnv {
    /// `LD_LIBRARY_PATH` as the loader saw it when the process started;
    /// `None` when unset.
    pub ld_library_path: Option<OsString>,
    pub cache: LdCache,
    /// The loader's compiled-in directories, searched last.
    pub default_dirs: Vec<PathBuf>,
    /// Where [`SearchEnv::default_dirs`] came from, for reports.
    pub default_dirs_source: String,
    /// The value of `$LIB` (`lib/x86_64-linux-gnu` on Debian, `lib64` on
    /// Fedora).
    pub lib: String,
    /// The value of `$PLATFORM` (`AT_PLATFORM`: `x86_64`, `aarch64`, ...).
    pub platform: String,
    /// The ELF kind the loader accepts: a library of another class or
    /// machine is skipped, as the loader skips it.
    pub expect: ElfKind,
    /// The executable that will load the plugin. The loader searches its
    /// `DT_RPATH` at the end of every RPATH chain and expands `$ORIGIN` in
    /// `LD_LIBRARY_PATH` to its directory. `None`: no executable is part of
    /// the chain.
    pub executable: Option<PathBuf>,
}

impl SearchEnv {
    /// This process: its `LD_LIBRARY_PATH`, `/etc/ld.so.cache`, the
    /// default directories its program interpreter reports, and the
    /// running executable.
    pub fn from_process() -> SearchEnv {
        let executable = std::env::current_exe().ok();
        let expect = executable
            .as_deref()
            .and_then(|p| elf::read_header(p).ok())
            .map(|h| h.kind)
            .unwrap_or_else(ElfKind::compiled);
        let interp = executable
            .as_deref()
            .and_then(|p| elf::read(p).ok())
            .and_then(|(_, d)| d.interp);
        let (default_dirs, default_dirs_source) = system_dirs(interp.as_deref(), &expect);
        SearchEnv {
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH"),
            cache: LdCache::system(),
            lib: lib_value(&default_dirs),
            platform: platform_value(),
            default_dirs,
            default_dirs_source,
            expect,
            executable,
        }
    }
}

/// The loader's default directories: what the program interpreter lists
/// as its "system search path" (`ld.so --help`, glibc 2.33 and later), else
/// the layout glibc is commonly configured with on this machine.
fn system_dirs(interp: Option<&str>, kind: &ElfKind) -> (Vec<PathBuf>, String) {
    if let Some(interp) = interp {
        if let Ok(out) = Command::new(interp).arg("--help").output() {
            let text = String::from_utf8_lossy(&out.stdout);
            let dirs: Vec<PathBuf> = text
                .lines()
                .filter_map(|l| l.trim().strip_suffix("(system search path)"))
                .map(|d| PathBuf::from(d.trim()))
                .collect();
            if !dirs.is_empty() {
                return (dirs, format!("{interp} --help"));
            }
        }
    }
    // glibc's SYSTEM_DIRS: Debian-style multiarch directories first where
    // they exist, then lib64 on 64-bit distributions that use it.
    let mut dirs = Vec::new();
    if let Some(triple) = multiarch_triple() {
        let d = PathBuf::from(format!("/lib/{triple}"));
        if d.is_dir() {
            dirs.push(d);
            dirs.push(PathBuf::from(format!("/usr/lib/{triple}")));
        }
    }
    if dirs.is_empty() && kind.class64 && Path::new("/usr/lib64").is_dir() {
        dirs.push(PathBuf::from("/lib64"));
        dirs.push(PathBuf::from("/usr/lib64"));
    }
    dirs.push(PathBuf::from("/lib"));
    dirs.push(PathBuf::from("/usr/lib"));
    (
        dirs,
        "the usual glibc layout (the loader did not list its own)".into(),
    )
}

fn multiarch_triple() -> Option<&'static str> {
    Some(match std::env::consts::ARCH {
        "x86_64" => "x86_64-linux-gnu",
        "x86" => "i386-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "arm" => "arm-linux-gnueabihf",
        "riscv64" => "riscv64-linux-gnu",
        "powerpc64" if cfg!(target_endian = "little") => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        _ => return None,
    })
}

/// glibc builds `$LIB` from its library directory, the first of its system
/// directories without the leading `/` (`lib/x86_64-linux-gnu`, `lib64`).
fn lib_value(default_dirs: &[PathBuf]) -> String {
    default_dirs
        .first()
        .and_then(|d| d.to_str())
        .map(|d| d.trim_start_matches('/').trim_end_matches('/').to_string())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "lib".into())
}

/// `AT_PLATFORM` as the kernel reports it for this architecture.
fn platform_value() -> String {
    match std::env::consts::ARCH {
        "x86" => "i686".into(),
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le".into(),
        "powerpc64" => "ppc64".into(),
        a => a.into(),
    }
}

/// Expand the loader's dynamic string tokens in one path element:
/// `$ORIGIN` (the directory of the object holding it), `$LIB` and
/// `$PLATFORM`, each also as `${NAME}`. Another `$NAME` stays as written,
/// as glibc leaves it. `None` when the element needs `$ORIGIN` and there is
/// none (the loader then drops the element).
pub fn expand(element: &str, origin: Option<&Path>, env: &SearchEnv) -> Option<String> {
    let mut out = String::with_capacity(element.len());
    let mut rest = element;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = match name {
            "ORIGIN" => Some(origin?.to_string_lossy().into_owned()),
            "LIB" => Some(env.lib.clone()),
            "PLATFORM" => Some(env.platform.clone()),
            _ => None,
        };
        match value {
            Some(v) if len > 0 => {
                out.push_str(&v);
                rest = &after[len..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(out)
}

/// Split a search list into directories as glibc's `fillin_rpath` does:
/// tokens expanded, an empty element meaning the current directory,
/// trailing slashes dropped, and a directory listed twice in one list
/// searched once.
pub fn split_list(
    list: &str,
    separators: &[char],
    origin: Option<&Path>,
    env: &SearchEnv,
) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for element in list.split(separators) {
        let dir = if element.is_empty() {
            ".".to_string()
        } else {
            match expand(element, origin, env) {
                Some(d) if !d.is_empty() => d,
                _ => continue,
            }
        };
        let trimmed = match dir.trim_end_matches('/') {
            "" => "/".to_string(),
            t => t.to_string(),
        };
        let dir = PathBuf::from(trimmed);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> SearchEnv {
        SearchEnv {
            ld_library_path: None,
            cache: LdCache::empty("none"),
            default_dirs: vec![],
            default_dirs_source: String::new(),
            lib: "lib64".into(),
            platform: "x86_64".into(),
            expect: ElfKind::compiled(),
            executable: None,
        }
    }

    #[test]
    fn tokens_expand_like_the_loaders() {
        let e = env();
        let o = Some(Path::new("/opt/p"));
        assert_eq!(expand("$ORIGIN/lib", o, &e).unwrap(), "/opt/p/lib");
        assert_eq!(expand("${ORIGIN}/../x", o, &e).unwrap(), "/opt/p/../x");
        assert_eq!(
            expand("/usr/$LIB/$PLATFORM", o, &e).unwrap(),
            "/usr/lib64/x86_64"
        );
        assert_eq!(expand("/a/${LIB}b", o, &e).unwrap(), "/a/lib64b");
        // Not a token: a longer name, an unknown one, an unclosed brace.
        assert_eq!(expand("$ORIGINAL/x", o, &e).unwrap(), "$ORIGINAL/x");
        assert_eq!(expand("$FOO/${BAR}", o, &e).unwrap(), "$FOO/${BAR}");
        assert_eq!(expand("${ORIGIN", o, &e).unwrap(), "${ORIGIN");
        assert_eq!(expand("a$", o, &e).unwrap(), "a$");
        assert_eq!(expand("$ORIGIN/x", None, &e), None);
    }

    #[test]
    fn lists_split_like_fillin_rpath() {
        let e = env();
        let o = Some(Path::new("/p"));
        let dirs = split_list("$ORIGIN/a/:/b::/b/;/c", &[':'], o, &e);
        let want: Vec<PathBuf> = ["/p/a", "/b", ".", "/b/;/c"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(dirs, want);
        let dirs = split_list("/x;/y:/", &[':', ';'], o, &e);
        assert_eq!(dirs, [Path::new("/x"), Path::new("/y"), Path::new("/")]);
        assert!(split_list("$ORIGIN", &[':'], None, &e).is_empty());
    }

    #[test]
    fn the_process_env_names_existing_default_dirs() {
        let e = SearchEnv::from_process();
        if cfg!(target_os = "linux") {
            assert!(!e.default_dirs.is_empty());
            assert!(e.default_dirs.iter().any(|d| d.is_dir()), "{e:?}");
        }
    }
}
