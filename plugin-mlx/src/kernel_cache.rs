//! Compiled mode's kernel cache must be ours alone.
//!
//! MLX's CPU backend compiles each fused kernel of an `mx::compile`d
//! function into a shared library under
//! `std::filesystem::temp_directory_path() / "mlx" / version() / "cpu"`
//! and `dlopen`s it, reusing any library of the kernel's name already
//! there. `/tmp/mlx` is a name any user may create first: whoever owns
//! that directory can plant code that then runs inside our host. So before
//! a graph is compiled, the cache directory is made (mode 0700) where it
//! is missing and checked: every directory above it is the user's or
//! root's and writable by no one else (sticky `/tmp` is fine), `mlx/` and
//! `mlx/<version>/` are the user's own and writable by no one else, and
//! `cpu/` is the user's with mode 0700 (an own directory that only lacks
//! the tightening, as MLX itself makes it, is tightened to 0700). When any
//! of this fails, compiled mode runs the graph lazily instead, with a
//! warning that says why.

use rlx_plugin_api::trust::{check_path, judge_kernel_cache, kernel_cache_dir, Need};
use std::path::{Path, PathBuf};

/// MLX's CPU kernel cache directory for this process.
pub fn cpu_cache_dir() -> PathBuf {
    kernel_cache_dir(
        &rlx_plugin_api::machine::temp_dir(),
        rlx_mlx_shim::MLX_VERSION,
    )
}

/// Make and check the cache directory; `Err` says why compiled kernels
/// must not be loaded from it.
pub fn check() -> Result<PathBuf, String> {
    let cpu = cpu_cache_dir();
    if cfg!(not(unix)) {
        return Ok(cpu);
    }
    let ver = cpu.parent().expect("has parents").to_path_buf();
    let mlx = ver.parent().expect("has parents").to_path_buf();
    for dir in [&mlx, &ver, &cpu] {
        make_private(dir)?;
    }
    if !judge_kernel_cache(&cpu)? {
        // An own directory nobody else can write (MLX makes it 0755) is
        // only tightened; anything else was refused above.
        tighten(&cpu).map_err(|t| {
            let e = check_path(&cpu, Need::OwnedAndPrivate)
                .err()
                .unwrap_or_default();
            format!("{e}, and it cannot be made 0700: {t}")
        })?;
        check_path(&cpu, Need::OwnedAndPrivate)?;
    }
    Ok(cpu)
}

/// Create `dir` with mode 0700 when missing (its parent exists by now).
fn make_private(dir: &Path) -> Result<(), String> {
    if std::fs::symlink_metadata(dir).is_ok() {
        return Ok(());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => Ok(()),
            // Made by another thread or process meanwhile: checked next.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(format!("cannot make {}: {e}", dir.display())),
        }
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))
}

#[cfg(unix)]
fn tighten(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(not(unix))]
fn tighten(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}
