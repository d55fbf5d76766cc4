//! Plugins that would share a library: the loader binds a needed name
//! to an already loaded object of that soname before it searches any path,
//! so two plugin directories each shipping their own `libmlx.so` get one
//! `libmlx.so` between them in one process.

use super::DepWalk;
use std::path::{Path, PathBuf};

/// A library one plugin would share with an earlier one in the same
/// process: both need the soname, and they ship different files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SonameClash {
    pub soname: String,
    /// This plugin's file for it (`None` when it has none of its own).
    pub path: Option<PathBuf>,
    /// The earlier plugin, and the file it loads under that soname.
    pub other_plugin: PathBuf,
    pub other_path: PathBuf,
}

/// For each walk, the sonames it shares with an earlier walk in `walks`
/// (discovery order) whose plugin loads completely. Once a library of a
/// soname is loaded, the loader binds every later need of that name to it
/// before searching any path, so only one is loaded per process.
pub fn soname_clashes(walks: &[&DepWalk]) -> Vec<Vec<SonameClash>> {
    let mut out = vec![Vec::new(); walks.len()];
    for (b, later) in walks.iter().enumerate() {
        for earlier in walks[..b].iter().filter(|w| w.complete()) {
            for lib in &later.libraries {
                let other = earlier
                    .libraries
                    .iter()
                    .find(|o| o.is_found() && (o.soname() == lib.name || o.name == lib.name));
                let Some(other) = other else { continue };
                let (Some(other_path), mine) = (other.path(), lib.path()) else {
                    continue;
                };
                if mine.is_some_and(|m| same_file(m, other_path)) {
                    continue;
                }
                let clash = SonameClash {
                    soname: lib.name.clone(),
                    path: mine.map(Path::to_path_buf),
                    other_plugin: earlier.root.clone(),
                    other_path: other_path.to_path_buf(),
                };
                if !out[b]
                    .iter()
                    .any(|c: &SonameClash| c.soname == clash.soname)
                {
                    out[b].push(clash);
                }
            }
        }
    }
    out
}

fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    if let (Some(x), Some(y)) = (super::walk::file_id(a), super::walk::file_id(b)) {
        return x == y;
    }
    a.canonicalize().ok() == b.canonicalize().ok()
}
