//! The MLX plugin directory of a cargo build tree, for examples and tests
//! run from a checkout: `target/<profile>/plugins/mlx`, laid out by the
//! plugin's build script, with the freshly built `librlx_mlx` installed
//! into it (the step `scripts/demo.sh` does for release builds).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The cargo profile directory of the running binary: `<profile>/deps/` for
/// test binaries, `<profile>/examples/` for examples, `<profile>/` itself
/// for binaries.
pub fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    match dir.file_name()?.to_str()? {
        "deps" | "examples" => dir.parent().map(Path::to_path_buf),
        _ => Some(dir.to_path_buf()),
    }
}

/// `profile/plugins/mlx` with `profile/librlx_mlx` copied in, once per
/// process (a temp name and a rename, so a concurrent process never sees
/// a half-written library). An error says what to build.
pub fn mlx_plugin_dir(profile: &Path) -> Result<PathBuf, String> {
    static DONE: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    let dir = profile.join("plugins").join("mlx");
    let file = rlx_plugin_api::host::library_file_name("rlx_mlx");
    let built = profile.join(&file);
    if !built.exists() || !dir.join("mlx").exists() {
        return Err(format!(
            "{} or {} is missing: run `cargo build --workspace` first",
            built.display(),
            dir.display()
        ));
    }
    let mut done = DONE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if !done.contains(&dir) {
        let tmp = dir.join(format!(".{file}.{}", std::process::id()));
        std::fs::copy(&built, &tmp)
            .and_then(|_| std::fs::rename(&tmp, dir.join(&file)))
            .map_err(|e| {
                format!(
                    "cannot install {} into {}: {e}",
                    built.display(),
                    dir.display()
                )
            })?;
        done.push(dir.clone());
    }
    Ok(dir)
}
