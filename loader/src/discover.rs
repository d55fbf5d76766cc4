//! Where plugins are looked for, in order:
//! 1. explicit paths given by the program;
//! 2. `RLX_BACKEND_PLUGINS` (the OS path-list separator; each entry a file
//!    or a directory);
//! 3. `<directory of the running executable>/plugins`;
//! 4. `$RLX_HOME/plugins`, else `~/.rlx/plugins`.
//!
//! A directory contributes the platform libraries directly inside it and
//! those directly inside each of its subdirectories (a plugin shipped as a
//! directory with its own runtime libraries below it). Other files are
//! ignored. Candidates are de-duplicated by canonical path, first one wins.
//!
//! Rule 4's directory is also rlx-runtime's model-plugin directory: a
//! backend plugin belongs in a subdirectory of it, and a model plugin found
//! directly in it is skipped when loading, unloaded
//! ([`super::model_plugins`]).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The environment variable listing extra plugin files or directories.
pub const ENV_PLUGINS: &str = "RLX_BACKEND_PLUGINS";
/// The environment variable naming RLX's home directory.
pub const ENV_HOME: &str = "RLX_HOME";

/// Which rule found a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Explicit,
    EnvVar,
    ExeDir,
    Home,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Explicit => "explicit",
            Source::EnvVar => ENV_PLUGINS,
            Source::ExeDir => "exe-dir",
            Source::Home => "rlx-home",
        })
    }
}

/// A file that may be a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Canonical when the file exists; as given otherwise.
    pub path: PathBuf,
    pub source: Source,
    /// False when an explicitly named path does not exist.
    pub exists: bool,
}

/// Inputs to discovery. [`DiscoveryConfig::from_env`] reads the process
/// environment; tests build one by hand.
#[derive(Clone, Debug, Default)]
pub struct DiscoveryConfig {
    pub explicit: Vec<PathBuf>,
    /// The value of `RLX_BACKEND_PLUGINS`.
    pub env_plugins: Option<OsString>,
    /// `<dir of the running executable>/plugins` is searched when set.
    pub exe_dir: Option<PathBuf>,
    /// The value of `RLX_HOME`.
    pub rlx_home: Option<PathBuf>,
    /// The user's home directory (for `~/.rlx/plugins`).
    pub home: Option<PathBuf>,
    /// Whether a plugin another user could have written is loaded
    /// (`RLX_ALLOW_INSECURE_PLUGINS=1`) or refused (the default).
    pub trust: super::trusted::TrustPolicy,
}

impl DiscoveryConfig {
    pub fn from_env(explicit: Vec<PathBuf>) -> DiscoveryConfig {
        DiscoveryConfig {
            explicit,
            env_plugins: std::env::var_os(ENV_PLUGINS),
            exe_dir: std::env::current_exe()
                .ok()
                .and_then(|p| p.canonicalize().ok())
                .and_then(|p| p.parent().map(Path::to_path_buf)),
            rlx_home: std::env::var_os(ENV_HOME)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            home: std::env::var_os("HOME")
                .or_else(|| std::env::var_os("USERPROFILE"))
                .map(PathBuf::from),
            trust: super::trusted::TrustPolicy::from_env(),
        }
    }

    /// The default plugins directories (rules 3 and 4), in order.
    pub fn default_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        if let Some(d) = &self.exe_dir {
            dirs.push(d.join("plugins"));
        }
        if let Some(h) = self.rlx_home_dir() {
            dirs.push(h.join("plugins"));
        }
        dirs
    }

    /// RLX's home directory: `$RLX_HOME`, else `~/.rlx`; `None` when
    /// neither is known.
    pub fn rlx_home_dir(&self) -> Option<PathBuf> {
        match (&self.rlx_home, &self.home) {
            (Some(h), _) => Some(h.clone()),
            (None, Some(h)) => Some(h.join(".rlx")),
            (None, None) => None,
        }
    }
}

/// Is `name` a platform shared-library file name?
pub fn is_library_name(name: &str) -> bool {
    if cfg!(windows) {
        name.to_ascii_lowercase().ends_with(".dll")
    } else if cfg!(target_os = "macos") {
        name.starts_with("lib") && name.ends_with(".dylib")
    } else {
        name.starts_with("lib") && name.ends_with(".so")
    }
}

/// The platform file name of a plugin library called `stem`
/// (`librlx_mlx.so`, `librlx_mlx.dylib`, `rlx_mlx.dll`).
pub fn library_file_name(stem: &str) -> String {
    if cfg!(windows) {
        format!("{stem}.dll")
    } else if cfg!(target_os = "macos") {
        format!("lib{stem}.dylib")
    } else {
        format!("lib{stem}.so")
    }
}

/// The plugin library a path names: the path itself when it is a file, or
/// the one library a plugin directory holds (found by discovery's rules for
/// a directory: directly inside it or in an immediate subdirectory).
pub fn plugin_library(path: &Path) -> Result<PathBuf, String> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let mut found = Vec::new();
    scan_dir(&mut found, path, Source::Explicit, true);
    match found.len() {
        1 => Ok(found.remove(0).path),
        0 => Err(format!(
            "{}: a directory without a plugin library (looked for {} in it and its \
             immediate subdirectories)",
            path.display(),
            library_file_name("*")
        )),
        _ => Err(format!(
            "{}: a directory with {} plugin libraries; name one: {}",
            path.display(),
            found.len(),
            found
                .iter()
                .map(|c| c.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// List the candidates, in discovery order, without loading anything.
pub fn discover(cfg: &DiscoveryConfig) -> Vec<Candidate> {
    let mut out = Vec::new();
    for p in &cfg.explicit {
        add_entry(&mut out, p, Source::Explicit, true);
    }
    if let Some(list) = &cfg.env_plugins {
        for p in std::env::split_paths(list).filter(|p| !p.as_os_str().is_empty()) {
            add_entry(&mut out, &p, Source::EnvVar, true);
        }
    }
    let defaults = cfg.default_dirs();
    for (i, dir) in defaults.iter().enumerate() {
        let source = if i == 0 && cfg.exe_dir.is_some() {
            Source::ExeDir
        } else {
            Source::Home
        };
        add_entry(&mut out, dir, source, false);
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert(c.path.clone()));
    out
}

/// Add what `path` contributes. A named path that does not exist is kept
/// (as `exists: false`) so the caller can report it; a default directory
/// that does not exist contributes nothing.
fn add_entry(out: &mut Vec<Candidate>, path: &Path, source: Source, report_missing: bool) {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => scan_dir(out, path, source, true),
        Ok(_) => out.push(candidate(path, source)),
        Err(_) if report_missing => out.push(Candidate {
            path: path.to_path_buf(),
            source,
            exists: false,
        }),
        Err(_) => {}
    }
}

fn scan_dir(out: &mut Vec<Candidate>, dir: &Path, source: Source, descend: bool) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    let (dirs, files): (Vec<PathBuf>, Vec<PathBuf>) = entries.into_iter().partition(|p| p.is_dir());
    for f in files {
        if f.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_library_name)
        {
            out.push(candidate(&f, source));
        }
    }
    if descend {
        for d in dirs {
            scan_dir(out, &d, source, false);
        }
    }
}

fn candidate(path: &Path, source: Source) -> Candidate {
    Candidate {
        path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        source,
        exists: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }

    #[test]
    fn order_dedup_and_filtering() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let explicit = root.join("explicit/libone.so");
        let envdir = root.join("envdir");
        let exe = root.join("exe");
        let home = root.join("home");
        touch(&explicit);
        touch(&envdir.join("libtwo.so"));
        touch(&envdir.join("README.txt"));
        touch(&envdir.join("bundle/libthree.so"));
        touch(&envdir.join("bundle/deps/lib/libdeep.so"));
        touch(&exe.join("plugins/libfour.so"));
        touch(&home.join(".rlx/plugins/libfive.so"));
        let env =
            std::env::join_paths([envdir.clone(), explicit.clone(), root.join("missing")]).unwrap();
        let cfg = DiscoveryConfig {
            explicit: vec![explicit.clone()],
            env_plugins: Some(env),
            exe_dir: Some(exe.clone()),
            rlx_home: None,
            home: Some(home.clone()),
            trust: Default::default(),
        };
        let found: Vec<(String, Source, bool)> = discover(&cfg)
            .into_iter()
            .map(|c| {
                (
                    c.path.file_name().unwrap().to_string_lossy().into_owned(),
                    c.source,
                    c.exists,
                )
            })
            .collect();
        let expect = |n: &str, s, e| (n.to_string(), s, e);
        if cfg!(target_os = "linux") {
            assert_eq!(
                found,
                vec![
                    expect("libone.so", Source::Explicit, true),
                    expect("libtwo.so", Source::EnvVar, true),
                    expect("libthree.so", Source::EnvVar, true),
                    expect("missing", Source::EnvVar, false),
                    expect("libfour.so", Source::ExeDir, true),
                    expect("libfive.so", Source::Home, true),
                ]
            );
        }
        let with_rlx_home = DiscoveryConfig {
            rlx_home: Some(root.join("rlxhome")),
            ..cfg
        };
        assert_eq!(
            with_rlx_home.default_dirs(),
            vec![exe.join("plugins"), root.join("rlxhome/plugins")]
        );
    }
}
