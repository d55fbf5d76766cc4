//! `rlx-host plugins inspect --static PATH`: what a plugin library says
//! about itself in its embedded manifest (docs/ABI.md §19), read from the
//! file. Nothing of the plugin runs, so this works on a library that could
//! not be loaded here (another ABI major, a missing dependency, a GPU build
//! on a machine without the GPU).

use super::CliResult;
use rlx_plugin_api::manifest::EmbeddedManifest;
use rlx_plugin_api::version::{check_compatible, ABI_VERSION};
use rlx_plugin_loader::{plugin_library, read_manifest_file};
use serde_json::json;
use std::path::Path;

/// Said beside the devices: a manifest states what the build can drive,
/// a load asks the machine.
const DEVICES_NOTE: &str =
    "device kinds the build can drive; the devices a load finds here may differ";

pub fn inspect_static(path: &Path, as_json: bool) -> CliResult {
    let lib = plugin_library(path)?;
    let m = read_manifest_file(&lib)
        .map_err(|e| format!("{}: {e}", lib.display()))?
        .ok_or_else(|| {
            format!(
                "{}: no embedded manifest (the plugin was built without one, or the file is not \
                 a plugin); `rlx-host plugins inspect PATH` without --static loads it and asks it",
                lib.display()
            )
        })?;
    let compat = match check_compatible(ABI_VERSION, m.abi_version) {
        Ok(()) => format!("this host speaks {ABI_VERSION}: compatible"),
        Err(e) => format!("this host would not load it: {e}"),
    };
    if as_json {
        let v = json!({
            "path": lib.display().to_string(),
            "loaded": false,
            "manifest_format": m.format_version,
            "name": m.name,
            "version": m.version,
            "abi_version": m.abi_version.to_string(),
            "host_abi_version": ABI_VERSION.to_string(),
            "compatible": check_compatible(ABI_VERSION, m.abi_version).is_ok(),
            "devices": m.devices,
            "devices_note": DEVICES_NOTE,
            "ops": m.ops,
            "other": m.other.iter().map(|(k, v)| json!({ "key": k, "value": v })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
        return Ok(());
    }
    print_text(&lib, &m, &compat);
    Ok(())
}

fn print_text(lib: &Path, m: &EmbeddedManifest, compat: &str) {
    println!(
        "manifest    {} (format {}; read from the file, the plugin was not loaded)",
        lib.display(),
        m.format_version
    );
    println!("plugin      {} {}", m.name, m.version);
    println!("abi         {} ({compat})", m.abi_version);
    let devices = if m.devices.is_empty() {
        "(not listed)".to_string()
    } else {
        m.devices.join(", ")
    };
    println!("devices     {devices} ({DEVICES_NOTE})");
    for (k, v) in &m.other {
        println!("other       {k} = {v}");
    }
    if m.ops.is_empty() {
        println!("\nops: not listed in the manifest");
    } else {
        println!("\nops ({}):", m.ops.len());
        for op in &m.ops {
            println!("  {op}");
        }
    }
}
