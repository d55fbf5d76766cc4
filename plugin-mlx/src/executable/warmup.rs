//! Compiled mode without a run that waits on a compiler.
//!
//! `mx::compile`'s first call builds the fused kernels it found (on the
//! CPU MLX writes C++ and runs the system compiler on it: seconds for a
//! training step; on a CUDA GPU NVRTC compiles them: tens of seconds), so a
//! compiled executable's first run used to wait for them. They are built
//! instead beside the runs, as V8 and HotSpot compile hot code beside the
//! interpreter: on the CPU on a background thread, from a compiled function
//! of its own called on zeros; on a CUDA GPU in a process of its own
//! (`kernel_process`), because MLX's CUDA backend takes one thread at a
//! time (the plugin's GPU turn) and a thread's build would hold the GPU
//! from the runs it is meant not to block. The build starts with the
//! second run (the first has the machine to itself, and a process of one
//! run builds nothing); until it is done, runs build the graph lazily (lazy
//! mode's evaluation, the same values), and the first run after that calls
//! the executable's own compiled function, whose trace (per thread in MLX)
//! finds every kernel already built (MLX keeps them per process, and on
//! disk across processes: the child's reach this process that way).
//!
//! Not for a graph that calls custom-op kernels (the host's code, which
//! must not run on zeros no caller gave it, and which a child process does
//! not have), nor on Metal (MLX keeps no Metal kernels on disk).
//! `RLX_MLX_BACKGROUND_COMPILE`, read once: `0` makes compiled mode's first
//! run build its kernels itself, as before; `process` builds them in a
//! child process on the CPU too.
//!
//! One thread builds, one graph after another (waiting on the child
//! process, for a GPU). A thread's build must not outlive the process's
//! MLX: an executable dropped while its build waits cancels it, and one
//! dropped while it runs waits for it (as its first compiled run would
//! have); a process that exits with a build running waits for it too (an
//! `atexit` handler registered after each build, so that it runs before
//! the destructors of what MLX set up for the builds). A child process
//! shares nothing with this one: nobody waits for it but the builder
//! thread.

use super::device::on_device;
use super::evaluate::zeros_like;
use super::hoist::Hoisting;
use super::kernel_process::{Spawn, ENV_BACKGROUND};
use super::{compile_graph, compiled_leaves, Compiled};
use crate::graph_source::GraphSource;
use rlx_ir::{Graph, NodeId};
use rlx_mlx_shim::{array, ArrayList};
use rlx_plugin_api::{CompileOptions, DeviceInfo, DeviceKind, PluginError, PluginResult};
use std::sync::{Arc, Condvar, Mutex};

/// Where kernels are built beside the runs (`RLX_MLX_BACKGROUND_COMPILE`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Where {
    /// `0`: nowhere; the first compiled run builds them.
    Off,
    /// Unset (or anything else): a thread on the CPU, a process on a GPU.
    Default,
    /// `process`: a process on every device.
    Process,
}

fn setting() -> Where {
    static ON: std::sync::OnceLock<Where> = std::sync::OnceLock::new();
    // The host's view of the setting: a program's in-process
    // `rlx_ir::env::set` reaches it as the environment does.
    *ON.get_or_init(|| {
        match rlx_plugin_api::setting(ENV_BACKGROUND)
            .as_deref()
            .map(str::trim)
        {
            Some("0") => Where::Off,
            Some(v) if v.eq_ignore_ascii_case("process") => Where::Process,
            _ => Where::Default,
        }
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Queued,
    Building,
    /// Built, or failed (the executable's own compiled call says why).
    Done,
    /// Dropped before it started.
    Cancelled,
}

/// A build's state, shared by the executable and the job.
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// Built in this process (a drop waits for it), not by a child.
    in_process: bool,
}

impl Shared {
    fn get(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn set(&self, s: State) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = s;
        self.changed.notify_all();
    }
}

/// A background build of a compiled executable's kernels.
pub(super) struct Warmup {
    shared: Arc<Shared>,
    /// Whether a run has used the compiled function yet (for the log).
    switched: bool,
    /// The build, until the second run hands it to the builder: the first
    /// run has the machine to itself (on two cores the compiler beside it
    /// made it 3x slower), and a process of one run builds nothing.
    pending: Option<Job>,
    /// Whether a run has asked (the build waits for the second).
    ran_once: bool,
}

impl Warmup {
    /// Queue the build of `graph`'s compiled function's kernels (`source`
    /// compiled with `options`, for a child process); None where that does
    /// not apply (Metal, custom-op kernels, or switched off: the debug log
    /// says why), and the first compiled run builds them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        graph: &Arc<Graph>,
        rng: rlx_ir::RngOptions,
        inputs: &[(String, NodeId)],
        params: &[(String, NodeId)],
        hoisting: Option<&Arc<Hoisting>>,
        device: &DeviceInfo,
        source: GraphSource,
        options: &CompileOptions,
    ) -> Option<Warmup> {
        let setting = setting();
        if setting == Where::Off {
            return None;
        }
        let leaves = compiled_leaves(inputs, params, hoisting.map(|h| &**h));
        let work = (move || {
            let gpu = device.kind == DeviceKind::Gpu;
            if gpu && crate::devices::build() != crate::devices::Build::Cuda {
                return Err("MLX keeps no Metal kernels on disk".to_string());
            }
            let custom =
                Arc::new(crate::custom::resolve::resolve(graph).map_err(|e| e.to_string())?);
            // The build calls the graph on zeros: a custom op's kernel (the
            // host's code) would run on data no caller gave it, beside the
            // caller's own runs (a kernel that counts its calls or waits on
            // the caller saw an extra one), and a child process has none.
            if custom.calls_kernels() {
                return Err("it calls custom-op kernels".into());
            }
            if gpu || setting == Where::Process {
                return Ok(Work::Process(Spawn::prepare(
                    graph, &leaves, source, options, device,
                )?));
            }
            let f = compile_graph(
                graph.clone(),
                rng,
                custom,
                inputs,
                params,
                Arc::default(),
                hoisting.cloned(),
            )
            .map_err(|e| e.to_string())?;
            Ok(Work::Thread { f, leaves })
        })();
        let work = match work {
            Ok(w) => w,
            Err(why) => {
                log::debug!(
                    "graph {:?}: compiled mode's first run builds its kernels: {why}",
                    graph.name
                );
                return None;
            }
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::Queued),
            changed: Condvar::new(),
            in_process: matches!(work, Work::Thread { .. }),
        });
        let job = Job {
            graph: graph.clone(),
            work,
            device: device.clone(),
            shared: shared.clone(),
        };
        Some(Warmup {
            shared,
            switched: false,
            pending: Some(job),
            ran_once: false,
        })
    }

    /// Whether runs may call the compiled function now (its kernels are
    /// built, or their build failed and the call will say why).
    pub(super) fn ready(&mut self, graph: &Graph) -> bool {
        // Settled: every later run is compiled, with no lock taken.
        if self.switched {
            return true;
        }
        if !self.ran_once {
            self.ran_once = true;
        } else if let Some(job) = self.pending.take() {
            if worker().send(job).is_err() {
                // No builder: the compiled call builds them itself.
                self.shared.set(State::Cancelled);
            }
        }
        let ready = self.is_ready();
        if ready && !self.switched {
            self.switched = true;
            log::debug!(
                "graph {:?}: runs switch from lazy evaluation to the compiled function",
                graph.name
            );
        }
        ready
    }

    /// [`Warmup::ready`] without the switch's log line.
    pub(super) fn is_ready(&self) -> bool {
        matches!(self.shared.get(), State::Done | State::Cancelled)
    }

    /// The same build, for a clone of the executable (its own compiled
    /// function finds the kernels once they are built).
    pub(super) fn share(&self) -> Warmup {
        Warmup {
            shared: self.shared.clone(),
            switched: false,
            pending: None,
            ran_once: false,
        }
    }
}

impl Drop for Warmup {
    /// Cancel a build that has not started; wait for one that has.
    fn drop(&mut self) {
        let mut s = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if *s == State::Queued {
            *s = State::Cancelled;
        }
        while self.shared.in_process && *s == State::Building {
            s = self
                .shared
                .changed
                .wait(s)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One background build.
struct Job {
    graph: Arc<Graph>,
    work: Work,
    device: DeviceInfo,
    shared: Arc<Shared>,
}

/// How it builds.
enum Work {
    /// Here: a compiled function of its own, called on zeros of `leaves`.
    Thread { f: Compiled, leaves: Vec<NodeId> },
    /// In a child process.
    Process(Spawn),
}

impl Job {
    fn run(self) {
        {
            let mut s = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if *s != State::Queued {
                return;
            }
            *s = State::Building;
        }
        let start = std::time::Instant::now();
        let (built, how) = match self.work {
            Work::Thread { f, leaves } => {
                let built = build_kernels(&self.graph, &f, &leaves, &self.device)
                    .map_err(|e| e.to_string());
                drop(f);
                at_exit::register();
                (built, "")
            }
            Work::Process(spawn) => (
                spawn.run(),
                " (in a process of their own, rlx-mlx-kernel-builder)",
            ),
        };
        match built {
            Ok(()) => log::debug!(
                "graph {:?}: compiled mode's kernels built in the background in {} ms{how}",
                self.graph.name,
                start.elapsed().as_millis()
            ),
            // The executable's own first compiled call meets the same
            // error (or builds what the child did not), and reports it.
            Err(e) => log::debug!(
                "graph {:?}: building compiled mode's kernels in the background failed{how}: {e}",
                self.graph.name
            ),
        }
        self.shared.set(State::Done);
    }
}

/// The one thread that builds kernels, one graph after another: MLX's CPU
/// code generation is not safe to run on many threads at once (dozens of
/// builds side by side crashed it), and a thread that never ends leaves
/// no thread-local MLX state to tear down while the process runs.
fn worker() -> &'static std::sync::mpsc::Sender<Job> {
    static TX: std::sync::OnceLock<std::sync::mpsc::Sender<Job>> = std::sync::OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("rlx-mlx-compile".into())
            .spawn(move || {
                for job in rx {
                    *at_exit::CURRENT.lock().unwrap_or_else(|e| e.into_inner()) =
                        job.shared.in_process.then(|| job.shared.clone());
                    job.run();
                    *at_exit::CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = None;
                }
            });
        if let Err(e) = spawned {
            log::warn!(
                "no thread to build compiled mode's kernels on ({e}): first runs build them"
            );
        }
        tx
    })
}

/// Call `f` on zeros of every leaf's shape and evaluate it: MLX builds
/// and keeps every fused kernel of the trace.
pub(super) fn build_kernels(
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

/// A process exiting while a build runs waits for it (up to a minute).
mod at_exit {
    use super::{Shared, State};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// The build running now.
    pub(super) static CURRENT: Mutex<Option<Arc<Shared>>> = Mutex::new(None);

    /// Register the handler (again): `atexit` handlers run last-registered
    /// first, so one registered after a build runs before the destructors
    /// of what MLX made for it.
    pub(super) fn register() {
        // SAFETY: registers a plain `extern "C" fn()`; the plugin library
        // is never unloaded (docs/ABI.md), so it stays valid.
        unsafe { libc::atexit(wait) };
    }

    extern "C" fn wait() {
        let current = CURRENT.lock().ok().and_then(|c| c.clone());
        if let Some(shared) = current {
            let s = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            let _ = shared
                .changed
                .wait_timeout_while(s, Duration::from_secs(60), |s| *s == State::Building);
        }
    }
}
