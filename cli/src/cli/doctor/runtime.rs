//! What a loaded plugin says about how it will run (its build info: MLX
//! version, backend, BLAS, ...) and the state of the kernel caches an MLX
//! plugin's compiled mode uses, each with a hint when it will cost the user
//! speed or safety.

use rlx_plugin_api::trust::judge_kernel_cache;
use rlx_plugin_loader::CandidateReport;
use std::path::Path;

/// One line of the doctor's runtime section.
pub(super) struct Note {
    /// `build` (a build-info entry) or `cache`.
    pub kind: &'static str,
    pub text: String,
    pub hint: Option<String>,
}

/// The notes for a loaded plugin; none for one that did not load.
pub(super) fn notes(report: &CandidateReport) -> Vec<Note> {
    let Some(p) = report.plugin() else {
        return Vec::new();
    };
    let info = &p.descriptor().build_info;
    let mut out: Vec<Note> = info
        .iter()
        .map(|(k, v)| Note {
            kind: "build",
            text: format!("{k} = {v}"),
            hint: build_hint(k, v),
        })
        .collect();
    // Only MLX plugins have these caches: the CPU one, then on CUDA the PTX.
    let dirs = rlx_plugin_host::kernel_cache::mlx_cache_dirs(info);
    if let Some(cpu) = dirs.first() {
        out.push(cpu_cache(cpu));
    }
    if let Some(ptx) = dirs.get(1) {
        out.push(gpu_cache(ptx));
    }
    out
}

fn build_hint(key: &str, value: &str) -> Option<String> {
    match key {
        "blas" if !value.contains("(optimized)") => Some(
            "the bundled reference BLAS makes f32 matmul about 60x slower: install OpenBLAS \
             (Debian/Ubuntu: apt install libopenblas0-pthread) and the plugin uses it when it \
             next loads"
                .to_string(),
        ),
        "mlx.kernel_builder" if value.starts_with("none") => Some(
            "reinstall the plugin directory: its rlx-mlx-kernel-builder lets compiled mode \
             build a graph's GPU kernels while its first runs run lazily"
                .to_string(),
        ),
        _ => None,
    }
}

/// MLX's CPU kernel cache, judged as compiled mode will judge it
/// (plugin-mlx's kernel_cache.rs): a cache it refuses makes compiled mode
/// run lazily.
fn cpu_cache(dir: &Path) -> Note {
    let text = |state: &str| format!("CPU kernels {}: {state}", dir.display());
    if std::fs::symlink_metadata(dir).is_err() {
        return Note {
            kind: "cache",
            text: text("not made yet (compiled mode makes it, mode 0700, on its first compile)"),
            hint: None,
        };
    }
    let mlx = dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(dir)
        .to_path_buf();
    let verdict = judge_kernel_cache(dir);
    match verdict {
        Err(e) => Note {
            kind: "cache",
            text: text(&format!("refused: {e}")),
            hint: Some(format!(
                "compiled mode will not load kernels from it and runs lazily instead: remove \
                 {} or set TMPDIR to a directory of your own",
                mlx.display()
            )),
        },
        Ok(private) => Note {
            kind: "cache",
            text: text(&format!(
                "{}; {} (remove the directory to clear it)",
                if private {
                    "ok (yours, mode 0700)"
                } else {
                    "ok (yours; compiled mode tightens it to mode 0700)"
                },
                contents(dir)
            )),
            hint: None,
        },
    }
}

/// MLX's CUDA kernel cache (NVRTC output): a missing one only costs the
/// first compiled run its kernel compilation.
fn gpu_cache(dir: &Path) -> Note {
    let exists = dir.is_dir();
    Note {
        kind: "cache",
        text: format!(
            "GPU kernels {}: {}",
            dir.display(),
            if exists {
                format!(
                    "present; {} (remove the directory to clear it)",
                    contents(dir)
                )
            } else {
                "not made yet".into()
            }
        ),
        hint: (!exists).then(|| {
            "compiled mode compiles each graph's kernels with NVRTC (seconds; in the kernel \
             builder process while the first runs are lazy); set MLX_PTX_CACHE_DIR to a \
             lasting directory to keep them across reboots"
                .to_string()
        }),
    }
}

/// `N files, S MiB` under `dir` (what a kernel cache holds).
fn contents(dir: &Path) -> String {
    fn walk(dir: &Path, files: &mut u64, bytes: &mut u64) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path(), files, bytes),
                Ok(m) => {
                    *files += 1;
                    *bytes += m.len();
                }
                Err(_) => {}
            }
        }
    }
    let (mut files, mut bytes) = (0, 0);
    walk(dir, &mut files, &mut bytes);
    format!(
        "{files} file(s), {:.1} MiB",
        bytes as f64 / (1024.0 * 1024.0)
    )
}
