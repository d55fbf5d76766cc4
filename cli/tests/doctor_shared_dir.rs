//! `rlx-host plugins doctor` on `$RLX_HOME/plugins`, the directory backend
//! discovery shares with rlx-runtime's model-plugin loader (docs/ABI.md
//! §15): a backend plugin directly in it loads but gets a warning to move it
//! into a subdirectory, where the same plugin gets none; a model plugin
//! directly in it is skipped, not walked and no failure, even when a library
//! it needs is missing (that is rlx-runtime's loader's business).

#![cfg(target_os = "linux")]

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A model plugin as this side sees one: a library exporting
/// `rlx_model_plugin_v1` (never called: discovery only reads the symbol
/// table), and needing `libd20gone.so`, which is then removed.
fn model_plugin_stand_in(dir: &Path, scratch: &Path) -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = |out: &Path, src: &str, extra: &[&str]| {
        let c = scratch.join("src.c");
        std::fs::write(&c, src).unwrap();
        let st = Command::new(&cc)
            .args(["-shared", "-fPIC", "-o"])
            .arg(out)
            .arg(&c)
            .args(extra)
            .status()
            .expect("the C compiler runs");
        assert!(st.success(), "compiling {}", out.display());
    };
    let gone = scratch.join("libd20gone.so");
    build(&gone, "int d20gone(void) { return 1; }\n", &[]);
    let lib = dir.join("libd20model.so");
    let link = format!("-L{}", scratch.display());
    build(
        &lib,
        "int d20gone(void);\nconst void *rlx_model_plugin_v1(void) { return (void *)0; }\n\
         int d20use(void) { return d20gone(); }\n",
        &[&link, "-Wl,--no-as-needed", "-ld20gone"],
    );
    std::fs::remove_file(gone).unwrap();
    lib
}

fn doctor(home: &Path, json: bool) -> Output {
    let mut args = vec!["plugins", "doctor"];
    if json {
        args.push("--json");
    }
    Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .args(args)
        .env_remove("RLX_BACKEND_PLUGINS")
        .env_remove("LD_LIBRARY_PATH")
        .env("RLX_HOME", home)
        .env("HOME", home)
        .output()
        .expect("spawn rlx-host")
}

#[test]
fn a_backend_plugin_directly_in_the_shared_directory_is_warned_about_and_a_model_plugin_skipped() {
    let t = tempfile::tempdir().unwrap();
    let home = t.path().canonicalize().unwrap().join("home");
    let plugins = home.join("plugins");
    std::fs::create_dir_all(plugins.join("fixture")).unwrap();
    let scratch = t.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let flat = plugins.join("librlx_test_fixture.so");
    let below = plugins.join("fixture/librlx_test_fixture.so");
    std::fs::copy(common::fixture_path(), &flat).unwrap();
    std::fs::copy(common::fixture_path(), &below).unwrap();
    let model = model_plugin_stand_in(&plugins, &scratch);

    let o = doctor(&home, true);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let find = |p: &Path| {
        v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("{} not among {v:#}", p.display()))
            .clone()
    };

    let c = find(&flat);
    assert_eq!(c["load"]["state"], "loaded", "{c:#}");
    let w = c["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{c:#}");
    let w = w[0].as_str().unwrap();
    assert!(
        w.contains("rlx-runtime's model-plugin loader")
            && w.contains(&format!(
                "move it into a subdirectory ({}/fixture/librlx_test_fixture.so)",
                plugins.display()
            )),
        "{w}"
    );

    let c = find(&below);
    assert_eq!(c["load"]["state"], "shadowed", "{c:#}");
    assert_eq!(c["warnings"].as_array().unwrap().len(), 0, "{c:#}");

    let c = find(&model);
    assert_eq!(c["load"]["state"], "skipped", "{c:#}");
    assert_eq!(
        (&c["ok"], &c["walked"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    assert_eq!(c["warnings"].as_array().unwrap().len(), 0, "{c:#}");
    assert!(
        c["load"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("skipped: a model plugin for rlx-runtime's model API"),
        "{c:#}"
    );
    assert_eq!(v["ok"], true, "a skipped model plugin fails nothing: {v:#}");
    assert!(o.status.success());

    let o = doctor(&home, false);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("  warning: librlx_test_fixture.so lies directly in")
            && text.contains("  load     skipped: a model plugin"),
        "{text}"
    );
}
