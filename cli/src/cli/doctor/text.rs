//! The doctor's text output: a block per candidate, one line per library,
//! and the directories searched under each missing one.

use super::{clash_text, devices, Finding};
use rlx_plugin_loader::deps::{self, DepWalk, Library, Outcome, Probe, ProbeResult, SearchEnv};
use rlx_plugin_loader::CandidateReport;
use std::path::{Path, PathBuf};

/// A file's name, for the short mentions in text output.
fn short(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// "loaded: mlx 0.1.0, ABI 1.4.0" and the like.
fn load_line(report: &CandidateReport) -> String {
    match report.plugin() {
        Some(p) => format!(
            "{}: {} {}, ABI {}",
            report.reason(),
            p.descriptor().name,
            p.descriptor().version,
            p.abi_version()
        ),
        None => report.reason(),
    }
}

fn probe_note(p: &Probe) -> String {
    match &p.result {
        ProbeResult::Absent if p.via == deps::Via::Cache => "no entry".into(),
        ProbeResult::Absent => String::new(),
        ProbeResult::Found => "found".into(),
        ProbeResult::WrongKind(e) | ProbeResult::Unreadable(e) | ProbeResult::Unusable(e) => {
            format!("{}: {e}", p.file.as_deref().map(short).unwrap_or_default())
        }
    }
}

/// Print the report for `findings`.
pub(super) fn print(env: Option<&SearchEnv>, findings: &[Finding], ok: bool) {
    let Some(env) = env else {
        println!(
            "the dependency walk reads ELF files and follows glibc's loader (Linux); \
             on this platform only the load outcome is shown"
        );
        for f in findings {
            println!("plugin {}  ({})", f.report.path.display(), f.report.source);
            println!("  load     {}", load_line(&f.report));
            if let Some(w) = &f.shared_dir {
                println!("  warning: {w}");
            }
        }
        return;
    };
    println!(
        "search: LD_LIBRARY_PATH {}; cache {} ({} entries); default dirs {} (from {})",
        env.ld_library_path
            .as_ref()
            .map_or("unset".into(), |v| format!("= {}", v.to_string_lossy())),
        env.cache.source,
        env.cache.len(),
        env.default_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        env.default_dirs_source,
    );
    if findings.is_empty() {
        println!(
            "no plugin candidates (searched --plugin paths, {}, the executable's plugins/ \
             directory, and $RLX_HOME/plugins or ~/.rlx/plugins)",
            rlx_plugin_loader::ENV_PLUGINS
        );
    }
    for f in findings {
        println!();
        println!("plugin {}  ({})", f.report.path.display(), f.report.source);
        println!("  load     {}", load_line(&f.report));
        let devs = devices(&f.report);
        if !devs.is_empty() {
            println!("  devices  {}", devs.join(", "));
        }
        for n in super::runtime::notes(&f.report) {
            println!("  {:<8} {}", n.kind, n.text);
            if let Some(h) = n.hint {
                println!("           hint: {h}");
            }
        }
        if let Some(w) = &f.walk {
            print_walk(w);
        }
        if let Some(m) = &f.macho {
            if cfg!(not(target_os = "macos")) {
                println!("  note     a macOS library: this system cannot load it; what a Mac needs is below");
            }
            print_macho(m);
        }
        for c in &f.clashes {
            println!("  warning: {}", clash_text(c));
        }
        if let Some(w) = &f.shared_dir {
            println!("  warning: {w}");
        }
    }
    println!();
    let bad: Vec<String> = findings
        .iter()
        .filter(|f| !f.ok())
        .map(|f| {
            let what = match (&f.walk, &f.macho) {
                (_, Some(Err(e))) => e.clone(),
                (_, Some(Ok(m))) => m
                    .unresolved()
                    .map(|d| format!("{} would not resolve on a Mac", d.name))
                    .collect::<Vec<_>>()
                    .join(", "),
                (w, None) => match w {
                    Some(w) if w.root_problem.is_some() => {
                        w.root_problem.clone().unwrap_or_default()
                    }
                    Some(w) => w
                        .unresolved()
                        .map(|l| {
                            let state = if matches!(l.outcome, Outcome::Missing) {
                                "missing"
                            } else {
                                "unusable"
                            };
                            format!("{} {state}", l.name)
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                    None => f.report.reason(),
                },
            };
            format!("{}: {what}", f.report.path.display())
        })
        .collect();
    if ok {
        println!(
            "summary: {} candidate(s), every library found",
            findings.len()
        );
    } else {
        println!(
            "summary: {} of {} candidate(s) cannot be loaded as they are:",
            bad.len(),
            findings.len()
        );
        for b in bad {
            println!("  {b}");
        }
    }
}

fn print_walk(w: &DepWalk) {
    if let Some(p) = &w.root_problem {
        println!("  problem  {p}");
        return;
    }
    let missing = w
        .unresolved()
        .filter(|l| matches!(l.outcome, Outcome::Missing))
        .count();
    let unusable = w.unresolved().count() - missing;
    let state = match (missing, unusable) {
        (0, 0) => "all found".to_string(),
        (m, 0) => format!("{m} missing"),
        (0, u) => format!("{u} unusable"),
        (m, u) => format!("{m} missing, {u} unusable"),
    };
    println!(
        "  needs    {} {}, {state}",
        w.libraries.len(),
        if w.libraries.len() == 1 {
            "library"
        } else {
            "libraries"
        },
    );
    let width = w
        .libraries
        .iter()
        .map(|l| l.name.len())
        .max()
        .unwrap_or(0)
        .min(40);
    for l in &w.libraries {
        print_library(l, width);
    }
}

fn print_library(l: &Library, width: usize) {
    let by = l.needed_by.first().map(|p| short(p)).unwrap_or_default();
    match &l.outcome {
        Outcome::Found { path, via, .. } => {
            let target = match symlink_target(path) {
                Some(real) => format!(" -> {}", real.display()),
                None => String::new(),
            };
            let aliases = if l.aliases.is_empty() {
                String::new()
            } else {
                format!("; also needed as {}", l.aliases.join(", "))
            };
            println!(
                "    {:<width$}  {}{target}  ({via}{aliases})",
                l.name,
                path.display()
            );
            // Files the loader skipped on the way (another class or
            // machine, unreadable) explain surprises.
            for p in l.tried.iter().filter(|p| {
                matches!(
                    p.result,
                    ProbeResult::WrongKind(_) | ProbeResult::Unreadable(_)
                )
            }) {
                println!("    {:<width$}    skipped {}", "", probe_note(p));
            }
        }
        Outcome::Missing => {
            println!(
                "    {:<width$}  MISSING (needed by {by}); looked in:",
                l.name
            );
            print_tried(&l.tried);
        }
        Outcome::Unusable { path, via, detail } => {
            println!(
                "    {:<width$}  UNUSABLE (needed by {by}): {} ({via}): {detail}; the loader stops \
                 here; looked in:",
                l.name,
                path.display()
            );
            print_tried(&l.tried);
        }
    }
}

/// Where a found library really is, when a symlink on the way says which
/// build is used: the file itself is a link (the BLAS a plugin directory
/// links to), or a `..` in an `$ORIGIN` path led through a linked directory
/// (a CUDA runtime elsewhere). System paths through a merged `/lib` are
/// left alone.
fn symlink_target(path: &Path) -> Option<PathBuf> {
    let real = path.canonicalize().ok()?;
    let through_dotdot = path
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    if path.is_symlink() {
        return Some(real);
    }
    if through_dotdot {
        let mut lexical = PathBuf::new();
        for c in path.components() {
            match c {
                std::path::Component::ParentDir => {
                    lexical.pop();
                }
                std::path::Component::CurDir => {}
                c => lexical.push(c),
            }
        }
        if lexical != real {
            return Some(real);
        }
    }
    None
}

fn print_tried(tried: &[Probe]) {
    let width = tried
        .iter()
        .map(|p| p.place.display().to_string().len())
        .max()
        .unwrap_or(0)
        .min(70);
    for p in tried {
        let note = probe_note(p);
        let note = if note.is_empty() {
            String::new()
        } else {
            format!(": {note}")
        };
        println!(
            "        {:<width$}  {}{note}",
            p.place.display().to_string(),
            p.via
        );
    }
}

/// A Mach-O plugin's libraries, one line each: where dyld would find it.
fn print_macho(m: &Result<deps::MachoWalk, String>) {
    let w = match m {
        Ok(w) => w,
        Err(e) => {
            println!("  dyld     cannot read the Mach-O file: {e}");
            return;
        }
    };
    println!("  dyld     Mach-O: its libraries as dyld would resolve them on a Mac");
    for d in &w.deps {
        let weak = if d.weak { " (weak)" } else { "" };
        let from = short(&d.image);
        match &d.outcome {
            deps::MachoOutcome::Found(p) => {
                println!(
                    "    {}{weak}  (from {from})  found: {}",
                    d.name,
                    p.display()
                )
            }
            deps::MachoOutcome::System => {
                println!("    {}{weak}  (from {from})  macOS system library", d.name)
            }
            deps::MachoOutcome::Missing(tried) => {
                println!(
                    "    {}{weak}  (from {from})  MISSING; dyld would look in:",
                    d.name
                );
                for t in tried {
                    println!("      {}", t.display());
                }
            }
            deps::MachoOutcome::Unresolvable(why) => {
                println!(
                    "    {}{weak}  (from {from})  WOULD NOT RESOLVE: {why}",
                    d.name
                )
            }
        }
    }
}
