//! `rlx-host plugins`, `rlx-host plugins inspect PATH` and `rlx-host
//! plugins check PATH`.

use super::CliResult;
use crate::tables::{print_candidates, print_table};
use rlx_plugin_loader::{CandidateReport, CandidateState, LoadedPlugin, PluginSet};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn dtypes(d: &[rlx_plugin_api::DType]) -> String {
    d.iter().map(|d| d.name()).collect::<Vec<_>>().join(",")
}

fn candidate_json(c: &CandidateReport) -> Value {
    let p = c.plugin();
    json!({
        "path": c.path.display().to_string(),
        "source": c.source.to_string(),
        "state": c.state.label(),
        "reason": match &c.state {
            CandidateState::Loaded(_) => Value::Null,
            _ => Value::String(c.reason()),
        },
        "name": p.map(|p| p.descriptor().name.clone()),
        "version": p.map(|p| p.descriptor().version.clone()),
        "abi_version": p.map(|p| p.abi_version().to_string()),
    })
}

pub fn list(explicit: Vec<PathBuf>, as_json: bool) -> CliResult {
    let set = PluginSet::load_from_env(explicit);
    if as_json {
        let v =
            json!({ "candidates": set.candidates.iter().map(candidate_json).collect::<Vec<_>>() });
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
        return Ok(());
    }
    print_candidates(&set);
    Ok(())
}

/// Load the plugin `path` names: a library, or a plugin directory holding
/// one (no discovery), or fail with its reason. The conformance kit's
/// loader, so that `inspect` and `check` load a plugin the same way.
pub fn load_one(path: &Path) -> Result<std::sync::Arc<LoadedPlugin>, String> {
    rlx_plugin_conformance::load(path)
}

pub fn inspect(path: &Path, as_json: bool) -> CliResult {
    let p = load_one(path)?;
    let d = p.descriptor();
    let custom = p.list_custom_ops();
    if as_json {
        let v = json!({
            "path": p.path().display().to_string(),
            "abi_version": p.abi_version().to_string(),
            "descriptor": {
                "name": d.name, "version": d.version, "description": d.description,
                "devices": d.devices, "opsets": d.opsets,
                "build_info": d.build_info.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<serde_json::Map<_, _>>(),
            },
            "supported_ops": p.supported_ops().iter().map(|o| json!({
                "op_kind": o.op_kind, "dtypes": o.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "lowering_table": p.lowering_table().iter().map(|l| json!({
                "op_kind": l.op_kind, "dtypes": l.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>(),
                "strategy": l.strategy.name(), "eager": l.eager, "note": l.note,
            })).collect::<Vec<_>>(),
            "custom_ops": match &custom {
                Ok(ops) => Value::Array(ops.iter().map(|c| json!({
                    "name": c.name, "description": c.description, "n_inputs": c.n_inputs,
                    "n_outputs": c.n_outputs, "origin": c.origin.name(), "kind": c.kind.name(),
                    "shape_rule": c.shape_rule.to_string(),
                })).collect()),
                Err(_) => Value::Null,
            },
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
        return Ok(());
    }
    println!("plugin      {} {}", d.name, d.version);
    println!("path        {}", p.path().display());
    println!("abi         {}", p.abi_version());
    println!("description {}", d.description);
    println!("devices     {}", d.devices.join(", "));
    println!("opsets      {:?}", d.opsets);
    for (k, v) in &d.build_info {
        println!("build       {k} = {v}");
    }
    println!("\nsupported ops ({}):", p.supported_ops().len());
    for o in p.supported_ops() {
        println!("  {:<28} {}", o.op_kind, dtypes(&o.dtypes));
    }
    let table = p.lowering_table();
    println!("\nlowering table ({} entries):", table.len());
    let rows: Vec<[String; 5]> = table
        .iter()
        .map(|l| {
            [
                l.op_kind.clone(),
                l.strategy.name().into(),
                dtypes(&l.dtypes),
                if l.eager { "yes".into() } else { "no".into() },
                l.note.clone(),
            ]
        })
        .collect();
    print_table(&["OP", "STRATEGY", "DTYPES", "EAGER", "NOTE"], &rows);
    match custom {
        Ok(ops) => {
            println!("\ncustom ops ({}):", ops.len());
            let rows: Vec<[String; 5]> = ops
                .iter()
                .map(|c| {
                    [
                        c.name.clone(),
                        format!("{}/{}", c.origin.name(), c.kind.name()),
                        format!("{} -> {}", c.n_inputs, c.n_outputs),
                        c.shape_rule.to_string(),
                        c.description.clone(),
                    ]
                })
                .collect();
            print_table(
                &["NAME", "ORIGIN/KIND", "ARITY", "SHAPE", "DESCRIPTION"],
                &rows,
            );
        }
        Err(e) => println!("\ncustom ops: {}", e.message),
    }
    Ok(())
}

/// `plugins check PATH`: the conformance kit. Text output streams one line
/// per check as it completes; the exit status is the report's (0 ok, 1 a
/// check failed, 2 the plugin did not load).
pub fn check(path: &Path, as_json: bool) -> CliResult {
    use std::io::Write;
    let report = if as_json {
        let r = rlx_plugin_conformance::check(path);
        r.print(true);
        r
    } else {
        println!("checking {}", path.display());
        let r = rlx_plugin_conformance::check_with(path, &mut |c| println!("{}", c.line()));
        r.print_summary();
        r
    };
    let code = report.exit_code();
    if code != 0 {
        let _ = std::io::stdout().flush();
        std::process::exit(code);
    }
    Ok(())
}
