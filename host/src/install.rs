//! [`install`]: discover, pick and register in one call.

use rlx_plugin_api::Mode;
use rlx_plugin_loader::{CandidateState, DiscoveryConfig, LoadedPlugin, PluginSet, TrustPolicy};
use rlx_runtime::Device;
use std::path::PathBuf;
use std::sync::Arc;

/// What [`install`] does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Plugin files or directories searched first (before
    /// `RLX_BACKEND_PLUGINS` and the default directories).
    pub plugins: Vec<PathBuf>,
    /// The backend to install: a plugin name; a loaded GPU variant
    /// (`mlx-cuda` for `mlx`) is preferred ([`PluginSet::select`]).
    pub backend: String,
    /// The rlx-runtime device it serves.
    pub device: Device,
    /// The execution mode its compiles use (see [`crate::set_plugin_mode`]).
    pub mode: Mode,
    /// The most bytes one tensor may take in its compiles; None = the plugin's
    /// own limit (its device's memory). See
    /// [`crate::backend::set_memory_limit`].
    pub memory_limit: Option<u64>,
    /// Whether the nodes the plugin does not take run on rlx-runtime's CPU
    /// backend (the default) or make the compile fail. See
    /// [`crate::backend::set_fallback`] and [`crate::partition`].
    pub fallback: crate::partition::Fallback,
    /// Whether plugins another user could have written are loaded
    /// (default: refused; `RLX_ALLOW_INSECURE_PLUGINS=1` also allows).
    pub trust: TrustPolicy,
    /// Install a logger printing warnings and errors (the plugins' too) to
    /// stderr, when the program has none. Off by default: a program with
    /// its own `log` logger gets the records there.
    pub log_to_stderr: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            plugins: Vec::new(),
            backend: "mlx".into(),
            device: Device::Mlx,
            mode: Mode::Lazy,
            memory_limit: None,
            fallback: crate::partition::Fallback::Cpu,
            trust: TrustPolicy::from_env(),
            log_to_stderr: false,
        }
    }
}

/// What [`install`] found and registered.
#[derive(Clone)]
pub struct Installed {
    /// Every candidate and what became of it.
    pub set: PluginSet,
    /// The plugin now serving [`Installed::device`].
    pub plugin: Arc<LoadedPlugin>,
    pub device: Device,
}

/// Discover plugins, pick the one serving `opts.backend`, and register it
/// as rlx-runtime's backend for `opts.device`. The error names every
/// candidate found and why none serves (one line).
pub fn install(opts: &Options) -> Result<Installed, String> {
    if opts.log_to_stderr {
        stderr_logger();
    }
    let cfg = DiscoveryConfig {
        trust: opts.trust,
        ..DiscoveryConfig::from_env(opts.plugins.clone())
    };
    let set = PluginSet::load(&cfg);
    let plugin = find_plugin(&set, &opts.backend)?;
    crate::register_plugin_backend(plugin.clone(), opts.device, opts.mode);
    crate::backend::set_memory_limit(opts.device, opts.memory_limit);
    crate::backend::set_fallback(opts.device, opts.fallback);
    Ok(Installed {
        set,
        plugin,
        device: opts.device,
    })
}

/// Register a plugin linked into this program, with no file and no
/// `dlopen`: `entry` is the plugin crate's `rlx_plugin_entry` (every
/// plugin made with `export_plugin!` defines it at its root), the crate a
/// dependency of the program. The same tables are read and checked as for
/// a loaded plugin ([`rlx_plugin_loader::load_static`]), and the same
/// adapter registers it for `opts.device`; `opts.plugins`, `opts.backend`
/// and `opts.trust` are not used (nothing is discovered).
///
/// # Safety
/// `entry` must be a plugin entry function with the ABI's contract
/// (docs/ABI.md §1) linked into this program: `export_plugin!`'s
/// `rlx_plugin_entry` of a crate this program depends on.
///
/// ```no_run
/// // Cargo.toml: rlx-plugin-mlx = { version = "0.1", default-features = false }
/// # #[cfg(any())]
/// let plugin = unsafe {
///     rlx_plugin_host::install_static(rlx_mlx::rlx_plugin_entry, "mlx",
///         &rlx_plugin_host::Options::default())?
/// };
/// # Ok::<(), String>(())
/// ```
pub unsafe fn install_static(
    entry: rlx_plugin_api::tables::RlxEntryFn,
    name: &str,
    opts: &Options,
) -> Result<Arc<LoadedPlugin>, String> {
    if opts.log_to_stderr {
        stderr_logger();
    }
    // SAFETY: this function's own contract.
    let plugin = unsafe { rlx_plugin_loader::load_static(entry, name) }
        .map(Arc::new)
        .map_err(|e| format!("the statically linked plugin {name:?} did not register: {e}"))?;
    crate::register_plugin_backend(plugin.clone(), opts.device, opts.mode);
    crate::backend::set_memory_limit(opts.device, opts.memory_limit);
    crate::backend::set_fallback(opts.device, opts.fallback);
    Ok(plugin)
}

/// The plugin serving `name` from `set` (a loaded GPU variant such as
/// `mlx-cuda` for `mlx`, see [`PluginSet::select`]), or why there is none.
pub fn find_plugin(set: &PluginSet, name: &str) -> Result<Arc<LoadedPlugin>, String> {
    set.select(name)
        .ok_or_else(|| missing_plugin_message(set, name))
}

/// Why `name` is not among the loaded plugins, in one line.
pub fn missing_plugin_message(set: &PluginSet, name: &str) -> String {
    if set.candidates.is_empty() {
        return format!(
            "no plugin named {name:?}: no plugin candidates were found (searched --plugin paths, {}, the executable's plugins/ directory, and $RLX_HOME/plugins or ~/.rlx/plugins)",
            rlx_plugin_loader::ENV_PLUGINS
        );
    }
    let found: Vec<String> = set
        .candidates
        .iter()
        .map(|c| match &c.state {
            CandidateState::Loaded(p) => format!(
                "{} (plugin {:?}): loaded",
                c.path.display(),
                p.descriptor().name
            ),
            CandidateState::Shadowed { plugin, by } => format!(
                "{} (plugin {:?}): shadowed by {}",
                c.path.display(),
                plugin.descriptor().name,
                by.display()
            ),
            CandidateState::Skipped(_) | CandidateState::Rejected(_) => {
                format!("{}: {}", c.path.display(), c.reason())
            }
        })
        .collect();
    // Reasons may carry line breaks (a loader message); keep one line.
    let found = found.join("; ").replace('\n', " ");
    format!("no plugin named {name:?} is loaded; found: {found}")
}

/// Warnings and errors to stderr, unless the program set a logger.
fn stderr_logger() {
    struct Stderr;
    impl log::Log for Stderr {
        fn enabled(&self, m: &log::Metadata) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record) {
            if self.enabled(r.metadata()) {
                eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
            }
        }
        fn flush(&self) {}
    }
    static LOGGER: Stderr = Stderr;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}
