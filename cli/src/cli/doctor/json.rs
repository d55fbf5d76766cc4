//! The doctor's `--json` output: one object with the search setup and a
//! record per candidate, every place tried included.

use super::{clash_text, devices, Finding};
use rlx_plugin_loader::deps::{Library, MachoOutcome, Outcome, Probe, ProbeResult, SearchEnv};
use rlx_plugin_loader::CandidateState;
use serde_json::{json, Value};
use std::path::Path;

/// Print the report for `findings` as one object.
pub(super) fn print(env: Option<&SearchEnv>, findings: &[Finding], ok: bool) {
    let v = json!({
        "ok": ok,
        "search": env.map(search_json),
        "candidates": findings.iter().map(finding_json).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&v).unwrap());
}

fn search_json(env: &SearchEnv) -> Value {
    json!({
        "ld_library_path": env.ld_library_path.as_ref().map(|v| v.to_string_lossy().into_owned()),
        "cache": env.cache.source,
        "cache_entries": env.cache.len(),
        "default_dirs": env.default_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
        "default_dirs_source": env.default_dirs_source,
        "lib": env.lib,
        "platform": env.platform,
        "expect": env.expect.to_string(),
    })
}

fn path_json(p: &Path) -> Value {
    Value::String(p.display().to_string())
}

fn probe_json(p: &Probe) -> Value {
    let (result, detail) = match &p.result {
        ProbeResult::Absent => ("absent", None),
        ProbeResult::Found => ("found", None),
        ProbeResult::WrongKind(e) => ("wrong_kind", Some(e)),
        ProbeResult::Unreadable(e) => ("unreadable", Some(e)),
        ProbeResult::Unusable(e) => ("unusable", Some(e)),
    };
    json!({
        "place": path_json(&p.place),
        "file": p.file.as_deref().map(path_json),
        "via": p.via.key(),
        "via_object": p.via.object().map(path_json),
        "result": result,
        "detail": detail,
    })
}

fn library_json(l: &Library) -> Value {
    let (status, path, via, soname, detail) = match &l.outcome {
        Outcome::Found { path, via, soname } => {
            ("found", Some(path), Some(via), soname.clone(), None)
        }
        Outcome::Missing => ("missing", None, None, None, None),
        Outcome::Unusable { path, via, detail } => (
            "unusable",
            Some(path),
            Some(via),
            None,
            Some(detail.clone()),
        ),
    };
    json!({
        "name": l.name,
        "aliases": l.aliases,
        "status": status,
        "path": path.map(|p| path_json(p)),
        "real_path": path.and_then(|p| p.canonicalize().ok()).map(|p| path_json(&p)),
        "via": via.map(|v| v.key()),
        "via_object": via.and_then(|v| v.object()).map(path_json),
        "soname": soname,
        "detail": detail,
        "needed_by": l.needed_by.iter().map(|p| path_json(p)).collect::<Vec<_>>(),
        "tried": l.tried.iter().map(probe_json).collect::<Vec<_>>(),
    })
}

fn finding_json(f: &Finding) -> Value {
    let p = f.report.plugin();
    json!({
        "path": path_json(&f.report.path),
        "source": f.report.source.to_string(),
        "ok": f.ok(),
        "load": {
            "state": f.report.state.label(),
            "reason": match &f.report.state {
                CandidateState::Loaded(_) => Value::Null,
                _ => Value::String(f.report.reason()),
            },
            "name": p.map(|p| p.descriptor().name.clone()),
            "version": p.map(|p| p.descriptor().version.clone()),
            "abi_version": p.map(|p| p.abi_version().to_string()),
            "devices": devices(&f.report),
            "runtime": super::runtime::notes(&f.report).into_iter().map(|n| json!({
                "kind": n.kind,
                "text": n.text,
                "hint": n.hint,
            })).collect::<Vec<_>>(),
        },
        "walked": f.walk.is_some(),
        "problem": f.walk.as_ref().and_then(|w| w.root_problem.clone()),
        "libraries": f.walk.as_ref().map_or(Vec::new(), |w| w.libraries.iter().map(library_json).collect()),
        "missing": f.walk.as_ref().map_or(Vec::new(), |w| w.unresolved().map(|l| l.name.clone()).collect()),
        "macho": f.macho.as_ref().map(|m| match m {
            Ok(w) => json!({
                "libraries": w.deps.iter().map(|d| json!({
                    "name": d.name,
                    "image": d.image.display().to_string(),
                    "weak": d.weak,
                    "outcome": match &d.outcome {
                        MachoOutcome::Found(p) => json!({"found": p.display().to_string()}),
                        MachoOutcome::System => json!("system"),
                        MachoOutcome::Missing(t) => json!({"missing": t.iter().map(|p| p.display().to_string()).collect::<Vec<_>>()}),
                        MachoOutcome::Unresolvable(why) => json!({"unresolvable": why}),
                    },
                })).collect::<Vec<_>>(),
                "unresolved": w.unresolved().map(|d| d.name.clone()).collect::<Vec<_>>(),
            }),
            Err(e) => json!({"error": e}),
        }),
        "warnings": f.clashes.iter().map(clash_text).chain(f.shared_dir.clone()).collect::<Vec<_>>(),
    })
}
