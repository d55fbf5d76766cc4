//! Discovery plus loading: every candidate ends loaded, shadowed, skipped
//! or rejected with its reason. The first plugin of a name wins.

use super::discover::{discover, Candidate, DiscoveryConfig, Source};
use super::load::{load_plugin_with, LoadError};
use super::plugin::LoadedPlugin;
use super::trusted::TrustPolicy;
use rlx_plugin_api::DeviceKind;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// What became of one candidate.
#[derive(Clone)]
pub enum CandidateState {
    Loaded(Arc<LoadedPlugin>),
    /// A plugin with the same name was found earlier in discovery order.
    Shadowed {
        plugin: Arc<LoadedPlugin>,
        by: PathBuf,
    },
    /// Not a backend plugin, and rightly where it is: not loaded, and not
    /// an error (logged at debug level only).
    Skipped(SkipReason),
    Rejected(LoadError),
}

/// Why a candidate was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// A model plugin for rlx-runtime's model API, which shares the plugins
    /// directory with backend plugins (docs/ABI.md §15): recognised from
    /// its file, none of its code ran.
    ModelPlugin,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::ModelPlugin => write!(
                f,
                "a model plugin for rlx-runtime's model API (it exports `{}`), not a backend \
                 plugin; not loaded",
                super::model_plugins::MODEL_PLUGIN_SYMBOL
            ),
        }
    }
}

impl CandidateState {
    pub fn label(&self) -> &'static str {
        match self {
            CandidateState::Loaded(_) => "loaded",
            CandidateState::Shadowed { .. } => "shadowed",
            CandidateState::Skipped(_) => "skipped",
            CandidateState::Rejected(_) => "rejected",
        }
    }
}

/// One candidate and its fate.
#[derive(Clone)]
pub struct CandidateReport {
    pub path: PathBuf,
    pub source: Source,
    pub state: CandidateState,
}

impl CandidateReport {
    /// The plugin behind a loaded or shadowed candidate.
    pub fn plugin(&self) -> Option<&Arc<LoadedPlugin>> {
        match &self.state {
            CandidateState::Loaded(p) | CandidateState::Shadowed { plugin: p, .. } => Some(p),
            CandidateState::Skipped(_) | CandidateState::Rejected(_) => None,
        }
    }

    /// "loaded", "shadowed by PATH", "skipped: WHY" or "rejected: REASON".
    pub fn reason(&self) -> String {
        match &self.state {
            CandidateState::Loaded(_) => "loaded".into(),
            CandidateState::Shadowed { by, .. } => format!("shadowed by {}", by.display()),
            CandidateState::Skipped(why) => format!("skipped: {why}"),
            CandidateState::Rejected(e) => format!("rejected: {e}"),
        }
    }
}

/// The outcome of discovering and loading plugins.
#[derive(Clone, Default)]
pub struct PluginSet {
    pub candidates: Vec<CandidateReport>,
}

/// A library is loaded at most once per process (it is never unloaded):
/// loading the same canonical path again returns the first outcome.
/// A refusal for trust is not kept: nothing of the library ran, and the
/// file may be fixed, or allowed, by the next call.
fn load_cached(path: &Path, trust: TrustPolicy) -> Result<Arc<LoadedPlugin>, LoadError> {
    type Cache = HashMap<PathBuf, Result<Arc<LoadedPlugin>, LoadError>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = map.get(path) {
        return r.clone();
    }
    let r = load_plugin_with(path, trust).map(Arc::new);
    if !matches!(r, Err(LoadError::Untrusted { .. })) {
        map.insert(path.to_path_buf(), r.clone());
    }
    r
}

impl PluginSet {
    /// Discover with `cfg` and load every candidate.
    pub fn load(cfg: &DiscoveryConfig) -> PluginSet {
        Self::load_candidates_with(discover(cfg), cfg.trust)
    }

    /// Discover from the process environment plus `explicit` paths.
    pub fn load_from_env(explicit: Vec<PathBuf>) -> PluginSet {
        Self::load(&DiscoveryConfig::from_env(explicit))
    }

    /// Load `candidates` under the trust policy the environment sets.
    pub fn load_candidates(candidates: Vec<Candidate>) -> PluginSet {
        Self::load_candidates_with(candidates, TrustPolicy::from_env())
    }

    pub fn load_candidates_with(candidates: Vec<Candidate>, trust: TrustPolicy) -> PluginSet {
        let mut winners: HashMap<String, PathBuf> = HashMap::new();
        let mut out = Vec::new();
        for c in candidates {
            let state = if !c.exists {
                CandidateState::Rejected(LoadError::NotFound)
            } else {
                match load_cached(&c.path, trust) {
                    Err(LoadError::ModelPlugin) => CandidateState::Skipped(SkipReason::ModelPlugin),
                    Err(e) => CandidateState::Rejected(e),
                    Ok(p) => match winners.get(&p.descriptor().name) {
                        Some(by) => CandidateState::Shadowed {
                            plugin: p,
                            by: by.clone(),
                        },
                        None => {
                            winners.insert(p.descriptor().name.clone(), c.path.clone());
                            CandidateState::Loaded(p)
                        }
                    },
                }
            };
            match &state {
                CandidateState::Loaded(p) => log::info!(
                    "loaded plugin {} {} from {}",
                    p.descriptor().name,
                    p.descriptor().version,
                    c.path.display()
                ),
                // Informational: the returned report carries every outcome,
                // and the host program decides what to tell its user.
                CandidateState::Shadowed { by, .. } => {
                    log::info!(
                        "plugin {} is shadowed by {}",
                        c.path.display(),
                        by.display()
                    )
                }
                // Debug only: a model plugin in the shared directory is
                // expected, and a program's log should not mention it.
                CandidateState::Skipped(why) => {
                    log::debug!("{} skipped: {why}", c.path.display())
                }
                CandidateState::Rejected(e) => {
                    log::info!("plugin {} rejected: {e}", c.path.display())
                }
            }
            out.push(CandidateReport {
                path: c.path,
                source: c.source,
                state,
            });
        }
        PluginSet { candidates: out }
    }

    /// The loaded (winning) plugins, in discovery order.
    pub fn loaded(&self) -> impl Iterator<Item = &Arc<LoadedPlugin>> {
        self.candidates.iter().filter_map(|c| match &c.state {
            CandidateState::Loaded(p) => Some(p),
            _ => None,
        })
    }

    /// The loaded plugin called exactly `name`.
    pub fn get(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.loaded().find(|p| p.descriptor().name == name).cloned()
    }

    /// The plugin to use when a program asks for `name`: a loaded GPU
    /// variant of it (`name-<variant>`, e.g. `mlx-cuda` for `mlx`, that
    /// lists a GPU device) when there is one, else `name` itself. See
    /// [`pick_variant`] for the rule.
    pub fn select(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        let loaded: Vec<&Arc<LoadedPlugin>> = self.loaded().collect();
        let i = pick_variant(
            loaded.iter().map(|p| {
                let d = p.descriptor();
                (
                    d.name.as_str(),
                    d.device_infos.iter().any(|i| i.kind == DeviceKind::Gpu),
                )
            }),
            name,
        )?;
        Some(loaded[i].clone())
    }

    /// The report for the candidate at `path` (compared canonically).
    pub fn report_for(&self, path: &Path) -> Option<&CandidateReport> {
        let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        self.candidates.iter().find(|c| c.path == canon)
    }
}

/// Which of the loaded plugins (name, lists a GPU device), in discovery
/// order, serves a request for `name`:
/// 1. the first *GPU variant* of `name`: a plugin called `name-<anything>`
///    that lists a GPU device (a GPU build that finds no GPU refuses to
///    load, or lists only its CPU, and so is passed over);
/// 2. else the plugin called exactly `name`.
///
/// So one plugins directory can hold `mlx/` and `mlx-cuda/`: asking for
/// `mlx` runs on the GPU where there is one and on the CPU elsewhere, while
/// asking for `mlx-cuda` (or, where it loaded, `mlx` through
/// [`PluginSet::get`]) names one exactly.
pub fn pick_variant<'a>(
    loaded: impl Iterator<Item = (&'a str, bool)>,
    name: &str,
) -> Option<usize> {
    let mut exact = None;
    for (i, (n, has_gpu)) in loaded.enumerate() {
        let variant = n
            .strip_prefix(name)
            .is_some_and(|rest| rest.len() > 1 && rest.starts_with('-'));
        if variant && has_gpu {
            return Some(i);
        }
        if n == name && exact.is_none() {
            exact = Some(i);
        }
    }
    exact
}

#[cfg(test)]
mod tests {
    use super::pick_variant;

    fn pick(loaded: &[(&str, bool)], name: &str) -> Option<usize> {
        pick_variant(loaded.iter().copied(), name)
    }

    #[test]
    fn a_gpu_variant_serves_its_base_name() {
        let both = [("mlx", false), ("mlx-cuda", true)];
        assert_eq!(pick(&both, "mlx"), Some(1));
        assert_eq!(pick(&both, "mlx-cuda"), Some(1));
        // Discovery order does not matter.
        assert_eq!(pick(&[("mlx-cuda", true), ("mlx", false)], "mlx"), Some(0));
    }

    #[test]
    fn the_base_serves_when_no_variant_has_a_gpu() {
        assert_eq!(pick(&[("mlx", false), ("mlx-cuda", false)], "mlx"), Some(0));
        assert_eq!(pick(&[("mlx", false)], "mlx"), Some(0));
        assert_eq!(pick(&[("mlx-cuda", false)], "mlx"), None);
    }

    #[test]
    fn only_dash_variants_count() {
        // `mlxfoo` is another plugin, `mlx-` is not a variant name.
        assert_eq!(pick(&[("mlxfoo", true), ("mlx-", true)], "mlx"), None);
        assert_eq!(
            pick(&[("other-cuda", true), ("mlx", false)], "mlx"),
            Some(1)
        );
        // A GPU plugin under the base name itself is just the base.
        assert_eq!(pick(&[("mlx", true)], "mlx"), Some(0));
    }
}
