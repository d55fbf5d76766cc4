//! Which shared libraries a plugin needs, and where glibc's dynamic loader
//! would find each, or every directory it would look in when it cannot:
//! a walk over the `DT_NEEDED` entries of the plugin and of everything it
//! pulls in, without loading anything.
//!
//! The rules are those of glibc's `_dl_map_object` (Linux). For each
//! `DT_NEEDED` name of an object:
//! - a name holding `/` (after token expansion) is a path, opened as is;
//! - a name already loaded (a needed name or soname seen earlier in the
//!   walk, or one of the executable's own libraries) is that library, and
//!   so is a file found under another name;
//! - otherwise, in order: when the object has no `DT_RUNPATH`, the
//!   `DT_RPATH` of the object, then of the object that loaded it, and on
//!   up to the plugin and the executable that loads it; `LD_LIBRARY_PATH`;
//!   the object's own `DT_RUNPATH` (which does not apply to its
//!   dependencies' lookups); `/etc/ld.so.cache`; the default directories.
//!   The cache and default directories are skipped for an object linked
//!   with `-z nodefaultlib`.
//!
//! `$ORIGIN` is the directory of the object holding the entry, as the
//! loader holds its path (symlinks not resolved), `$LIB` and `$PLATFORM`
//! come from the [`SearchEnv`]. A file of another ELF class or machine is
//! skipped and the search goes on, as the loader does; any other unusable
//! file (not ELF, truncated, an executable) ends the search with an error,
//! as it ends the loader's. Objects are taken breadth-first, so the first
//! missing library listed is the one the loader reports.
//!
//! A Mach-O plugin (macOS) is read by [`walk_macho`] instead, with dyld's
//! rules (`deps/macho.rs`), on any machine.
//!
//! Not modelled: `glibc-hwcaps` and legacy hwcap subdirectories of each
//! search directory (a library installed only there is reported missing),
//! `LD_PRELOAD`, and secure-execution mode.

mod clash;
mod elf;
mod env;
mod ld_cache;
mod macho;
mod walk;

pub use clash::{soname_clashes, SonameClash};
pub(crate) use elf::check_elf_bounds;
pub use elf::{ElfError, ElfKind};
pub use env::SearchEnv;
pub use ld_cache::{LdCache, LD_SO_CACHE};
pub use macho::{is_macho, walk_macho, MachoDep, MachoOutcome, MachoWalk};
pub use walk::walk;

use std::fmt;
use std::path::{Path, PathBuf};

/// Which rule a directory (or the cache) was searched under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// The `DT_NEEDED` entry is a path.
    Path,
    /// The `DT_RPATH` of this object.
    Rpath(PathBuf),
    LdLibraryPath,
    /// The `DT_RUNPATH` of this object.
    Runpath(PathBuf),
    Cache,
    DefaultDirs,
    /// Not searched: the executable has loaded a library of this name
    /// already (one of its own dependencies).
    Executable(PathBuf),
}

impl Via {
    /// A short machine-readable name.
    pub fn key(&self) -> &'static str {
        match self {
            Via::Path => "path",
            Via::Rpath(_) => "rpath",
            Via::LdLibraryPath => "ld_library_path",
            Via::Runpath(_) => "runpath",
            Via::Cache => "cache",
            Via::DefaultDirs => "default",
            Via::Executable(_) => "loaded",
        }
    }

    /// The object whose RPATH or RUNPATH it is.
    pub fn object(&self) -> Option<&Path> {
        match self {
            Via::Rpath(p) | Via::Runpath(p) | Via::Executable(p) => Some(p),
            _ => None,
        }
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string())
        };
        match self {
            Via::Path => f.write_str("path in DT_NEEDED"),
            Via::Rpath(p) => write!(f, "RPATH of {}", name(p)),
            Via::LdLibraryPath => f.write_str("LD_LIBRARY_PATH"),
            Via::Runpath(p) => write!(f, "RUNPATH of {}", name(p)),
            Via::Cache => f.write_str("ld.so.cache"),
            Via::DefaultDirs => f.write_str("default path"),
            Via::Executable(p) => write!(f, "already loaded by {}", name(p)),
        }
    }
}

/// What one place the loader tries held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    /// No such file (for the cache: no entry for this name and machine).
    Absent,
    /// The library used.
    Found,
    /// A library the loader skips: another ELF class or machine.
    WrongKind(String),
    /// A file that could not be opened; the loader goes on.
    Unreadable(String),
    /// A file the loader refuses with an error, ending the search.
    Unusable(String),
}

/// One place the loader tries: a directory (the file is `dir/NAME`), the
/// path a `DT_NEEDED` entry names, or the library cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub via: Via,
    /// The directory searched; for [`Via::Path`] the path itself, for
    /// [`Via::Cache`] the cache file.
    pub place: PathBuf,
    /// The file tried, when there was one (for the cache, the path of its
    /// entry).
    pub file: Option<PathBuf>,
    pub result: ProbeResult,
}

/// What became of one needed library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Found {
        path: PathBuf,
        via: Via,
        soname: Option<String>,
    },
    /// Looked for everywhere in [`Library::tried`], not found.
    Missing,
    /// The loader would stop at `path` with an error.
    Unusable {
        path: PathBuf,
        via: Via,
        detail: String,
    },
}

/// One library the plugin needs, directly or through another.
#[derive(Clone, Debug)]
pub struct Library {
    /// As the `DT_NEEDED` entry names it (tokens expanded).
    pub name: String,
    /// Other needed names that turned out to be the same file (two
    /// symlinks to one library, say).
    pub aliases: Vec<String>,
    /// The objects naming it, the first (which the loader searches for)
    /// first.
    pub needed_by: Vec<PathBuf>,
    pub outcome: Outcome,
    /// Every place tried, in the loader's order, up to the one that
    /// decided.
    pub tried: Vec<Probe>,
}

impl Library {
    pub fn is_found(&self) -> bool {
        matches!(self.outcome, Outcome::Found { .. })
    }

    /// The found file.
    pub fn path(&self) -> Option<&Path> {
        match &self.outcome {
            Outcome::Found { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The name the loader knows it by once loaded: its soname, else the
    /// needed name.
    pub fn soname(&self) -> &str {
        match &self.outcome {
            Outcome::Found {
                soname: Some(s), ..
            } => s,
            _ => &self.name,
        }
    }
}

/// The dependency walk of one plugin file.
#[derive(Clone, Debug)]
pub struct DepWalk {
    pub root: PathBuf,
    /// Why the plugin file itself cannot be loaded (unreadable, not an ELF
    /// shared library, the wrong class); nothing was walked then.
    pub root_problem: Option<String>,
    /// Every library needed, breadth-first as the loader maps them.
    pub libraries: Vec<Library>,
}

impl DepWalk {
    /// Did every library resolve (and the file itself qualify)?
    pub fn complete(&self) -> bool {
        self.root_problem.is_none() && self.libraries.iter().all(Library::is_found)
    }

    /// The libraries not found, or found unusable.
    pub fn unresolved(&self) -> impl Iterator<Item = &Library> {
        self.libraries.iter().filter(|l| !l.is_found())
    }
}
