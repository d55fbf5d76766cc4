//! Sharing a plugins directory with rlx-runtime's model plugins.
//!
//! rlx-runtime's model API loads, at a program's first model call, every
//! library directly in `$RLX_HOME/plugins` (else `~/.rlx/plugins`) as a
//! *model plugin*: a library made with `rlx_runtime::export_model_plugin!`,
//! which exports `rlx_model_plugin_v1`. Backend discovery searches the same
//! directory (docs/ABI.md §15). The two kinds share it by place and by
//! recognition:
//! - a backend plugin lives in a subdirectory (`plugins/mlx/librlx_mlx.so`),
//!   which that loader does not read;
//! - a model plugin lives directly in it, and discovery recognises it from
//!   the symbols its file exports and skips it without loading it (loading
//!   runs its constructors).

use super::discover::DiscoveryConfig;
use object::read::macho::{FatArch, MachOFatFile32, MachOFatFile64};
use object::{BinaryFormat, FileKind, Object, ReadCache, ReadRef};
use rlx_plugin_api::tables::ENTRY_SYMBOL;
use std::path::{Path, PathBuf};

/// The symbol a model plugin exports (rlx-runtime's
/// `model::plugin::PLUGIN_SYMBOL`).
pub const MODEL_PLUGIN_SYMBOL: &str = "rlx_model_plugin_v1";

/// What a library is, as far as its file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LibraryKind {
    /// It exports `rlx_plugin_entry` or carries a manifest (§19): meant as
    /// a backend plugin, whether or not it loads.
    BackendPlugin,
    /// It exports `rlx_model_plugin_v1` and is not a backend plugin.
    ModelPlugin,
    /// Anything else, or a file whose symbols could not be read: the
    /// loader decides, and names what is wrong.
    Other,
}

/// The kind of the library at `path`, read from the file without loading
/// it: its exported dynamic symbols and its sections.
pub fn library_kind(path: &Path) -> LibraryKind {
    match read_facts(path) {
        Ok(f) if f.exports_entry || f.has_manifest => LibraryKind::BackendPlugin,
        Ok(f) if f.exports_model_table => LibraryKind::ModelPlugin,
        Ok(_) | Err(_) => LibraryKind::Other,
    }
}

/// The directory rlx-runtime's model-plugin loader reads (its
/// `home_plugin_dir`): discovery's rule 4, `$RLX_HOME/plugins`, else
/// `~/.rlx/plugins`.
pub fn model_plugin_dir(cfg: &DiscoveryConfig) -> Option<PathBuf> {
    cfg.rlx_home_dir().map(|h| h.join("plugins"))
}

/// Would rlx-runtime's model-plugin loader, reading `model_dir`, try to
/// load `library`? It takes every file with the platform's library
/// extension directly in that directory (a symlink included), and nothing
/// below it; this lists the directory the same way.
pub fn read_by_model_loader(model_dir: &Path, library: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(model_dir) else {
        return false;
    };
    let target = library.canonicalize().ok();
    entries.filter_map(|e| e.ok().map(|e| e.path())).any(|p| {
        p.is_file()
            && p.extension()
                .is_some_and(|x| x == std::env::consts::DLL_EXTENSION)
            && target.is_some()
            && p.canonicalize().ok() == target
    })
}

/// What decides a library's kind.
struct Facts {
    exports_entry: bool,
    exports_model_table: bool,
    has_manifest: bool,
}

/// Read the facts from the file's headers and tables only (a `ReadCache`
/// reads what the parser asks for, not the whole library).
fn read_facts(path: &Path) -> Result<Facts, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let cache = ReadCache::new(file);
    let data = &cache;
    let err = |e: object::Error| e.to_string();
    match FileKind::parse(data).map_err(err)? {
        FileKind::Elf32 | FileKind::Elf64 | FileKind::MachO32 | FileKind::MachO64 => {
            object_facts(&object::File::parse(data).map_err(err)?)
        }
        FileKind::MachOFat32 => {
            let fat = MachOFatFile32::parse(data).map_err(err)?;
            object_facts(&this_machine_slice(data, fat.arches())?)
        }
        FileKind::MachOFat64 => {
            let fat = MachOFatFile64::parse(data).map_err(err)?;
            object_facts(&this_machine_slice(data, fat.arches())?)
        }
        // Another format (PE, for Windows) needs its arm here; until then
        // such a library goes to the loader as before.
        other => Err(format!("{other:?} files are not read")),
    }
}

/// The slice of a universal binary this machine would load.
fn this_machine_slice<'d, R: ReadRef<'d>, A: FatArch>(
    data: R,
    arches: &[A],
) -> Result<object::File<'d, &'d [u8]>, String> {
    let this = super::manifest::this_architecture();
    let arch = arches
        .iter()
        .find(|a| a.architecture() == this)
        .ok_or_else(|| format!("a universal binary without a slice for {this:?}"))?;
    let bytes = arch.data(data).map_err(|e| e.to_string())?;
    object::File::parse(bytes).map_err(|e| e.to_string())
}

fn object_facts<'d, R: ReadRef<'d>>(file: &object::File<'d, R>) -> Result<Facts, String> {
    let macho = file.format() == BinaryFormat::MachO;
    let exports = file.exports().map_err(|e| e.to_string())?;
    let exported = |symbol: &str| {
        exports.iter().any(|e| {
            // Mach-O prefixes C names with an underscore.
            let name = e.name();
            let name = if macho {
                name.strip_prefix(b"_").unwrap_or(name)
            } else {
                name
            };
            name == symbol.as_bytes()
        })
    };
    Ok(Facts {
        exports_entry: exported(ENTRY_SYMBOL),
        exports_model_table: exported(MODEL_PLUGIN_SYMBOL),
        has_manifest: file
            .sections()
            .any(|s| super::manifest::is_manifest_section(&s, macho)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_cannot_be_read_are_left_to_the_loader() {
        let t = tempfile::tempdir().unwrap();
        let text = t.path().join("libtext.so");
        std::fs::write(&text, b"INPUT(-lfoo)\n").unwrap();
        assert_eq!(library_kind(&text), LibraryKind::Other);
        let cut = t.path().join("libcut.so");
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        std::fs::write(&cut, &exe[..exe.len().min(200)]).unwrap();
        assert_eq!(library_kind(&cut), LibraryKind::Other);
        assert_eq!(
            library_kind(&t.path().join("absent.so")),
            LibraryKind::Other
        );
        assert_eq!(library_kind(t.path()), LibraryKind::Other);
    }

    #[test]
    fn this_test_binary_carries_a_manifest_so_it_counts_as_a_backend_plugin() {
        // `crate::manifest`'s tests embed one in this binary.
        if !cfg!(any(target_os = "linux", target_vendor = "apple")) {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        assert_eq!(library_kind(&exe), LibraryKind::BackendPlugin);
    }

    #[test]
    fn only_libraries_directly_in_the_model_directory_are_read_by_that_loader() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("plugins");
        let lib = |p: &Path| {
            let f = p.join(format!("libx.{}", std::env::consts::DLL_EXTENSION));
            std::fs::create_dir_all(p).unwrap();
            std::fs::write(&f, b"x").unwrap();
            f
        };
        let flat = lib(&dir);
        let below = lib(&dir.join("mlx"));
        let elsewhere = lib(&t.path().join("elsewhere"));
        assert!(read_by_model_loader(&dir, &flat));
        assert!(!read_by_model_loader(&dir, &below));
        assert!(!read_by_model_loader(&dir, &elsewhere));
        let readme = dir.join("README.txt");
        std::fs::write(&readme, b"x").unwrap();
        assert!(!read_by_model_loader(&dir, &readme));
        // A symlink directly in the directory is read through.
        #[cfg(unix)]
        {
            let link = dir.join(format!("liblink.{}", std::env::consts::DLL_EXTENSION));
            std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
            assert!(read_by_model_loader(&dir, &elsewhere));
        }
    }

    #[test]
    fn the_model_directory_is_discoverys_home_directory() {
        let cfg = DiscoveryConfig {
            rlx_home: Some("/r".into()),
            home: Some("/h".into()),
            ..Default::default()
        };
        assert_eq!(model_plugin_dir(&cfg), Some(PathBuf::from("/r/plugins")));
        let cfg = DiscoveryConfig {
            rlx_home: None,
            ..cfg
        };
        assert_eq!(
            model_plugin_dir(&cfg),
            Some(PathBuf::from("/h/.rlx/plugins"))
        );
    }
}
