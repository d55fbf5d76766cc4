//! Which dynamic libraries a Mach-O plugin (macOS) needs, and where dyld
//! would find each, read on any machine: the `LC_LOAD_DYLIB` entries of the
//! plugin and of every library it ships beside itself.
//!
//! dyld's rules, as far as a plugin directory decides them:
//! - `@rpath/NAME`: each `LC_RPATH` of the image that asks, then of the
//!   images that loaded it (the plugin's), in order, with `@loader_path`
//!   the asking image's directory;
//! - `@loader_path/NAME`: the asking image's directory;
//! - `@executable_path/...`: the host program's directory, which a plugin
//!   cannot know: reported as depending on the host;
//! - `/usr/lib/...` and `/System/Library/...`: macOS's own libraries and
//!   frameworks, in its shared cache (present on every Mac, not readable
//!   here);
//! - any other absolute path: a path of the machine that built the file,
//!   which a Mac user's machine will not have.
//!
//! Libraries found in the plugin's directory are read in turn. Not
//! modelled: `DYLD_*` environment variables and fallback paths.

use object::macho;
use object::read::macho::{LoadCommandVariant, MachHeader};
use object::{Endianness, ReadCache};
use std::path::{Path, PathBuf};

/// How one `LC_LOAD_DYLIB` name resolves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MachoOutcome {
    /// A file of the plugin directory (the path it resolved to).
    Found(PathBuf),
    /// A macOS system library or framework.
    System,
    /// Not found: the places dyld would look, in order.
    Missing(Vec<PathBuf>),
    /// Cannot resolve on another machine (why).
    Unresolvable(String),
}

/// One dependency of one image.
#[derive(Clone, Debug)]
pub struct MachoDep {
    /// The image that names it.
    pub image: PathBuf,
    /// The name as the load command holds it.
    pub name: String,
    /// Weakly linked (`LC_LOAD_WEAK_DYLIB`): dyld goes on without it.
    pub weak: bool,
    pub outcome: MachoOutcome,
}

/// Every dependency of a Mach-O plugin and of the libraries it ships.
#[derive(Clone, Debug, Default)]
pub struct MachoWalk {
    pub deps: Vec<MachoDep>,
}

impl MachoWalk {
    /// The dependencies that would stop dyld: missing or unresolvable, not
    /// weak.
    pub fn unresolved(&self) -> impl Iterator<Item = &MachoDep> {
        self.deps.iter().filter(|d| {
            !d.weak
                && matches!(
                    d.outcome,
                    MachoOutcome::Missing(_) | MachoOutcome::Unresolvable(_)
                )
        })
    }

    pub fn complete(&self) -> bool {
        self.unresolved().next().is_none()
    }
}

/// Whether `path` is a (thin, 64-bit) Mach-O file: its magic number, read
/// without the rest of the file.
pub fn is_macho(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && u32::from_le_bytes(magic) == macho::MH_MAGIC_64
}

/// The load names and rpaths of one image.
struct Image {
    loads: Vec<(String, bool)>,
    rpaths: Vec<String>,
}

/// Read the header and load commands only (a `ReadCache` reads what the
/// parser asks for, not the whole library).
fn read_image(path: &Path) -> Result<Image, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cache = ReadCache::new(file);
    let data = &cache;
    let header = macho::MachHeader64::<Endianness>::parse(data, 0)
        .map_err(|e| format!("{}: not a 64-bit Mach-O file: {e}", path.display()))?;
    let bad = |e: object::Error| format!("{}: {e}", path.display());
    let endian = header.endian().map_err(bad)?;
    let mut cmds = header.load_commands(endian, data, 0).map_err(bad)?;
    let mut image = Image {
        loads: Vec::new(),
        rpaths: Vec::new(),
    };
    while let Some(cmd) = cmds.next().map_err(bad)? {
        let text = |s| String::from_utf8_lossy(s).into_owned();
        match cmd.variant().map_err(bad)? {
            LoadCommandVariant::Dylib(d) => {
                let weak = cmd.cmd() == macho::LC_LOAD_WEAK_DYLIB;
                image
                    .loads
                    .push((text(cmd.string(endian, d.dylib.name).map_err(bad)?), weak));
            }
            LoadCommandVariant::Rpath(r) => image
                .rpaths
                .push(text(cmd.string(endian, r.path).map_err(bad)?)),
            _ => {}
        }
    }
    Ok(image)
}

/// `rpath` with `@loader_path` as `dir`; None for `@executable_path`.
fn expand(rpath: &str, dir: &Path) -> Option<PathBuf> {
    if let Some(rest) = rpath.strip_prefix("@loader_path") {
        return Some(dir.join(rest.trim_start_matches('/')));
    }
    if rpath.starts_with("@executable_path") {
        return None;
    }
    Some(PathBuf::from(rpath))
}

fn is_system(path: &str) -> bool {
    path.starts_with("/usr/lib/") || path.starts_with("/System/Library/")
}

/// Walk the plugin library at `root`.
pub fn walk_macho(root: &Path) -> Result<MachoWalk, String> {
    let mut walk = MachoWalk::default();
    // (image, rpaths of the images that loaded it, expanded)
    let mut todo: Vec<(PathBuf, Vec<PathBuf>)> = vec![(root.to_path_buf(), Vec::new())];
    let mut seen: Vec<PathBuf> = Vec::new();
    while let Some((path, inherited)) = todo.pop() {
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        let image = read_image(&path)?;
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let mut rpaths: Vec<PathBuf> = Vec::new();
        let mut host_rpath = false;
        for r in &image.rpaths {
            match expand(r, &dir) {
                Some(p) => rpaths.push(p),
                None => host_rpath = true,
            }
        }
        rpaths.extend(inherited.iter().cloned());
        for (name, weak) in image.loads {
            let outcome = if let Some(rest) = name.strip_prefix("@rpath/") {
                match rpaths.iter().map(|r| r.join(rest)).find(|p| p.is_file()) {
                    Some(p) => MachoOutcome::Found(p),
                    None if host_rpath => MachoOutcome::Unresolvable(
                        "only the host program's rpath (@executable_path) could hold it".into(),
                    ),
                    None => MachoOutcome::Missing(rpaths.iter().map(|r| r.join(rest)).collect()),
                }
            } else if let Some(rest) = name.strip_prefix("@loader_path/") {
                let p = dir.join(rest);
                if p.is_file() {
                    MachoOutcome::Found(p)
                } else {
                    MachoOutcome::Missing(vec![p])
                }
            } else if name.starts_with("@executable_path") {
                MachoOutcome::Unresolvable("relative to the host program, not the plugin".into())
            } else if is_system(&name) {
                MachoOutcome::System
            } else {
                MachoOutcome::Unresolvable(
                    "an absolute path outside macOS's own libraries: a path of the build \
                     machine"
                        .into(),
                )
            };
            if let MachoOutcome::Found(p) = &outcome {
                todo.push((p.clone(), rpaths.clone()));
            }
            walk.deps.push(MachoDep {
                image: path.clone(),
                name,
                weak,
                outcome,
            });
        }
    }
    Ok(walk)
}
