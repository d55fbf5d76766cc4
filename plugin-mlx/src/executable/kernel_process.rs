//! Compiled mode's kernels built in a process of their own: the plugin
//! directory's `rlx-mlx-kernel-builder` (its entry is
//! `crate::kernel_builder`).
//!
//! On a GPU a background thread cannot build them: MLX's CUDA backend
//! generates and compiles (NVRTC) a fused kernel inside the evaluation that
//! first needs it, and evaluation holds the plugin's GPU turn, so a
//! thread's build would hold the GPU from the lazy runs it is meant to let
//! through (and MLX 0.32.4 has no call that builds the kernels without
//! evaluating). Another process has a GPU turn of its own: it compiles the
//! same graph (in the form this process received it) with the same
//! options and evaluates its compiled function once on zeros, so that MLX
//! writes every kernel into its on-disk cache (`MLX_PTX_CACHE_DIR`, which this process set and the
//! child inherits). When the child has exited, this process's compiled
//! function finds the kernels there instead of compiling them in a run.
//!
//! The child only warms a cache: whatever it does, this process computes
//! its own values, and a child that fails (or builds kernels under other
//! names) leaves the first compiled run to build them, as without it.

use crate::graph_source::GraphSource;
use rlx_ir::{Graph, NodeId};
use rlx_plugin_api::{CompileOptions, DeviceInfo, DeviceKind};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The setting that chooses where compiled mode's kernels are built
/// (`warmup::Where`): named here, where the builder child is told it too.
pub(super) const ENV_BACKGROUND: &str = "RLX_MLX_BACKGROUND_COMPILE";

/// The builder's file name in a plugin directory, as plugin-mlx's build
/// script (`build/kernel_builder.rs`) names it there.
const BUILDER: &str = env!("RLX_MLX_KERNEL_BUILDER_FILE");

/// Setting naming the builder to run instead of the one beside the plugin
/// library.
const ENV_BUILDER: &str = "RLX_MLX_KERNEL_BUILDER";

/// The most bytes of inputs and params a child may allocate its zeros for:
/// on a GPU the child's memory comes out of the device this process uses,
/// and a large model's copy could make this process's next allocation
/// fail. A larger graph's first compiled run builds its kernels itself.
const MAX_LEAF_BYTES: u64 = 512 << 20;

/// The most bytes of graph a child is handed (and an executable keeps
/// until its second run hands it over): constants travel in it, and the
/// child would hold its own copy of them on the same device.
const MAX_GRAPH_BYTES: usize = 64 << 20;

/// The longest a child may take: NVRTC builds a large graph's kernels in
/// minutes, not hours.
const MAX_BUILD: Duration = Duration::from_secs(20 * 60);

/// What a child needs to build one graph's kernels.
pub(super) struct Spawn {
    /// The graph in the form the compile received it.
    graph: Vec<u8>,
    args: Vec<String>,
    builder: PathBuf,
    library: PathBuf,
}

impl Spawn {
    /// Err, saying why, where a child cannot stand in: no builder beside
    /// the plugin library, leaves too large, or kernels that would be
    /// built under other names (see `crate::contraction`).
    pub(super) fn prepare(
        graph: &Graph,
        leaves: &[NodeId],
        source: GraphSource,
        options: &CompileOptions,
        device: &DeviceInfo,
    ) -> Result<Spawn, String> {
        let bytes: u64 = leaves
            .iter()
            .map(|id| graph.shape(*id).size_bytes().map_or(u64::MAX, |b| b as u64))
            .fold(0, u64::saturating_add);
        if bytes > MAX_LEAF_BYTES {
            return Err(format!(
                "its {bytes} bytes of inputs and params are more than a kernel builder \
                 process may allocate ({MAX_LEAF_BYTES})"
            ));
        }
        let bytes = source.bytes();
        if bytes.len() > MAX_GRAPH_BYTES {
            return Err(format!(
                "its {} bytes of graph are more than a kernel builder process is \
                 handed ({MAX_GRAPH_BYTES})",
                bytes.len()
            ));
        }
        if device.kind == DeviceKind::Gpu && !crate::contraction::same_in_a_child() {
            return Err(
                "this process's own NVRTC is bound before the plugin's; a child's \
                        would not be"
                    .into(),
            );
        }
        let (builder, library) = locate()?;
        let kind = match device.kind {
            DeviceKind::Gpu => "gpu",
            _ => "cpu",
        };
        Ok(Spawn {
            graph: bytes.to_vec(),
            args: vec![
                kind.into(),
                device.ordinal.to_string(),
                options.rng_policy.to_string(),
                options.rng_seed.to_string(),
                source.form(),
            ],
            builder,
            library,
        })
    }

    /// Run the child to its end; Err says why it failed.
    pub(super) fn run(&self) -> Result<(), String> {
        let mut cmd = Command::new(&self.builder);
        cmd.arg(&self.library)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // The child builds in its one run, and must not start a child.
            .env(ENV_BACKGROUND, "0");
        // A setting the host may have set in its own process only, which
        // decides how kernels are generated: the child must see the same.
        let fmad = crate::contraction::ENV_ALLOW;
        match rlx_plugin_api::setting(fmad) {
            Some(v) => cmd.env(fmad, v),
            None => cmd.env_remove(fmad),
        };
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.builder.display()))?;
        // A child that exits before reading it all closes the pipe: its
        // exit status and message say why, not the write's error.
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&self.graph);
        }
        // Its messages, read while it runs (a full pipe would stop it).
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut msg = Vec::new();
                let _ = std::io::Read::read_to_end(&mut e, &mut msg);
                msg
            })
        });
        let deadline = Instant::now() + MAX_BUILD;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    // A child that hangs must not keep this process lazy
                    // for good: the compiled function takes over and
                    // builds what is missing itself.
                    let _ = child.kill();
                    let _ = child.wait();
                    break Err(format!(
                        "{} ran longer than {} s and was stopped",
                        self.builder.display(),
                        MAX_BUILD.as_secs()
                    ));
                }
                Err(e) => break Err(format!("waiting for {}: {e}", self.builder.display())),
            }
        };
        let msg = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        let status = status?;
        if status.success() {
            return Ok(());
        }
        let msg = String::from_utf8_lossy(&msg);
        let msg = msg.trim();
        let mut start = msg.len().saturating_sub(2000);
        while !msg.is_char_boundary(start) {
            start += 1;
        }
        let tail = &msg[start..];
        Err(format!(
            "{} exited with {status}: {tail}",
            self.builder.display()
        ))
    }
}

/// What the build info's `mlx.kernel_builder` says: the builder a
/// compiled executable starts, or why there is none.
pub(crate) fn describe() -> String {
    match locate() {
        Ok((builder, _)) => builder.display().to_string(),
        Err(why) => format!("none ({why}): compiled mode's first run on a GPU builds its kernels"),
    }
}

/// The builder and the plugin library this code was loaded from (the
/// child loads the same file), found once.
fn locate() -> Result<(PathBuf, PathBuf), String> {
    static FOUND: std::sync::OnceLock<Result<(PathBuf, PathBuf), String>> =
        std::sync::OnceLock::new();
    FOUND.get_or_init(find).clone()
}

fn find() -> Result<(PathBuf, PathBuf), String> {
    let library = own_library().ok_or("the plugin library's own path is unknown")?;
    let builder = match rlx_plugin_api::setting(ENV_BUILDER).filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => library
            .parent()
            .ok_or("the plugin library has no directory")?
            .join(BUILDER),
    };
    if !builder.is_file() {
        return Err(format!("no {} (set {ENV_BUILDER})", builder.display()));
    }
    Ok((builder, library))
}

/// The file of the loaded plugin library, as the loader names it.
fn own_library() -> Option<PathBuf> {
    let addr = own_library as fn() -> Option<PathBuf> as *const std::ffi::c_void;
    // SAFETY: dladdr fills `info` for an address inside a loaded object;
    // `dli_fname` is then a NUL-terminated path owned by the loader, copied
    // out at once.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(info.dli_fname);
        Some(PathBuf::from(
            std::ffi::OsStr::from_encoded_bytes_unchecked(name.to_bytes()),
        ))
    }
}
