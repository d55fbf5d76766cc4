//! Compiled mode without a run that waits on a compiler.
//!
//! `mx::compile`'s first call builds the fused kernels it found (on the
//! CPU MLX writes C++ and runs the system compiler on it: seconds for a
//! training step), so a compiled executable's first run used to wait for
//! them. On the CPU the kernels are built instead on a background thread,
//! from a compiled function of its own called on zeros, as V8 and HotSpot
//! compile hot code beside the interpreter: until they are ready, runs
//! build the graph lazily (lazy mode's evaluation, the same values), and
//! the first run after that calls the executable's own compiled function,
//! whose trace (per thread in MLX) finds every kernel already built (MLX
//! keeps them per process, and on disk across processes).
//!
//! Not on a GPU: MLX's CUDA backend takes one thread at a time (the
//! plugin's GPU turn), so a background build would hold the GPU from the
//! runs it is meant not to block. `RLX_MLX_BACKGROUND_COMPILE=0`, read
//! once, makes compiled mode's first run build its kernels itself, as
//! before.
//!
//! A process that exits while a build runs waits for it (up to a minute,
//! an `atexit` handler registered at the first build, so it runs before
//! MLX's static destructors): the build is inside MLX, which those
//! destructors tear down.

use super::device::on_device;
use super::evaluate::zeros_like;
use super::hoist::Hoisting;
use super::{compile_graph, Compiled};
use crate::custom::CustomScope;
use rlx_ir::{Graph, NodeId};
use rlx_mlx_shim::{array, ArrayList};
use rlx_plugin_api::{DeviceInfo, DeviceKind, PluginError, PluginResult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RLX_MLX_BACKGROUND_COMPILE").map_or(true, |v| v != "0"))
}

/// A background build of a compiled executable's kernels.
pub(super) struct Warmup {
    ready: Arc<AtomicBool>,
    /// Whether a run has used the compiled function yet (for the log).
    switched: bool,
}

impl Warmup {
    /// Start building the kernels of `graph`'s compiled function on a
    /// background thread; None where that does not apply (a GPU, or
    /// switched off), and the first run builds them.
    pub(super) fn start(
        graph: &Arc<Graph>,
        rng: rlx_ir::RngOptions,
        inputs: &[(String, NodeId)],
        params: &[(String, NodeId)],
        hoisting: Option<&Arc<Hoisting>>,
        device: &DeviceInfo,
    ) -> Option<Warmup> {
        if !enabled() || device.kind == DeviceKind::Gpu {
            return None;
        }
        // Its own function and custom-op scope: a host kernel failing on
        // zeros here must not be reported by a run of the executable.
        let custom = Arc::new(CustomScope::resolve(graph).ok()?);
        let f = compile_graph(
            graph.clone(),
            rng,
            custom,
            inputs,
            params,
            Arc::default(),
            hoisting.cloned(),
        )
        .ok()?;
        let leaves: Vec<NodeId> = inputs
            .iter()
            .chain(params)
            .map(|(_, id)| *id)
            .chain(hoisting.map_or(&[][..], |h| &h.nodes[..]).iter().copied())
            .collect();
        let ready = Arc::new(AtomicBool::new(false));
        let done = ready.clone();
        let (graph, device) = (graph.clone(), device.clone());
        running::started();
        let spawned = std::thread::Builder::new()
            .name("rlx-mlx-compile".into())
            .spawn(move || {
                let start = std::time::Instant::now();
                match build_kernels(&graph, &f, &leaves, &device) {
                    Ok(()) => log::debug!(
                        "graph {:?}: compiled mode's kernels built in the background in {} ms",
                        graph.name,
                        start.elapsed().as_millis()
                    ),
                    // The executable's own first compiled call meets the
                    // same error, and reports it.
                    Err(e) => log::debug!(
                        "graph {:?}: building compiled mode's kernels in the background failed: {e}",
                        graph.name
                    ),
                }
                drop(f);
                done.store(true, Ordering::Release);
                running::finished();
            });
        match spawned {
            Ok(_) => Some(Warmup {
                ready,
                switched: false,
            }),
            Err(_) => {
                running::finished();
                None
            }
        }
    }

    /// Whether runs may call the compiled function now (its kernels are
    /// built, or their build failed and the call will say why).
    pub(super) fn ready(&mut self, graph: &Graph) -> bool {
        let ready = self.ready.load(Ordering::Acquire);
        if ready && !self.switched {
            self.switched = true;
            log::debug!(
                "graph {:?}: runs switch from lazy evaluation to the compiled function",
                graph.name
            );
        }
        ready
    }

    /// The same build, for a clone of the executable (its own compiled
    /// function finds the kernels once they are built).
    pub(super) fn share(&self) -> Warmup {
        Warmup {
            ready: self.ready.clone(),
            switched: false,
        }
    }

    /// [`Warmup::ready`] without the switch's log line.
    pub(super) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

/// Call `f` on zeros of every leaf's shape and evaluate it: MLX builds
/// and keeps every fused kernel of the trace.
fn build_kernels(
    graph: &Graph,
    f: &Compiled,
    leaves: &[NodeId],
    device: &DeviceInfo,
) -> PluginResult<()> {
    let _on = on_device(device)?;
    let zeros = leaves
        .iter()
        .map(|id| zeros_like(graph, *id))
        .collect::<PluginResult<Vec<_>>>()?;
    let args = ArrayList::from_arrays(zeros.iter().map(|z| &**z));
    let out = f
        .call(&args)
        .map_err(|e| PluginError::internal(e.to_string()))?;
    array::eval_list(&out).map_err(|e| PluginError::internal(e.to_string()))
}

/// The builds running now, and the exit handler that waits for them.
mod running {
    use std::sync::{Condvar, Mutex, Once};
    use std::time::Duration;

    static COUNT: Mutex<usize> = Mutex::new(0);
    static DONE: Condvar = Condvar::new();

    pub(super) fn started() {
        static AT_EXIT: Once = Once::new();
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain `extern "C" fn()`; the plugin
            // library is never unloaded (docs/ABI.md), so it stays valid.
            unsafe { libc::atexit(wait_at_exit) };
        });
        *COUNT.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    }

    pub(super) fn finished() {
        let mut n = COUNT.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        DONE.notify_all();
    }

    extern "C" fn wait_at_exit() {
        let n = COUNT.lock().unwrap_or_else(|e| e.into_inner());
        let _ = DONE.wait_timeout_while(n, Duration::from_secs(60), |n| *n > 0);
    }
}
