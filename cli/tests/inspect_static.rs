//! `rlx-host plugins inspect --static PATH`: a plugin's embedded manifest,
//! read from the file. The `manifest_major` fixture aborts the process that
//! loads it, so a clean exit shows the command ran none of its code.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn inspect_static(path: &Path, json: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlx-host"));
    cmd.args(["plugins", "inspect", "--static"]).arg(path);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("rlx-host runs")
}

fn test_plugin(name: &str) -> PathBuf {
    common::built(name)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_mlx_plugin_directory() {
    let o = inspect_static(&common::mlx_plugin_dir(), false);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("plugin      mlx "), "{out}");
    let abi = rlx_plugin_api::ABI_VERSION.to_string();
    assert!(out.contains(&format!("abi         {abi} (")), "{out}");
    assert!(out.contains("the plugin was not loaded"), "{out}");
    assert!(
        out.contains("devices     cpu, gpu (") && out.contains("may differ"),
        "{out}"
    );
    assert!(
        out.contains("\n  MatMul\n") && out.contains("\n  RmsNorm\n"),
        "{out}"
    );

    let o = inspect_static(&common::mlx_plugin_dir(), true);
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["name"], "mlx");
    assert_eq!(v["abi_version"], abi.as_str());
    assert_eq!(v["compatible"], true);
    assert_eq!(v["loaded"], false);
    assert!(v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o == "Attention"));
}

#[test]
fn a_library_of_another_major_is_shown_not_loaded() {
    let lib = test_plugin("rlx_test_manifest_major");
    let o = inspect_static(&lib, false);
    let out = text(&o);
    // Loading it would have aborted the process (status 134, no output).
    assert!(o.status.success(), "{out}");
    let next = format!("{}.0.0", rlx_plugin_api::ABI_VERSION.major + 1);
    assert!(
        out.contains(&format!("abi         {next} (this host would not load it")),
        "{out}"
    );
    assert!(out.contains("plugin      manifest-major 0.0.1"), "{out}");
}

#[test]
fn a_library_without_a_manifest_is_an_error_that_says_so() {
    let o = inspect_static(&test_plugin("rlx_test_fixture"), false);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("no embedded manifest"), "{out}");
    assert!(out.contains("without --static"), "{out}");
}
