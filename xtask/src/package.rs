//! `cargo xtask package`: the release archives, one per plugin directory
//! the build trees hold, a `SHA256SUMS` for the set, and with `--sign KEY`
//! its minisign signature (`SHA256SUMS.minisig`). `cargo xtask keygen`
//! makes a key pair to sign with. The archive format is
//! `rlx-plugin-package`'s; this file finds the directories, names their
//! platforms and prepares a shipping copy of each (stripped libraries).

use crate::elf_names;
use rlx_plugin_package::{self as pkg, PackInput};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const USAGE: &str = "usage: cargo xtask package [--release | --profile-dir DIR] [--out DIR] \
[--only PLATFORM]... [--sign KEY.key] [--keep-arch SM]
       cargo xtask keygen [--dir DIR] [--name NAME]";

/// What the command line asked for.
struct Args {
    profile: PathBuf,
    /// Whether the profile was named by its directory (then only its own
    /// `plugins/` is packed, not the cross builds beside it).
    explicit_dir: bool,
    out: PathBuf,
    only: Vec<String>,
    sign: Option<PathBuf>,
    keep_arch: Option<String>,
}

/// One plugin directory to ship.
struct Found {
    dir: PathBuf,
    platform: String,
    /// The build tree's freshly linked library, copied in before packing
    /// (`None`: the directory's own copy is the one to ship).
    fresh_library: Option<PathBuf>,
}

pub fn package(args: &[String]) -> Result<String, String> {
    let a = parse(args)?;
    let found = find(&a)?;
    if found.is_empty() {
        return Err(format!(
            "no plugin directory to pack under {} (build first: `cargo build --release`; \
             `RLX_MLX_CUDA=1` for the CUDA one, scripts/build-linux-aarch64.sh, \
             scripts/build-macos-plugin.sh)",
            a.profile.display()
        ));
    }
    let mut archives = Vec::new();
    let mut report = Vec::new();
    for f in &found {
        let (archive, m) = pack_one(f, &a)?;
        report.push(format!(
            "{}  ({} {}, {}, MLX {} {}, {} files)",
            archive.display(),
            m.name,
            m.version,
            m.platform,
            m.mlx_version,
            m.mlx_backend,
            m.files.len()
        ));
        archives.push(archive);
    }
    let sums = pkg::write_sums(&a.out, &archives).map_err(|e| e.to_string())?;
    report.push(sums.display().to_string());
    if let Some(key) = &a.sign {
        let password = std::env::var("RLX_SIGN_PASSWORD").ok();
        let sig = pkg::sign_file(&sums, key, password.as_deref()).map_err(|e| e.to_string())?;
        report.push(sig.display().to_string());
    }
    Ok(report.join("\n"))
}

pub fn keygen(args: &[String]) -> Result<String, String> {
    let (mut dir, mut name) = (PathBuf::from("."), "rlx-release".to_string());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => dir = it.next().ok_or(USAGE)?.into(),
            "--name" => name = it.next().ok_or(USAGE)?.clone(),
            _ => return Err(USAGE.into()),
        }
    }
    let password = std::env::var("RLX_SIGN_PASSWORD").ok();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (secret, public) =
        pkg::generate_keypair(&dir, &name, password.as_deref()).map_err(|e| e.to_string())?;
    Ok(format!(
        "secret key {} ({}), public key {}: give users the .pub file",
        secret.display(),
        if password.is_some() {
            "encrypted with $RLX_SIGN_PASSWORD"
        } else {
            "not encrypted: keep it private"
        },
        public.display()
    ))
}

fn parse(args: &[String]) -> Result<Args, String> {
    let target = crate::target_dir();
    let mut a = Args {
        profile: target.join("release"),
        explicit_dir: false,
        out: target.join("dist"),
        only: Vec::new(),
        sign: None,
        keep_arch: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| USAGE.to_string());
        match arg.as_str() {
            "--release" => a.profile = target.join("release"),
            "--debug" => a.profile = target.join("debug"),
            "--profile-dir" => {
                a.profile = value()?.into();
                a.explicit_dir = true;
            }
            "--out" => a.out = value()?.into(),
            "--only" => a.only.push(value()?),
            "--sign" => a.sign = Some(value()?.into()),
            "--keep-arch" => {
                let sm = value()?;
                if sm.is_empty() || !sm.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!(
                        "--keep-arch takes a compute capability like 90, not {sm:?}"
                    ));
                }
                a.keep_arch = Some(sm);
            }
            _ => return Err(USAGE.into()),
        }
    }
    Ok(a)
}

/// The plugin directories of this profile (and of the cross builds of the
/// same profile name, unless the profile was named by its directory).
fn find(a: &Args) -> Result<Vec<Found>, String> {
    let host = pkg::host_platform().ok_or("cannot name this machine's platform")?;
    let lib = library_name(host);
    let mut candidates = vec![
        (
            a.profile.join("plugins/mlx"),
            host.to_string(),
            Some(a.profile.join(lib)),
        ),
        (
            a.profile.join("plugins/mlx-cuda"),
            format!("{host}-cuda13"),
            None,
        ),
    ];
    if !a.explicit_dir {
        let profile_name = a.profile.file_name().unwrap_or_default();
        let target = crate::target_dir();
        for (triple, dir, platform) in [
            ("aarch64-unknown-linux-gnu", "mlx", "linux-aarch64"),
            (
                "aarch64-unknown-linux-gnu",
                "mlx-cuda",
                "linux-aarch64-cuda13",
            ),
            ("aarch64-apple-darwin", "mlx", "macos-arm64"),
        ] {
            if pkg::base_platform(platform) != host {
                let dir = target
                    .join(triple)
                    .join(profile_name)
                    .join("plugins")
                    .join(dir);
                candidates.push((dir, platform.to_string(), None));
            }
        }
    }
    let mut found = Vec::new();
    for (dir, platform, fresh) in candidates {
        if !a.only.is_empty() && !a.only.contains(&platform) {
            continue;
        }
        if !dir.join("mlx/lib").is_dir() {
            continue;
        }
        found.push(Found {
            dir,
            fresh_library: fresh.filter(|f| f.is_file()),
            platform,
        });
    }
    for want in &a.only {
        if !found.iter().any(|f| &f.platform == want) {
            return Err(format!(
                "--only {want}: no such plugin directory under the build trees"
            ));
        }
    }
    Ok(found)
}

fn library_name(platform: &str) -> &'static str {
    if platform.starts_with("macos") {
        "librlx_mlx.dylib"
    } else {
        "librlx_mlx.so"
    }
}

/// Complete the directory, copy what ships into a staging directory
/// (stripped), read what it is from the library's embedded manifest, and
/// pack it.
fn pack_one(f: &Found, a: &Args) -> Result<(PathBuf, pkg::PackageManifest), String> {
    let name = f
        .dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("a plugin directory without a name")?
        .to_string();
    let lib = library_name(&f.platform);
    if name == "mlx-cuda" {
        // The CUDA directory's copy of the library asks for mlx-cu.so.
        let profile = f.dir.parent().and_then(Path::parent).ok_or("no profile")?;
        crate::cuda_plugin(profile)?;
    } else if let Some(fresh) = &f.fresh_library {
        copy_atomic(fresh, &f.dir.join(lib))?;
    }
    let library = f.dir.join(lib);
    let embedded = rlx_plugin_loader::read_manifest_file(&library)
        .map_err(|e| format!("{}: {e}", library.display()))?
        .ok_or_else(|| format!("{}: no embedded manifest", library.display()))?;
    check_architecture(&library, &f.platform)?;
    let mlx_version = embedded
        .other
        .iter()
        .find(|(k, _)| k == "mlx.version")
        .map(|(_, v)| v.clone())
        .ok_or_else(|| {
            format!(
                "{}: its manifest has no mlx.version (built before it had one: rebuild it)",
                library.display()
            )
        })?;
    let mlx_lib = f.dir.join("mlx/lib");
    let backend = if mlx_lib.join(elf_names::CUDA_LIBMLX).is_file() {
        "cuda"
    } else if mlx_lib.join("mlx.metallib").is_file() {
        "metal"
    } else {
        "cpu"
    };

    let stage = tempfile::Builder::new()
        .prefix("rlx-package-")
        .tempdir()
        .map_err(|e| format!("a staging directory: {e}"))?;
    let copy = stage.path().join(&name);
    copy_tree(&f.dir, &copy, &["nvidia"])?;
    strip_libraries(&copy, &f.platform, lib)?;
    if let Some(sm) = &a.keep_arch {
        if backend == "cuda" {
            keep_arch(&copy.join("mlx/lib").join(elf_names::CUDA_LIBMLX), sm)?;
        }
    }
    let input = PackInput {
        dir: copy,
        name,
        version: embedded.version.clone(),
        abi_version: embedded.abi_version.to_string(),
        platform: f.platform.clone(),
        mlx_version,
        mlx_backend: backend.into(),
        exclude: Vec::new(),
    };
    pkg::pack(&input, &a.out).map_err(|e| format!("packing {}: {e}", f.dir.display()))
}

/// The library must be built for the platform its archive is named for.
fn check_architecture(library: &Path, platform: &str) -> Result<(), String> {
    use object::{Architecture, BinaryFormat, Object};
    let data = std::fs::read(library).map_err(|e| format!("{}: {e}", library.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", library.display()))?;
    let is = match (file.format(), file.architecture()) {
        (BinaryFormat::Elf, Architecture::X86_64) => "linux-x86_64",
        (BinaryFormat::Elf, Architecture::Aarch64) => "linux-aarch64",
        (BinaryFormat::MachO, Architecture::Aarch64) => "macos-arm64",
        (f, arch) => return Err(format!("{}: a {f:?} {arch:?} library", library.display())),
    };
    pkg::platform_fits(platform, is).map_err(|e| format!("{}: {e}", library.display()))
}

/// `src` into `dst`, files and symlinks as they are, leaving out the
/// top-level entries named in `skip` and hidden files.
fn copy_tree(src: &Path, dst: &Path, skip: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(dst).map_err(|e| format!("{}: {e}", dst.display()))?;
    let mut entries: Vec<_> = std::fs::read_dir(src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let name_str = name.to_string_lossy();
        if skip.contains(&name_str.as_ref()) || name_str.starts_with('.') {
            continue;
        }
        let (from, to) = (e.path(), dst.join(&name));
        let ty = e
            .file_type()
            .map_err(|e| format!("{}: {e}", from.display()))?;
        if ty.is_symlink() {
            let target =
                std::fs::read_link(&from).map_err(|e| format!("{}: {e}", from.display()))?;
            std::os::unix::fs::symlink(&target, &to)
                .map_err(|e| format!("{}: {e}", to.display()))?;
        } else if ty.is_dir() {
            copy_tree(&from, &to, &[])?;
        } else {
            std::fs::copy(&from, &to).map_err(|e| format!("{}: {e}", from.display()))?;
        }
    }
    Ok(())
}

/// Debug info off the plugin library, and everything unneeded off libmlx
/// (146 MB to 119 MB for the CUDA one), with the platform's `strip`; where
/// there is none (a macOS directory packed on Linux) the files ship as
/// they are.
fn strip_libraries(dir: &Path, platform: &str, lib: &str) -> Result<(), String> {
    let strip = match pkg::base_platform(platform) {
        p if Some(p) == pkg::host_platform() => "strip",
        "linux-aarch64" => "aarch64-linux-gnu-strip",
        _ => return Ok(()),
    };
    if Command::new(strip).arg("--version").output().is_err() {
        eprintln!("xtask: no {strip}: packing {platform} unstripped");
        return Ok(());
    }
    let mut jobs = vec![(dir.join(lib), "--strip-debug")];
    if let Ok(rd) = std::fs::read_dir(dir.join("mlx/lib")) {
        for e in rd.filter_map(Result::ok) {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.contains(".so") && e.file_type().is_ok_and(|t| t.is_file()) {
                jobs.push((e.path(), "--strip-unneeded"));
            }
        }
    }
    for (file, how) in jobs {
        let status = Command::new(strip)
            .arg(how)
            .arg(&file)
            .status()
            .map_err(|e| format!("{strip}: {e}"))?;
        if !status.success() {
            return Err(format!("{strip} {how} {} failed", file.display()));
        }
    }
    Ok(())
}

/// Keep only compute capability `sm`'s GPU code in the CUDA libmlx, with
/// the tool `$CUDA_KEEP_ARCH_TOOL` names (a Python script taking IN OUT
/// SM): the result runs only on GPUs of that architecture, and compresses
/// about five times better.
fn keep_arch(libmlx: &Path, sm: &str) -> Result<(), String> {
    let tool = std::env::var_os("CUDA_KEEP_ARCH_TOOL")
        .ok_or("--keep-arch needs CUDA_KEEP_ARCH_TOOL, a Python script taking IN OUT SM")?;
    let out = libmlx.with_extension("sm");
    let status = Command::new("python3")
        .arg(&tool)
        .arg(libmlx)
        .arg(&out)
        .arg(sm)
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        return Err(format!("{} failed", Path::new(&tool).display()));
    }
    std::fs::rename(&out, libmlx).map_err(|e| format!("{}: {e}", libmlx.display()))
}

/// Copy through a temporary name and a rename: a loader never sees half a
/// file.
fn copy_atomic(from: &Path, to: &Path) -> Result<(), String> {
    let tmp = to.with_extension("tmp-copy");
    std::fs::copy(from, &tmp).map_err(|e| format!("{}: {e}", from.display()))?;
    std::fs::rename(&tmp, to).map_err(|e| format!("{}: {e}", to.display()))
}
