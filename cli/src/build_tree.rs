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

/// The plugin library `stem` (`rlx_mlx`, `rlx_test_fixture`) as cargo
/// built it last: `cargo build` puts it in `profile/`, and `cargo test`,
/// which builds it because the test crates list it as a dev-dependency,
/// leaves it in `profile/deps/`. The newer of the two is today's source.
pub fn built_library(profile: &Path, stem: &str) -> Result<PathBuf, String> {
    let file = rlx_plugin_loader::library_file_name(stem);
    let candidates = [profile.join(&file), profile.join("deps").join(&file)];
    candidates
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p.clone())
        .ok_or_else(|| {
            format!(
                "{file} is in neither {} nor {}: `cargo test --workspace` builds it",
                profile.display(),
                profile.join("deps").display()
            )
        })
}

/// `profile/plugins/mlx` with the built `librlx_mlx` ([`built_library`]) copied in, once per
/// process (a temp name and a rename, so a concurrent process never sees
/// a half-written library). An error says what to build.
pub fn mlx_plugin_dir(profile: &Path) -> Result<PathBuf, String> {
    static DONE: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    let dir = profile.join("plugins").join("mlx");
    let file = rlx_plugin_loader::library_file_name("rlx_mlx");
    let built = built_library(profile, "rlx_mlx")?;
    if !dir.join("mlx").exists() {
        return Err(format!(
            "{} is not laid out: the MLX plugin's build script makes it (`cargo test --workspace` runs it)",
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
