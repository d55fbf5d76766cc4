//! Chores that follow `cargo build`, which cargo cannot do itself: a build
//! script runs before the library it belongs to is linked, so it cannot put
//! that library anywhere.
//!
//! `cargo xtask cuda-plugin [--release | --profile-dir DIR]` completes
//! `<profile>/plugins/mlx-cuda/` (laid out by `RLX_MLX_CUDA=1 cargo build`)
//! with a copy of `<profile>/librlx_mlx.so` that needs the directory's
//! renamed libmlx (`mlx-cu.so`) instead of `libmlx.so`; see
//! `build-support/elf_names.rs` for why.
//!
//! `cargo xtask package` makes the release archives (`package.rs`), and
//! `cargo xtask keygen` a key pair to sign them with.

#[path = "../../build-support/elf_names.rs"]
#[allow(dead_code)] // the reads are for the tests and the build
mod elf_names;
mod package;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask cuda-plugin [--release | --profile-dir DIR]
       cargo xtask package --help";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("cuda-plugin") => profile_dir(&args[1..]).and_then(|p| cuda_plugin(&p)),
        Some("package" | "keygen") if args.iter().any(|a| a == "-h" || a == "--help") => {
            println!("{}", package::USAGE);
            return ExitCode::SUCCESS;
        }
        Some("package") => package::package(&args[1..]),
        Some("keygen") => package::keygen(&args[1..]),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(msg) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::from(2)
        }
    }
}

/// The workspace's target directory (`CARGO_TARGET_DIR` is honoured).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            ws.canonicalize().unwrap_or(ws).join("target")
        })
}

/// `target/debug` unless told otherwise.
fn profile_dir(args: &[String]) -> Result<PathBuf, String> {
    let target = target_dir();
    match args {
        [] => Ok(target.join("debug")),
        [r] if r == "--release" => Ok(target.join("release")),
        [f, dir] if f == "--profile-dir" => Ok(PathBuf::from(dir)),
        _ => Err(USAGE.to_string()),
    }
}

fn cuda_plugin(profile: &Path) -> Result<String, String> {
    let lib = "librlx_mlx.so";
    let built = profile.join(lib);
    let dir = profile.join("plugins").join("mlx-cuda");
    if !built.is_file() {
        return Err(format!("no {}: build the workspace first", built.display()));
    }
    if !dir
        .join("mlx")
        .join("lib")
        .join(elf_names::CUDA_LIBMLX)
        .is_file()
    {
        return Err(format!(
            "no {}/mlx/lib/{}: lay the directory out with `RLX_MLX_CUDA=1 cargo build` first",
            dir.display(),
            elf_names::CUDA_LIBMLX
        ));
    }
    elf_names::copy_renamed(
        &built,
        &dir.join(lib),
        elf_names::Entry::Needed,
        elf_names::WHEEL_LIBMLX,
        elf_names::CUDA_LIBMLX,
    )?;
    Ok(format!(
        "copied {} into {} (needing {} for {})",
        built.display(),
        dir.display(),
        elf_names::CUDA_LIBMLX,
        elf_names::WHEEL_LIBMLX
    ))
}
