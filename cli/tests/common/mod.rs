//! Shared by rlx-host's integration tests.
#![allow(dead_code)]

use rlx_plugin_loader::{DiscoveryConfig, LoadedPlugin, PluginSet};
use std::path::PathBuf;
use std::sync::Arc;

/// The cargo profile directory (`target/debug`): test binaries live in
/// `<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("profile directory")
        .to_path_buf()
}

/// The working test plugin (built by `cargo test`: see `built_library`).
pub fn fixture_path() -> PathBuf {
    rlx_host::build_tree::built_library(&profile_dir(), "rlx_test_fixture")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The fixture plugin, loaded with no other discovery.
pub fn fixture() -> Arc<LoadedPlugin> {
    let set = PluginSet::load(&DiscoveryConfig {
        explicit: vec![fixture_path()],
        ..Default::default()
    });
    set.get("fixture").unwrap_or_else(|| {
        panic!(
            "fixture plugin did not load: {}",
            set.candidates[0].reason()
        )
    })
}

/// The build tree's MLX plugin directory with the fresh library installed
/// (`rlx_host::build_tree`).
pub fn mlx_plugin_dir() -> PathBuf {
    rlx_host::build_tree::mlx_plugin_dir(&profile_dir()).unwrap_or_else(|e| panic!("{e}"))
}

/// A built plugin library by its file stem (`rlx_test_fixture`, `rlx_mlx`).
pub fn built(stem: &str) -> PathBuf {
    rlx_host::build_tree::built_library(&profile_dir(), stem).unwrap_or_else(|e| panic!("{e}"))
}

/// `rlx-host ARGS` with discovery limited to the build tree's MLX plugin
/// directory and `home` as `RLX_HOME`.
pub fn rlx_host_on_mlx(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .args(args)
        .env("RLX_BACKEND_PLUGINS", mlx_plugin_dir())
        .env("RLX_HOME", home)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("spawn rlx-host")
}
