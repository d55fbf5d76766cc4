//! Discovery plus loading: every candidate ends loaded, shadowed or
//! rejected with its reason. The first plugin of a name wins.

use super::discover::{discover, Candidate, DiscoveryConfig, Source};
use super::load::{load_plugin, LoadError};
use super::plugin::LoadedPlugin;
use std::collections::HashMap;
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
    Rejected(LoadError),
}

impl CandidateState {
    pub fn label(&self) -> &'static str {
        match self {
            CandidateState::Loaded(_) => "loaded",
            CandidateState::Shadowed { .. } => "shadowed",
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
            CandidateState::Rejected(_) => None,
        }
    }

    /// "loaded", "shadowed by PATH" or "rejected: REASON".
    pub fn reason(&self) -> String {
        match &self.state {
            CandidateState::Loaded(_) => "loaded".into(),
            CandidateState::Shadowed { by, .. } => format!("shadowed by {}", by.display()),
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
fn load_cached(path: &Path) -> Result<Arc<LoadedPlugin>, LoadError> {
    type Cache = HashMap<PathBuf, Result<Arc<LoadedPlugin>, LoadError>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    map.entry(path.to_path_buf())
        .or_insert_with(|| load_plugin(path).map(Arc::new))
        .clone()
}

impl PluginSet {
    /// Discover with `cfg` and load every candidate.
    pub fn load(cfg: &DiscoveryConfig) -> PluginSet {
        Self::load_candidates(discover(cfg))
    }

    /// Discover from the process environment plus `explicit` paths.
    pub fn load_from_env(explicit: Vec<PathBuf>) -> PluginSet {
        Self::load(&DiscoveryConfig::from_env(explicit))
    }

    pub fn load_candidates(candidates: Vec<Candidate>) -> PluginSet {
        let mut winners: HashMap<String, PathBuf> = HashMap::new();
        let mut out = Vec::new();
        for c in candidates {
            let state = if !c.exists {
                CandidateState::Rejected(LoadError::NotFound)
            } else {
                match load_cached(&c.path) {
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

    /// The loaded plugin called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.loaded().find(|p| p.descriptor().name == name).cloned()
    }

    /// The report for the candidate at `path` (compared canonically).
    pub fn report_for(&self, path: &Path) -> Option<&CandidateReport> {
        let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        self.candidates.iter().find(|c| c.path == canon)
    }
}
