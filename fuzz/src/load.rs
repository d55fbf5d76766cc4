//! The MLX plugin every fuzz target drives, loaded once per process
//! through discovery from `RLX_FUZZ_MLX_DIR` (default: this checkout's
//! `target/debug/plugins/mlx`, with the freshly built library copied in
//! first, as the test helpers do, so a target never runs a stale plugin).

use rlx_plugin_loader::{DiscoveryConfig, LoadedPlugin, PluginSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

pub fn plugin() -> &'static Arc<LoadedPlugin> {
    static P: OnceLock<Arc<LoadedPlugin>> = OnceLock::new();
    P.get_or_init(|| {
        // libfuzzer-sys's panic hook aborts on any panic, caught or not;
        // the default hook (below, made quiet for on-purpose panics) lets
        // a target's catch_unwind work, and a panic that escapes a target
        // still aborts (it cannot unwind out of libFuzzer's C callback).
        let _ = std::panic::take_hook();
        let default = std::panic::take_hook();
        // The sequences target's kernels panic on purpose: keep quiet
        // about those, and only those.
        std::panic::set_hook(Box::new(move |info| {
            let quiet = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.ends_with("on purpose"));
            if !quiet {
                default(info);
            }
        }));
        // Set before the plugin reads them, on the fuzzer's one thread: a
        // 64 MiB cap on tensors, and While loops cut at 10,000 iterations
        // (the default million would take longer than the timeout).
        std::env::set_var("RLX_MLX_MEMORY_LIMIT", "64M");
        std::env::set_var("RLX_MLX_WHILE_LIMIT", "10000");
        let dir = match std::env::var_os("RLX_FUZZ_MLX_DIR") {
            Some(d) => PathBuf::from(d),
            None => build_tree_plugin(),
        };
        let set = PluginSet::load(&DiscoveryConfig {
            env_plugins: Some(dir.clone().into_os_string()),
            ..Default::default()
        });
        set.select("mlx")
            .unwrap_or_else(|| panic!("no mlx plugin loads from {}", dir.display()))
    })
}

fn build_tree_plugin() -> PathBuf {
    let profile = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug");
    let dir = profile.join("plugins/mlx");
    let built = profile.join("librlx_mlx.so");
    let tmp = dir.join(format!(".librlx_mlx.so.{}", std::process::id()));
    std::fs::copy(&built, &tmp)
        .and_then(|_| std::fs::rename(&tmp, dir.join("librlx_mlx.so")))
        .unwrap_or_else(|e| panic!("install {} into {}: {e}", built.display(), dir.display()));
    dir
}
