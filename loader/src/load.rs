//! Loading one plugin file: a model plugin of rlx-runtime's is left alone
//! (§15) → trust and file checks → the embedded manifest's
//! ABI major, when it has one (docs/ABI.md §19) → dlopen → entry → version
//! and layout checks → registration. Every way this can fail is a [`LoadError`] variant, and
//! none of them takes the host down.
//!
//! Libraries are never unloaded, loaded or rejected: a library's
//! constructors have run, its thread-local destructors may be registered
//! and its statics may be referenced by threads it started (MLX keeps a
//! thread pool and global caches), so `dlclose` could pull code out from
//! under a running thread. Keeping the mapping costs only address space.

pub use super::load_error::LoadError;
use super::log_sink;
use super::model_plugins::{library_kind, LibraryKind};
use super::plugin::LoadedPlugin;
use super::trusted::{check_plugin_files, TrustPolicy};
use abi_stable::StableAbi;
use rlx_plugin_api::error::StatusCode;
use rlx_plugin_api::sized::AbiStruct;
use rlx_plugin_api::strings::RlxStr;
use rlx_plugin_api::tables::*;
use rlx_plugin_api::version::{check_compatible, ABI_VERSION};
use std::path::{Path, PathBuf};

/// Load one plugin file, under the trust policy the environment sets
/// ([`TrustPolicy::from_env`]).
pub fn load_plugin(path: &Path) -> Result<LoadedPlugin, LoadError> {
    load_plugin_with(path, TrustPolicy::from_env())
}

/// Load one plugin file: refused, before anything of it runs, when it
/// fails the ownership and mode check and `trust` is strict.
pub fn load_plugin_with(path: &Path, trust: TrustPolicy) -> Result<LoadedPlugin, LoadError> {
    if !path.exists() {
        return Err(LoadError::NotFound);
    }
    // Before the trust check: a model plugin is not ours to load, whoever
    // wrote it, and reading its symbols runs none of it.
    if library_kind(path) == LibraryKind::ModelPlugin {
        return Err(LoadError::ModelPlugin);
    }
    if let Err(detail) = check_plugin_files(path) {
        match trust {
            TrustPolicy::Strict => return Err(LoadError::Untrusted { detail }),
            TrustPolicy::AllowInsecure => log::warn!(
                "loading {} although another user could have written it ({}=1): {detail}",
                path.display(),
                super::trusted::ENV_ALLOW_INSECURE
            ),
        }
    }
    check_header(path)?;
    check_elf_bounds(path)?;
    let image = std::fs::read(path).map_err(|e| LoadError::NotALibrary {
        detail: format!("cannot read the file: {e}"),
    })?;
    check_manifest(&image)?;
    drop(image);
    let lib = open_library(path)?;
    // Never unloaded (see the module docs).
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: the entry symbol has the ABI's type RlxEntryFn (docs/ABI.md §1); the library is never unloaded.
    let entry: RlxEntryFn = unsafe {
        *lib.get::<RlxEntryFn>(ENTRY_SYMBOL.as_bytes())
            .map_err(|_| LoadError::MissingEntrySymbol)?
    };

    let label = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // SAFETY: the library's entry, which the loader just resolved.
    unsafe { load_from_entry(entry, path.to_path_buf(), label) }
}

/// Register a plugin linked into this program instead of loaded from a
/// file: `entry` is its `rlx_plugin_entry` (the function `export_plugin!`
/// defines at the plugin crate's root, reachable when the crate is a
/// dependency built as an rlib). The tables, checks and initialisation are
/// those of [`load_plugin`]; only the `dlopen` is skipped, so a platform
/// without one runs the same plugin code. Its [`LoadedPlugin::path`] is
/// `static:<name>`.
///
/// Two plugins made with `export_plugin!` cannot be linked into one
/// program: each defines the unmangled `rlx_plugin_entry` symbol.
///
/// # Safety
/// `entry` must be a plugin entry function with the ABI's contract
/// (docs/ABI.md §1), linked into this program (never unloaded).
pub unsafe fn load_static(entry: RlxEntryFn, name: &str) -> Result<LoadedPlugin, LoadError> {
    // SAFETY: the caller's promise.
    unsafe {
        load_from_entry(
            entry,
            PathBuf::from(format!("static:{name}")),
            name.to_string(),
        )
    }
}

/// Everything of a load after the entry is found: the host table, the
/// entry call, the table checks, `init`.
///
/// # Safety
/// `entry` is a plugin entry function that stays mapped for the process.
unsafe fn load_from_entry(
    entry: RlxEntryFn,
    path: PathBuf,
    label: String,
) -> Result<LoadedPlugin, LoadError> {
    let log_ctx = log_sink::new_ctx(label);
    let host: &'static RlxHostApi = Box::leak(Box::new(RlxHostApi {
        struct_size: RlxHostApi::STRUCT_SIZE,
        abi_version: ABI_VERSION,
        host_name: RlxStr::from_static("rlx-plugin-loader"),
        log_ctx: log_ctx as *const _ as *mut std::ffi::c_void,
        log: Some(log_sink::host_log),
        log_max_level: Some(log_sink::host_log_max_level),
        setting: Some(super::settings::host_setting),
    }));

    // SAFETY: `host` is a complete host table that lives for the rest of the process.
    let root = unsafe { entry(host) };
    if root.is_null() {
        return Err(LoadError::EntryReturnedNull);
    }
    // SAFETY: a non-null root is the plugin's static table; read_root checks its header before the rest.
    let api = unsafe { read_root(root)? };
    // SAFETY: `api` was read by its struct_size; its pointers are the plugin's static data.
    let plugin = unsafe { LoadedPlugin::new(path, api)? };
    if let Ok(mut l) = log_ctx.label.write() {
        *l = plugin.descriptor().name.clone();
    }
    plugin.init()?;
    Ok(plugin)
}

/// Refuse, before `dlopen`, a library whose embedded manifest says it was
/// built for another ABI major, or is malformed. A library without a
/// manifest (optional for plugins), or one this reader cannot parse, goes
/// on to the loader as before.
fn check_manifest(image: &[u8]) -> Result<(), LoadError> {
    use super::manifest::{read_manifest, ManifestReadError};
    match read_manifest(image) {
        Ok(Some(m)) => {
            check_compatible(ABI_VERSION, m.abi_version).map_err(LoadError::ManifestAbiMismatch)
        }
        Ok(None) | Err(ManifestReadError::Unreadable(_)) => Ok(()),
        Err(ManifestReadError::Malformed(e)) => Err(LoadError::InvalidManifest { detail: e.0 }),
    }
}

/// Refuse an ELF file whose tables or loadable segments run past its end:
/// `dlopen` would map it and fault on the missing pages (SIGBUS), taking
/// the host down. Other formats are left to their loaders.
fn check_elf_bounds(path: &Path) -> Result<(), LoadError> {
    use super::deps::{self, ElfError};
    match deps::check_elf_bounds(path) {
        Ok(()) | Err(ElfError::NotElf(_)) => Ok(()),
        Err(ElfError::Io(e)) => Err(LoadError::NotALibrary {
            detail: format!("cannot read the file: {e}"),
        }),
        Err(ElfError::Malformed(detail)) => Err(LoadError::InvalidLibrary { detail }),
    }
}

/// Refuse files that are not libraries before handing them to the loader.
fn check_header(path: &Path) -> Result<(), LoadError> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(|e| LoadError::NotALibrary {
            detail: format!("cannot read the file: {e}"),
        })?;
    let known: [&[u8]; 6] = [
        b"\x7fELF",
        &[0xcf, 0xfa, 0xed, 0xfe],
        &[0xce, 0xfa, 0xed, 0xfe],
        &[0xca, 0xfe, 0xba, 0xbe],
        &[0xbe, 0xba, 0xfe, 0xca],
        b"MZ",
    ];
    if known.iter().any(|m| magic[..n].starts_with(m)) {
        Ok(())
    } else {
        Err(LoadError::NotALibrary {
            detail: format!(
                "no ELF, Mach-O or PE header (first bytes {:02x?})",
                &magic[..n]
            ),
        })
    }
}

fn open_library(path: &Path) -> Result<libloading::Library, LoadError> {
    #[cfg(unix)]
    // SAFETY: opening a library runs its constructors; that is what loading a plugin means (docs/ABI.md §14 on trust).
    let opened = unsafe {
        // RTLD_NOW: resolve every symbol now, so a missing dependency is a
        // load error rather than a crash at first call. RTLD_LOCAL: two
        // plugins may carry their own copies of the same symbols.
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
        .map(libloading::Library::from)
    };
    #[cfg(not(unix))]
    let opened = unsafe { libloading::Library::new(path) };
    opened.map_err(|e| classify_dlerror(path, &e.to_string()))
}

/// Tell a missing dependency from a broken file by the loader's message.
fn classify_dlerror(path: &Path, msg: &str) -> LoadError {
    const MARK: &str = ": cannot open shared object file";
    let own = path.to_string_lossy();
    if let Some(i) = msg.find(MARK) {
        // glibc: "<what>: <dep>: cannot open shared object file: …"
        let before = &msg[..i];
        let dep = before.rsplit(": ").next().unwrap_or(before).trim();
        if !dep.is_empty() && !own.ends_with(dep) {
            return LoadError::MissingDependency {
                library: dep.to_string(),
                detail: msg.to_string(),
            };
        }
    }
    if msg.contains("Library not loaded") {
        // macOS dyld: "Library not loaded: @rpath/libfoo.dylib"
        let dep = msg
            .split("Library not loaded:")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or("?");
        return LoadError::MissingDependency {
            library: dep.to_string(),
            detail: msg.to_string(),
        };
    }
    LoadError::InvalidLibrary {
        detail: msg.to_string(),
    }
}

/// Read the plugin's root table: header, version, refusal, size, layout.
unsafe fn read_root(root: *const RlxPluginApi) -> Result<RlxPluginApi, LoadError> {
    // The frozen header is the same in every major.
    let declared = std::ptr::read_unaligned(root as *const usize);
    if declared < PLUGIN_API_HEADER_SIZE {
        return Err(LoadError::InvalidTable {
            detail: format!(
                "root table struct_size {declared} is smaller than the frozen header ({PLUGIN_API_HEADER_SIZE} bytes)"
            ),
        });
    }
    let header = &*root;
    let version = header.abi_version;
    check_compatible(ABI_VERSION, version).map_err(LoadError::AbiMismatch)?;
    if header.refusal_code != 0 {
        let code = StatusCode::from_raw(header.refusal_code);
        let message = header.refusal_message.to_string_lossy();
        return Err(if code == StatusCode::Panic {
            LoadError::EntryPanicked { message }
        } else {
            LoadError::Refused { code, message }
        });
    }
    let need = plugin_api_min_size(version.minor);
    if declared < need {
        return Err(LoadError::InvalidTable {
            detail: format!(
                "root table struct_size {declared} is smaller than ABI {version} requires ({need} bytes)"
            ),
        });
    }
    // Copy what both sides know; fields beyond the plugin's size stay zero
    // (absent), fields beyond ours are ignored.
    // SAFETY: every field is an integer, pointer, Option<fn> or RlxStr;
    // zero is valid for each.
    let api = rlx_plugin_api::sized::read_zero_filled(root);
    check_layout(&api)?;
    Ok(api)
}

/// Compare a Rust plugin's type layouts with ours. Only meaningful when
/// both claim the same major.minor: across minors the tables differ by
/// design and `struct_size` governs.
unsafe fn check_layout(api: &RlxPluginApi) -> Result<(), LoadError> {
    let same_minor =
        api.abi_version.major == ABI_VERSION.major && api.abi_version.minor == ABI_VERSION.minor;
    let tag = api.rust_layout_tag.to_string_lossy();
    if !same_minor || api.rust_layout.is_null() || tag != RUST_LAYOUT_TAG {
        return Ok(());
    }
    let theirs = &*(api.rust_layout as *const abi_stable::type_layout::TypeLayout);
    let ours = <RlxPluginApi as StableAbi>::LAYOUT;
    abi_stable::abi_stability::abi_checking::check_layout_compatibility(ours, theirs).map_err(
        |errs| {
            let detail = errs.to_string();
            // The full report is long; the first lines name the field.
            let short: String = detail.lines().take(12).collect::<Vec<_>>().join("\n");
            LoadError::LayoutMismatch { detail: short }
        },
    )
}
