//! rlx-runtime's model-plugin loader in a process of its own (it loads
//! once per process, at the first model call): what a program using
//! rlx-runtime's model API does with `$RLX_HOME/plugins`.
//!
//! Prints one JSON object on stdout:
//! - `model_plugins`: whether this build's rlx-runtime can load plugins
//!   (its `model-plugins` feature);
//! - `providers`: the model providers after loading;
//! - `echo`: what `echo:test` generates for "ping" (the test model
//!   plugin's provider), or `error`: why it could not;
//! - `mapped`: the libraries under `$RLX_HOME` this process has mapped.
//!
//! rlx-runtime reports what it could not load on stderr, which the test
//! reads. Built twice from this one file: here, with the tests crate's
//! rlx-runtime (no `model-plugins`), and by tests/model-host with it.

use serde_json::{json, Value};
use std::path::PathBuf;

fn main() {
    let providers: Vec<Value> = rlx_runtime::model::providers()
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("name").cloned())
        .collect();
    let echo = rlx_runtime::model::open_source("echo:test", json!({}))
        .and_then(|mut m| m.generate_text("ping", &json!({})));
    let out = json!({
        "model_plugins": can_load_plugins(),
        "providers": providers,
        "echo": echo.as_ref().ok(),
        "error": echo.as_ref().err().map(|e| format!("{e:#}")),
        "mapped": mapped_under_home(),
    });
    println!("{out}");
}

/// Without `model-plugins`, rlx-runtime's `load_plugin` refuses every path
/// and says why; with it, a path that does not exist fails in the loader.
fn can_load_plugins() -> bool {
    match rlx_runtime::model::plugin::load_plugin("/nonexistent/librlx_no_such_plugin.so") {
        Ok(_) => true,
        Err(e) => !format!("{e:#}").contains("without the `model-plugins` feature"),
    }
}

/// The files mapped into this process from below `$RLX_HOME` (Linux's
/// `/proc/self/maps`; empty elsewhere).
fn mapped_under_home() -> Vec<String> {
    let Some(home) = std::env::var_os("RLX_HOME").map(PathBuf::from) else {
        return Vec::new();
    };
    let home = home.canonicalize().unwrap_or(home);
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut out: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with(&*home.to_string_lossy()))
        .map(String::from)
        .collect();
    out.dedup();
    out
}
