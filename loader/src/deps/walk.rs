//! The walk itself: breadth-first over `DT_NEEDED`, each name searched
//! as `_dl_map_object` searches it (the rules are in the parent module's
//! documentation).

use super::elf::{self, ElfError};
use super::env;
use super::{DepWalk, Library, Outcome, Probe, ProbeResult, SearchEnv, Via};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

/// An object being walked: the plugin or a library found for it.
struct Object {
    path: PathBuf,
    dynamic: elf::Dynamic,
    /// The object it was loaded for (`None` for the plugin).
    loader: Option<usize>,
}

/// What a needed name is bound to.
#[derive(Clone, Copy)]
enum Bound {
    /// The plugin itself (its soname).
    Root,
    Library(usize),
    /// A library the executable has loaded before any plugin (an index
    /// into `Walker::preloaded`).
    Preloaded(usize),
}

/// Walk the dependencies of the plugin file `root` under `env`.
///
/// With [`SearchEnv::executable`] set, the executable's own libraries are
/// taken as loaded first: a plugin needing one of their names gets that
/// library, wherever its own search paths point, as in the real process.
pub fn walk(root: &Path, env: &SearchEnv) -> DepWalk {
    let exe = env
        .executable
        .as_deref()
        .and_then(|p| elf::read(p).ok().map(|(_, d)| (absolute(p), d)));
    let mut w = Walker::new(
        env,
        exe.as_ref()
            .map(|(p, d)| (p.clone(), d.rpath.clone().unwrap_or_default())),
    );
    if let Some((path, dynamic)) = exe {
        // The executable's closure, walked with the same rules (its chain
        // ends at itself).
        let mut pre = Walker::new(env, None);
        let libs = pre.run(path, dynamic);
        w.preload(libs);
    }
    let root_path = absolute(root);
    let problem = match open(&root_path, env) {
        Opened::Usable(d) => {
            let libraries = w.run(root_path, d);
            return DepWalk {
                root: root.to_path_buf(),
                root_problem: None,
                libraries,
            };
        }
        Opened::Absent => "no such file".to_string(),
        Opened::WrongKind(e) | Opened::Unreadable(e) | Opened::Unusable(e) => e,
    };
    DepWalk {
        root: root.to_path_buf(),
        root_problem: Some(problem),
        libraries: Vec::new(),
    }
}

struct Walker<'a> {
    env: &'a SearchEnv,
    /// The executable's path and DT_RPATH (empty when it has none, or has
    /// a RUNPATH).
    exe: Option<(PathBuf, String)>,
    objects: Vec<Object>,
    libraries: Vec<Library>,
    preloaded: Vec<Library>,
    bound: HashMap<String, Bound>,
    #[cfg(unix)]
    by_file: HashMap<(u64, u64), Bound>,
}

impl<'a> Walker<'a> {
    fn new(env: &'a SearchEnv, exe: Option<(PathBuf, String)>) -> Walker<'a> {
        Walker {
            env,
            exe,
            objects: Vec::new(),
            libraries: Vec::new(),
            preloaded: Vec::new(),
            bound: HashMap::new(),
            #[cfg(unix)]
            by_file: HashMap::new(),
        }
    }

    /// Take `libs` (the executable's) as already loaded.
    fn preload(&mut self, libs: Vec<Library>) {
        for lib in libs.into_iter().filter(Library::is_found) {
            let b = Bound::Preloaded(self.preloaded.len());
            self.bound.entry(lib.name.clone()).or_insert(b);
            self.bound.entry(lib.soname().to_string()).or_insert(b);
            #[cfg(unix)]
            if let Some(id) = lib.path().and_then(file_id) {
                self.by_file.entry(id).or_insert(b);
            }
            self.preloaded.push(lib);
        }
    }

    /// Walk breadth-first from `root`, the way `_dl_map_object_deps` maps
    /// dependencies; return every library needed.
    fn run(&mut self, root: PathBuf, dynamic: elf::Dynamic) -> Vec<Library> {
        if let Some(s) = &dynamic.soname {
            self.bound.entry(s.clone()).or_insert(Bound::Root);
        }
        self.objects.push(Object {
            path: root,
            dynamic,
            loader: None,
        });
        let mut queue = VecDeque::from([self.objects.len() - 1]);
        while let Some(i) = queue.pop_front() {
            for raw in self.objects[i].dynamic.needed.clone() {
                let origin = self.objects[i].path.parent().map(Path::to_path_buf);
                // glibc expands tokens in DT_NEEDED names too.
                let Some(name) = env::expand(&raw, origin.as_deref(), self.env) else {
                    continue;
                };
                let needer = self.objects[i].path.clone();
                if let Some(b) = self.bound.get(&name).copied() {
                    self.bind(b, &name, needer, false);
                    continue;
                }
                let (outcome, tried, dynamic) = self.resolve(&name, i);
                // A file already loaded under another name is that library
                // (the loader compares device and inode).
                #[cfg(unix)]
                if let Outcome::Found { path, .. } = &outcome {
                    if let Some(b) = file_id(path).and_then(|id| self.by_file.get(&id).copied()) {
                        self.bind(b, &name, needer, true);
                        continue;
                    }
                }
                let l = self.libraries.len();
                self.bound.insert(name.clone(), Bound::Library(l));
                if let (Outcome::Found { path, soname, .. }, Some(dynamic)) = (&outcome, dynamic) {
                    if let Some(s) = soname {
                        self.bound.entry(s.clone()).or_insert(Bound::Library(l));
                    }
                    #[cfg(unix)]
                    if let Some(id) = file_id(path) {
                        self.by_file.insert(id, Bound::Library(l));
                    }
                    self.objects.push(Object {
                        path: path.clone(),
                        dynamic,
                        loader: Some(i),
                    });
                    queue.push_back(self.objects.len() - 1);
                }
                self.libraries.push(Library {
                    name,
                    aliases: Vec::new(),
                    needed_by: vec![needer],
                    outcome,
                    tried,
                });
            }
        }
        std::mem::take(&mut self.libraries)
    }

    /// `needer` needs `name`, which is bound to `b` already; `by_file`: it
    /// was found under another name.
    fn bind(&mut self, b: Bound, name: &str, needer: PathBuf, by_file: bool) {
        match b {
            Bound::Root => {}
            Bound::Library(l) => {
                let lib = &mut self.libraries[l];
                lib.needed_by.push(needer);
                if by_file && !lib.aliases.iter().any(|a| a == name) {
                    lib.aliases.push(name.to_string());
                }
                self.bound.insert(name.to_string(), b);
            }
            Bound::Preloaded(p) => {
                // First need of a library the executable has: list it once,
                // then bind the name to that entry.
                let pre = &self.preloaded[p];
                let (path, soname) = match &pre.outcome {
                    Outcome::Found { path, soname, .. } => (path.clone(), soname.clone()),
                    _ => return,
                };
                let exe = self
                    .exe
                    .as_ref()
                    .map(|(e, _)| e.clone())
                    .unwrap_or_default();
                let l = self.libraries.len();
                self.libraries.push(Library {
                    name: name.to_string(),
                    aliases: Vec::new(),
                    needed_by: vec![needer],
                    outcome: Outcome::Found {
                        path,
                        via: Via::Executable(exe),
                        soname,
                    },
                    tried: Vec::new(),
                });
                self.bound.insert(name.to_string(), Bound::Library(l));
            }
        }
    }
}

impl Walker<'_> {
    /// Search for `name`, needed by object `i`.
    fn resolve(&self, name: &str, i: usize) -> (Outcome, Vec<Probe>, Option<elf::Dynamic>) {
        let mut tried = Vec::new();
        if name.contains('/') {
            let path = absolute(Path::new(name));
            let decided = self.try_file(&mut tried, Via::Path, &path, path.clone());
            return match decided {
                Some((o, d)) => (o, tried, d),
                None => (Outcome::Missing, tried, None),
            };
        }
        let obj = &self.objects[i];
        let mut lists: Vec<(Via, Vec<PathBuf>)> = Vec::new();
        if obj.dynamic.runpath.is_none() {
            let mut at = Some(i);
            while let Some(j) = at {
                let o = &self.objects[j];
                if let Some(rpath) = &o.dynamic.rpath {
                    lists.push((
                        Via::Rpath(o.path.clone()),
                        self.dirs(rpath, &[':'], &o.path),
                    ));
                }
                at = o.loader;
            }
            if let Some((exe, rpath)) = &self.exe {
                if !rpath.is_empty() {
                    lists.push((Via::Rpath(exe.clone()), self.dirs(rpath, &[':'], exe)));
                }
            }
        }
        if let Some(llp) = &self.env.ld_library_path {
            // $ORIGIN in LD_LIBRARY_PATH is the executable's directory.
            let origin = self.exe.as_ref().map(|(p, _)| p.clone());
            let dirs = match &origin {
                Some(o) => self.dirs(&llp.to_string_lossy(), &[':', ';'], o),
                None => env::split_list(&llp.to_string_lossy(), &[':', ';'], None, self.env),
            };
            lists.push((Via::LdLibraryPath, dirs));
        }
        if let Some(runpath) = &obj.dynamic.runpath {
            lists.push((
                Via::Runpath(obj.path.clone()),
                self.dirs(runpath, &[':'], &obj.path),
            ));
        }
        for (via, dirs) in lists {
            for dir in dirs {
                let file = dir.join(name);
                if let Some((o, d)) = self.try_file(&mut tried, via.clone(), &dir, file) {
                    return (o, tried, d);
                }
            }
        }
        if !obj.dynamic.nodeflib {
            let cache = PathBuf::from(&self.env.cache.source);
            let entries = self.env.cache.lookup(name, &self.env.expect);
            if entries.is_empty() {
                tried.push(Probe {
                    via: Via::Cache,
                    place: cache.clone(),
                    file: None,
                    result: ProbeResult::Absent,
                });
            }
            for file in entries {
                let file = file.to_path_buf();
                if let Some((o, d)) = self.try_file(&mut tried, Via::Cache, &cache, file) {
                    return (o, tried, d);
                }
            }
            for dir in &self.env.default_dirs {
                let file = dir.join(name);
                if let Some((o, d)) = self.try_file(&mut tried, Via::DefaultDirs, dir, file) {
                    return (o, tried, d);
                }
            }
        }
        (Outcome::Missing, tried, None)
    }

    /// The directories of a search list held by the object at `holder`.
    fn dirs(&self, list: &str, seps: &[char], holder: &Path) -> Vec<PathBuf> {
        env::split_list(list, seps, holder.parent(), self.env)
    }

    /// Try one file; `Some` when it decides the search (found, or an error
    /// that stops the loader).
    fn try_file(
        &self,
        tried: &mut Vec<Probe>,
        via: Via,
        place: &Path,
        file: PathBuf,
    ) -> Option<(Outcome, Option<elf::Dynamic>)> {
        let opened = open(&file, self.env);
        let (result, decided) = match opened {
            Opened::Absent => (ProbeResult::Absent, None),
            Opened::WrongKind(e) => (ProbeResult::WrongKind(e), None),
            Opened::Unreadable(e) => (ProbeResult::Unreadable(e), None),
            Opened::Unusable(e) => (
                ProbeResult::Unusable(e.clone()),
                Some((
                    Outcome::Unusable {
                        path: file.clone(),
                        via: via.clone(),
                        detail: e,
                    },
                    None,
                )),
            ),
            Opened::Usable(d) => (
                ProbeResult::Found,
                Some((
                    Outcome::Found {
                        path: file.clone(),
                        via: via.clone(),
                        soname: d.soname.clone(),
                    },
                    Some(d),
                )),
            ),
        };
        tried.push(Probe {
            via,
            place: place.to_path_buf(),
            file: Some(file),
            result,
        });
        decided
    }
}

/// What opening one file as the loader does gives.
enum Opened {
    Absent,
    WrongKind(String),
    Unreadable(String),
    Unusable(String),
    Usable(elf::Dynamic),
}

/// Open `path` and check it as `open_verify` does: class and machine
/// mismatches are skipped, any other defect is an error.
fn open(path: &Path, env: &SearchEnv) -> Opened {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Opened::Absent,
        Err(e) => return Opened::Unreadable(e.to_string()),
        Ok(m) if m.is_dir() => return Opened::Unusable("a directory, not a library".into()),
        Ok(_) => {}
    }
    let header = match elf::read_header(path) {
        Ok(h) => h,
        Err(ElfError::Io(e)) => return Opened::Unreadable(e),
        Err(e) => return Opened::Unusable(e.to_string()),
    };
    let want = &env.expect;
    if header.kind.class64 != want.class64 {
        return Opened::WrongKind(format!(
            "wrong ELF class: {} (the loader is {})",
            header.kind.class_name(),
            want.class_name()
        ));
    }
    if header.kind.little_endian != want.little_endian {
        return Opened::Unusable(format!(
            "ELF file data encoding not {}",
            if want.little_endian {
                "little-endian"
            } else {
                "big-endian"
            }
        ));
    }
    if want.machine != 0 && header.kind.machine != want.machine {
        return Opened::WrongKind(format!(
            "wrong machine: {} (the loader is {})",
            header.kind.machine_name(),
            want.machine_name()
        ));
    }
    if let Some(p) = header.type_problem() {
        return Opened::Unusable(p);
    }
    match elf::read(path) {
        Ok((_, d)) if d.pie => {
            Opened::Unusable("a position-independent executable, not a shared library".into())
        }
        Ok((_, d)) => Opened::Usable(d),
        Err(ElfError::Io(e)) => Opened::Unreadable(e),
        Err(e) => Opened::Unusable(e.to_string()),
    }
}

/// The loader keeps an object's path as it opened it, made absolute
/// against the working directory, with symlinks not resolved: `$ORIGIN`
/// is that path's directory.
fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

#[cfg(unix)]
pub(super) fn file_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}
