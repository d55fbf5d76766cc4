//! `rlx-host plugins doctor [PATH]`: why a plugin does or does not load.
//!
//! For each candidate discovery finds (or the one plugin PATH names) it
//! lists every shared library the dynamic loader would need, where each is
//! found and, for a missing one, every directory searched in the loader's
//! order (`rlx_plugin_loader::deps`; a Mach-O plugin's `LC_LOAD_DYLIB`
//! entries with dyld's rules, on any machine); then what loading it gave, the
//! devices a loaded plugin lists, its build info (MLX version, backend,
//! BLAS) and the state of its kernel caches, with a hint where one costs
//! speed or safety; a model plugin of rlx-runtime's is shown as skipped,
//! and a backend plugin directly in the directory rlx-runtime's
//! model-plugin loader reads gets a warning. Exit status: 0 when every candidate's
//! libraries resolve, 1 when one is missing or unusable, 2 when PATH names
//! no plugin.

mod json;
mod runtime;
mod shared_dir;
mod text;

use rlx_plugin_loader::deps::{self, DepWalk, MachoWalk, SearchEnv, SonameClash};
use rlx_plugin_loader::{
    discover, model_plugin_dir, plugin_library, Candidate, CandidateReport, CandidateState,
    DiscoveryConfig, PluginSet, Source,
};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The dependency walk follows glibc's loader over ELF files; elsewhere
/// only the load outcome is shown.
const ELF_PLATFORM: bool = cfg!(target_os = "linux");

/// Everything the doctor found about one candidate.
struct Finding {
    report: CandidateReport,
    walk: Option<DepWalk>,
    /// A Mach-O plugin's dependencies as dyld would resolve them on a Mac
    /// (read on any machine), or why they could not be read.
    macho: Option<Result<MachoWalk, String>>,
    clashes: Vec<SonameClash>,
    /// Its library lies directly in rlx-runtime's model plugin directory.
    shared_dir: Option<String>,
}

impl Finding {
    /// Do its libraries resolve? Without a walk, whether the loader found
    /// them.
    fn ok(&self) -> bool {
        if let Some(m) = &self.macho {
            return m.as_ref().is_ok_and(MachoWalk::complete);
        }
        match &self.walk {
            Some(w) => w.complete(),
            None => !matches!(
                &self.report.state,
                CandidateState::Rejected(
                    rlx_plugin_loader::LoadError::MissingDependency { .. }
                        | rlx_plugin_loader::LoadError::NotFound
                )
            ),
        }
    }
}

/// Run the doctor and exit with its status.
pub fn doctor(path: Option<&Path>, explicit: Vec<PathBuf>, as_json: bool) -> ! {
    let cfg = DiscoveryConfig::from_env(explicit);
    let model_dir = model_plugin_dir(&cfg);
    let candidates = match path {
        Some(p) => match one_candidate(p) {
            Ok(c) => vec![c],
            Err(e) => {
                eprintln!("rlx-host: error: {e}");
                std::process::exit(2);
            }
        },
        None => discover(&cfg),
    };
    let env = ELF_PLATFORM.then(SearchEnv::from_process);
    // A Mach-O plugin (macOS) is read with dyld's rules on any machine;
    // the ELF walk is for the others.
    let machos: Vec<Option<Result<MachoWalk, String>>> = candidates
        .iter()
        .map(|c| deps::is_macho(&c.path).then(|| deps::walk_macho(&c.path)))
        .collect();
    let walks: Vec<Option<DepWalk>> = candidates
        .iter()
        .zip(&machos)
        .map(|(c, m)| {
            if m.is_some() {
                return None;
            }
            env.as_ref().map(|e| deps::walk(&c.path, e))
        })
        .collect();
    let present: Vec<&DepWalk> = walks.iter().flatten().collect();
    let mut clashes = deps::soname_clashes(&present).into_iter();
    let set = PluginSet::load_candidates(candidates);
    let findings: Vec<Finding> = set
        .candidates
        .into_iter()
        .zip(walks.into_iter().zip(machos))
        .map(|(report, (walk, macho))| {
            let clashes = if walk.is_some() {
                clashes.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            // A skipped model plugin is rlx-runtime's to load: what its
            // libraries need is no backend plugin's problem.
            if matches!(report.state, CandidateState::Skipped(_)) {
                return Finding {
                    report,
                    walk: None,
                    macho: None,
                    clashes: Vec::new(),
                    shared_dir: None,
                };
            }
            Finding {
                shared_dir: shared_dir::warning(&report, model_dir.as_deref()),
                clashes,
                report,
                walk,
                macho,
            }
        })
        .collect();
    let ok = findings.iter().all(Finding::ok);
    if as_json {
        json::print(env.as_ref(), &findings, ok);
    } else {
        text::print(env.as_ref(), &findings, ok);
    }
    let _ = std::io::stdout().flush();
    std::process::exit(if ok { 0 } else { 1 });
}

/// The plugin PATH names, which must exist.
fn one_candidate(path: &Path) -> Result<Candidate, String> {
    let lib = plugin_library(path).or_else(|e| macos_library(path).ok_or(e))?;
    if !lib.exists() {
        return Err(format!("{}: no such file or directory", path.display()));
    }
    Ok(Candidate {
        path: lib.canonicalize().unwrap_or(lib),
        source: Source::Explicit,
        exists: true,
    })
}

/// The one `lib*.dylib` directly in `dir` or one level down: a macOS
/// plugin directory examined on another system (its libraries are read,
/// not loaded).
fn macos_library(dir: &Path) -> Option<PathBuf> {
    let is_lib = |p: &Path| {
        p.is_file()
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("lib") && n.ends_with(".dylib"))
    };
    let entries = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let top = entries(dir);
    let mut found: Vec<PathBuf> = top.iter().filter(|p| is_lib(p)).cloned().collect();
    if found.is_empty() {
        for sub in top.iter().filter(|p| p.is_dir()) {
            found.extend(entries(sub).into_iter().filter(|p| is_lib(p)));
        }
    }
    (found.len() == 1).then(|| found.remove(0))
}

fn devices(report: &CandidateReport) -> Vec<String> {
    let Some(p) = report.plugin() else {
        return Vec::new();
    };
    let d = p.descriptor();
    if d.device_infos.is_empty() {
        return d.devices.clone();
    }
    d.device_infos
        .iter()
        .map(|i| {
            let kind = i.kind.name();
            if i.name.is_empty() || i.name == kind {
                i.label()
            } else {
                format!("{} ({})", i.label(), i.name)
            }
        })
        .collect()
}

fn clash_text(c: &SonameClash) -> String {
    let mine = match &c.path {
        Some(p) => format!("its {} ", p.display()),
        None => String::new(),
    };
    format!(
        "{}: shares soname {} with {}: only one is loaded per process; loaded after it, \
         this plugin is bound to {} instead of {mine}(load a plugin directory on its own to \
         avoid this)",
        c.soname,
        c.soname,
        c.other_plugin.display(),
        c.other_path.display()
    )
}
