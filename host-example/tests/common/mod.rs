//! Shared by rlx-host's integration tests.
#![allow(dead_code)]

use rlx_plugin_api::host::{DiscoveryConfig, LoadedPlugin, PluginSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The cargo profile directory (`target/debug`): test binaries live in
/// `<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("profile directory")
        .to_path_buf()
}

/// The working test plugin, built by `cargo build --workspace`.
pub fn fixture_path() -> PathBuf {
    let p = profile_dir().join(rlx_plugin_api::host::library_file_name("rlx_test_fixture"));
    assert!(
        p.exists(),
        "{} is missing: the test plugins are built by `cargo build --workspace` (run the README's test command)",
        p.display()
    );
    p
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

/// The assembled MLX plugin directory in the build tree, with the freshly
/// built `librlx_mlx.so` copied in (as `scripts/demo.sh` does), once per
/// test binary: its tests run on threads of one process, which would share
/// a per-process temp name.
pub fn mlx_plugin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let profile = profile_dir();
        let dir = profile.join("plugins").join("mlx");
        let file = rlx_plugin_api::host::library_file_name("rlx_mlx");
        let built = profile.join(&file);
        assert!(
            built.exists() && dir.join("mlx").exists(),
            "{} or {} is missing: run `cargo build --workspace` first",
            built.display(),
            dir.display()
        );
        // A temp name and a rename, so a concurrent test binary never sees
        // a half-written library.
        let tmp = dir.join(format!(".{file}.{}", std::process::id()));
        std::fs::copy(&built, &tmp).expect("copy librlx_mlx into the plugin directory");
        std::fs::rename(&tmp, dir.join(&file)).expect("install librlx_mlx");
        dir
    })
    .clone()
}
