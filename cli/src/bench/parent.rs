//! The parent side of `rlx-host bench`: check the request, measure every
//! backend in a child process, compare, add the peers, print.

use super::args::BenchArgs;
use super::environment::EnvSnapshot;
use super::header::{Header, PluginInfo};
use super::row::{Row, Status};
use super::spec::{self, BackendSpec};
use super::{builtins, compare, peers, report, spawn};
use rlx_plugin_loader::PluginSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// A scratch directory for the children's outputs, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let dir = std::env::temp_dir().join(format!("rlx-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn main(args: &BenchArgs, plugins: Vec<PathBuf>, verbose: u8) -> Result<(), String> {
    // Before any plugin loads (see `environment`).
    let env = EnvSnapshot::capture();
    if args.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    // Everything a user can get wrong is checked before any child starts.
    let model = builtins::resolve(&args.model)?;
    let specs = spec::parse_list(args.backends.as_deref().unwrap_or(spec::DEFAULT_BACKENDS))?;
    let names = spec::plugin_names(&specs);
    let mut infos = Vec::new();
    if !names.is_empty() {
        let set = PluginSet::load_from_env(plugins.clone());
        for name in names {
            let p = crate::run::find_plugin(&set, name).map_err(|e| format!("--backends: {e}"))?;
            infos.push(PluginInfo::new(name, &p));
        }
    }
    let tolerance = compare::tolerance_for(&model.graph);
    let header = Header::new(args, &model, &env, infos, tolerance);

    let scratch = Scratch::new()?;
    let files: Vec<PathBuf> = (0..specs.len())
        .map(|i| scratch.0.join(format!("{i}.out")))
        .collect();
    // One at a time: children running side by side would time each other.
    let progress = std::io::stderr().is_terminal();
    let mut rows: Vec<Row> = Vec::new();
    for (s, file) in specs.iter().zip(&files) {
        if progress {
            eprintln!("measuring {} ...", s.label());
        }
        rows.push(spawn::measure(s, args, &env, &plugins, file, verbose));
    }
    let file_refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    compare::against_cpu(&mut rows, &file_refs, tolerance);
    if args.peers {
        if progress {
            eprintln!("measuring the Python peers ...");
        }
        rows.extend(peers::rows(args, &env, model.builtin));
    }
    compare::ratios(&mut rows);

    if args.json {
        println!("{}", report::to_json(&header, &rows));
    } else {
        report::print_text(&header, &rows);
    }
    verdict(&specs, &rows)
}

/// Non-zero exit when one of the requested backends failed or disagreed
/// with the CPU row (peers never fail the benchmark: they are context).
fn verdict(specs: &[BackendSpec], rows: &[Row]) -> Result<(), String> {
    let bad: Vec<&str> = rows
        .iter()
        .filter(|r| r.source == "rlx" && matches!(r.status, Status::Failed | Status::Mismatch))
        .map(|r| r.requested.as_str())
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} backends failed or disagree with the cpu row: {} (see the table)",
            bad.len(),
            specs.len(),
            bad.join(", ")
        ))
    }
}
