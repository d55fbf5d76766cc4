//! The RLX plugin conformance kit: every check of the plugin ABI
//! (`docs/ABI.md`, `plugin-api/include/rlx_plugin.h`) run against one
//! plugin library, each reported as ok, failed or skipped. It sees a
//! plugin only as a library through the loader: it must not depend on any
//! plugin's crates (the MLX plugin's included) or on the command line. `rlx-host
//! plugins check PATH` prints it; a plugin's own tests call it:
//!
//! ```no_run
//! // tests/conformance.rs of a plugin crate. Build the plugin first
//! // (`cargo build`; or list the plugin crate as a dev-dependency of the
//! // test crate, which makes `cargo test` build its cdylib).
//! #[test]
//! fn my_plugin_conforms() {
//!     // The library (or a plugin directory holding it).
//!     let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug/librlx_my_plugin.so");
//!     let r = rlx_plugin_conformance::check(path);
//!     // 0: every check ok or skipped. The text names each failure.
//!     assert_eq!(r.exit_code(), 0, "{}", r.text());
//!     // One check by name, when a test cares about it.
//!     let c = r.get("state: unknown state name").expect("the check ran");
//!     assert_ne!(c.outcome.label(), "fail");
//! }
//! # fn main() {}
//! ```
//!
//! The API: [`check`] and [`check_with`] (progress as each check
//! completes) give a [`Report`] of [`Check`]s, each with an [`Outcome`];
//! [`load`] loads a plugin as the kit does.
//!
//! Areas, one file each: `handshake` (loading, versions, sizes, the entry),
//! `tables` (descriptor, op list, lowering table), `eager` (every lowering
//! entry's `execute` on the single-op graphs of `cases`, against rlx-runtime's
//! CPU backend through `reference`), `exec` (compile / bind / run / destroy in
//! every mode), `errors` (documented status codes, null pointers), `status`
//! (status ownership), `custom` (the custom-op registry), `devices` (for a
//! plugin of minor 4 or later), and `abi19` (state, clones and shared params,
//! submitted runs, param ranges, RNG, active extents, memory figures, skipped
//! output slots; each part the plugin does not offer is one skipped "not
//! offered" check), `host_memory` (for a plugin of minor 11 or later: mapped
//! host memory's refusals and runs over it), and `graph_forms` (for a plugin of
//! minor 12 or later: a graph sent in a faster form than text runs as its text
//! does).
//!
//! Checks are independent: each runs inside `catch_unwind`, so a failing
//! or panicking check is recorded and the next one still runs. The kit
//! assumes nothing Rust-specific of the plugin (a C plugin has no
//! `rust_layout`) and nothing of its op coverage (an op it cannot generate
//! a graph for, or that has no eager entry, is skipped with the reason).
//! A plugin that crashes the process ends the run: [`check_with`] has
//! reported every check before the crashing one.

mod abi19;
mod cases;
mod custom;
mod devices;
mod eager;
mod errors;
mod exec;
mod graph_forms;
mod graphs;
mod handshake;
mod host_memory;
mod kit;
mod raw;
mod reference;
mod report;
mod status;
mod tables;

pub use report::{Check, Outcome, Report};

pub(crate) use kit::{code_name, expect_err, Kit};
pub(crate) use rlx_plugin_host::guard;

use rlx_plugin_loader::LoadedPlugin;
use std::path::Path;
use std::sync::Arc;

/// Run the whole kit on the plugin library (or plugin directory) `path`.
pub fn check(path: impl AsRef<Path>) -> Report {
    check_with(path, &mut |_| {})
}

/// [`check`], calling `on_check` as each check completes (so a caller can
/// print progress: should a plugin crash the process, the checks before
/// the crashing one have been shown).
pub fn check_with(path: impl AsRef<Path>, on_check: &mut dyn FnMut(&Check)) -> Report {
    let path = path.as_ref();
    let mut report = Report {
        path: path.to_path_buf(),
        plugin: None,
        loaded: false,
        checks: Vec::new(),
    };
    let (plugin, load) = match load(path) {
        Ok(p) => (Some(p), Outcome::Ok),
        Err(why) => (None, Outcome::Fail(guard::one_line(&why))),
    };
    let load = Check {
        name: "handshake: load".into(),
        outcome: load,
    };
    on_check(&load);
    report.checks.push(load);
    let Some(plugin) = plugin else {
        return report;
    };
    report.loaded = true;
    let d = plugin.descriptor();
    report.plugin = Some(format!("{} {}", d.name, d.version));
    let mut kit = Kit {
        plugin,
        checks: std::mem::take(&mut report.checks),
        on_check,
    };
    handshake::run(&mut kit);
    tables::run(&mut kit);
    eager::run(&mut kit);
    exec::run(&mut kit);
    errors::run(&mut kit);
    status::run(&mut kit);
    custom::run(&mut kit);
    devices::run(&mut kit);
    abi19::run(&mut kit);
    host_memory::run(&mut kit);
    graph_forms::run(&mut kit);
    report.checks = kit.checks;
    report
}

/// Load the plugin `path` names, a library or a plugin directory holding
/// one, through the host loader alone (no discovery, no other
/// candidates), or say why it does not load.
pub fn load(path: impl AsRef<Path>) -> Result<Arc<LoadedPlugin>, String> {
    use rlx_plugin_loader::{plugin_library, Candidate, PluginSet, Source};
    let path = &plugin_library(path.as_ref())?;
    let c = Candidate {
        path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
        source: Source::Explicit,
        exists: path.exists(),
    };
    let set = PluginSet::load_candidates(vec![c]);
    let report = &set.candidates[0];
    report
        .plugin()
        .cloned()
        .ok_or_else(|| format!("{}: {}", path.display(), report.reason()))
}
