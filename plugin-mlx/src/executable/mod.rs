//! A compiled graph: params bound by name, run many times with named
//! inputs, in one of three modes (lazy, eager, compiled).

use crate::dtype::{ir_to_abi, ir_to_mx};
use crate::graph_check::read_and_check;
use crate::graph_source::GraphSource;
use crate::graph_text::{leaves, shape_str};
use crate::lower::custom_scope::CustomScope;
use crate::lower::param_writes::ParamWrites;
use crate::lower::{static_dims, Eval, A};
use crate::trace::RunTrace;
use rlx_ir::{Graph, NodeId, OpKind};
use rlx_mlx_shim::{array, ArrayList, Compiled};
use rlx_plugin_api::tensor::Dims;
use rlx_plugin_api::{
    BoundParam, CompileOptions, DeviceInfo, Executable, Feed, HostTensor, Mode, OutputSlot,
    OwnedTensor, PluginError, PluginResult, Role, RowFeed, StateBuf, TensorRef, ValueInfo,
};
use std::collections::HashMap;
use std::sync::Arc;

/// A run's inputs by slot (`MlxExecutable::inputs` order), inline for up
/// to four.
type InputSlots = smallvec::SmallVec<[Option<A>; 4]>;

/// A run's graph, built and not yet evaluated.
struct Built {
    outs: Vec<A>,
    /// Values written back into params (a recurrent layer's carry).
    writes: Vec<(NodeId, A)>,
    /// What evaluates the run: its outputs, then its writes.
    list: rlx_mlx_shim::UniquePtr<ArrayList>,
}

mod device;
mod evaluate;
mod extent;
pub mod fusion;
mod hoist;
mod kernel_process;
pub(crate) use kernel_process::describe as kernel_builder_info;
mod plan;
mod sharing;
mod state;
mod state_entries;
mod submit;
mod warmup;

use device::spin_us;
pub use device::{on_device, OnDevice};
use evaluate::zeros_like;
pub use evaluate::{evaluate, Env, Observer};
use hoist::{Hoisted, Hoisting};
use plan::Plan;
use state::States;
use submit::Pending;
use warmup::Warmup;

/// Whether runs write their inputs into the last run's arrays (see
/// `MlxExecutable::kept_inputs`); `RLX_MLX_REUSE_INPUTS=0`, read once,
/// makes every run allocate its input arrays anew (to measure the
/// difference, or to rule the reuse out when chasing a problem).
fn reuse_inputs() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RLX_MLX_REUSE_INPUTS").map_or(true, |v| v != "0"))
}

/// MLX's message, with what it means for an rlx graph where MLX's wording
/// does not say: lowerings that must fail on data (a singular system, an
/// out-of-range ScatterAdd index) surface as a failed matrix inversion.
fn explain(graph: &Graph, e: impl std::fmt::Display) -> String {
    let msg = e.to_string();
    if !msg.contains("inversion failed") {
        return msg;
    }
    // The plugin's two data-dependent failures both surface as MLX's
    // triangular inversion (lower/index.rs, lower/solve.rs): name the
    // nodes that can raise it.
    let named = |kinds: &[OpKind]| -> Vec<String> {
        graph
            .nodes()
            .iter()
            .filter(|n| kinds.contains(&n.op.kind()))
            .map(|n| n.id.to_string())
            .collect()
    };
    let scatters = named(&[OpKind::ScatterAdd]);
    let solves = named(&[OpKind::DenseSolve, OpKind::BatchedDenseSolve]);
    let mut why = Vec::new();
    if !scatters.is_empty() {
        why.push(format!(
            "an index of ScatterAdd {} is past its output's extent along the scatter axis \
             (rlx-cpu asserts on it)",
            scatters.join(", ")
        ));
    }
    if !solves.is_empty() {
        why.push(format!(
            "the system of {} {} is singular (no unique solution)",
            if solves.len() == 1 { "solve" } else { "solves" },
            solves.join(", ")
        ));
    }
    if why.is_empty() {
        why.push("a singular matrix".into());
    }
    format!("{} (MLX reported: {msg})", why.join(", or "))
}

/// rlx's `RngOptions` from the ABI's compile options.
fn rng_options(o: &CompileOptions) -> PluginResult<rlx_ir::RngOptions> {
    use rlx_ir::RngBackend;
    use rlx_plugin_api::tables::rng_policy;
    let backend = match o.rng_policy {
        rng_policy::PHILOX => RngBackend::Philox,
        rng_policy::ORT => RngBackend::Ort,
        rng_policy::BNNS => RngBackend::Bnns,
        rng_policy::ZERO => RngBackend::Zero,
        other => {
            return Err(PluginError::unsupported(format!(
                "unknown RNG policy {other}"
            )))
        }
    };
    Ok(rlx_ir::RngOptions::new(o.rng_seed, backend))
}

pub struct MlxExecutable {
    graph: Arc<Graph>,
    mode: Mode,
    rng: rlx_ir::RngOptions,
    inputs: Vec<(String, NodeId)>,
    params: Vec<(String, NodeId)>,
    /// Bound params, in MLX's own buffers: MLX 0.32.4's allocators cannot
    /// adopt foreign memory, so each is copied once when bound and the
    /// host's tensor is not kept.
    bound: HashMap<NodeId, A>,
    /// The input arrays of the last run (by position in `inputs`), written
    /// over by the next run when MLX no longer holds them
    /// (`array_overwrite`): no allocation per run, and on a GPU the buffer
    /// stays where the last run's kernels read it instead of being a fresh
    /// allocation each time.
    kept_inputs: InputSlots,
    compiled: Option<Arc<Compiled>>,
    /// On the CPU, where the compiled function would fuse nothing, its
    /// evaluation recorded once and run in its place (see `plan`).
    plan: Option<Arc<Plan>>,
    /// The compiled call's argument list, kept so that a run does not
    /// allocate one; empty between runs, so that it holds no input a
    /// later run wants to write over.
    args: rlx_mlx_shim::UniquePtr<ArrayList>,
    /// Where it runs: its ops are built (and so run) on this device.
    device: DeviceInfo,
    /// Its custom ops, resolved at compile and kept.
    custom: Arc<CustomScope>,
    /// The params the compiled function's extra outputs write back (see
    /// [`ParamWrites`]), in output order; set when it is traced.
    compiled_writes: Arc<std::sync::Mutex<Vec<NodeId>>>,
    /// Inputs held across runs, and how they follow the runs.
    states: States,
    /// Runs submitted and not yet waited for, oldest first.
    pending: std::collections::VecDeque<Pending>,
    /// `(active, upper)`: the rows along axis 0 the next runs
    /// compute, where the graph allows it, and the graph narrowed for it.
    extent: Option<(usize, usize)>,
    narrowed: Vec<extent::Narrowed>,
    /// Its nodes that read params only, computed once per param value
    /// (see `hoist`), and their values for the params bound now.
    hoisting: Option<Arc<Hoisting>>,
    hoisted: Hoisted,
    /// Compiled mode on the CPU: the compiled function's kernels being
    /// built on a background thread; runs are lazy until they are ready
    /// (see `warmup`).
    warmup: Option<Warmup>,
}

// MLX arrays are refcounted graph nodes; the ABI guarantees one call at a
// time per executable.
unsafe impl Send for MlxExecutable {}

impl MlxExecutable {
    /// Compile `.rlxmodel` text.
    pub fn compile(text: &str, options: &CompileOptions) -> PluginResult<MlxExecutable> {
        Self::compile_source(GraphSource::Text(text), options)
    }

    /// Compile a graph in any form the plugin reads.
    pub fn compile_source(
        source: GraphSource,
        options: &CompileOptions,
    ) -> PluginResult<MlxExecutable> {
        let device = crate::devices::resolve(options.device)?.clone();
        let _on = on_device(&device)?;
        let mode = options.mode;
        let rng = rng_options(options)?;
        let mut graph = read_and_check(source)?;
        crate::lower::train_act::link_forward_scales(&mut graph)?;
        // Before any MLX array exists: a tensor that cannot fit is an
        // error here, not an abort later.
        crate::memory::check_graph(
            &graph,
            &crate::memory::limit_with(&device, options.memory_limit)?,
        )?;
        crate::bounds::check_graph(&graph)?;
        let graph = Arc::new(graph);
        let (inputs, params) = leaves(&graph);
        for list in [&inputs, &params] {
            let mut names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
            names.sort();
            if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
                return Err(PluginError::invalid_argument(format!(
                    "two graph leaves are named {:?}",
                    w[0]
                )));
            }
        }
        let custom = Arc::new(crate::custom::resolve::resolve(&graph)?);
        let compiled_writes: Arc<std::sync::Mutex<Vec<NodeId>>> = Arc::default();
        // Build the whole MLX graph once on zeros, without evaluating: every
        // op variant, attribute and shape is checked now, with the node named.
        let check = Env {
            rng,
            custom: &custom,
            how: Eval::Check,
            writes: &ParamWrites::default(),
            observe: None,
            fusion: None,
        };
        let zeros = std::cell::RefCell::new(Vec::new());
        let checked = evaluate(&graph, &check, &|id| {
            let z = zeros_like(&graph, id)?;
            zeros.borrow_mut().push(z.clone_handle());
            Ok(z)
        })?;
        let one_op = single_op(&graph, &checked, &zeros.into_inner());
        // MLX would load kernels from a cache another user can write.
        let unsafe_cache = match mode {
            Mode::Compiled => crate::kernel_cache::check().err(),
            _ => None,
        };
        let hoisting = Hoisting::plan(&graph).map(Arc::new);
        let compiled = match mode {
            // mx::compile traces without data, so a loop whose trip count
            // depends on values cannot be traced: such a graph runs lazily.
            Mode::Compiled if crate::lower::control::has_host_loop(&graph) => None,
            // Nothing to fuse: the op is built as lazy mode builds it.
            Mode::Compiled if one_op => None,
            Mode::Compiled if unsafe_cache.is_some() => {
                log::warn!(
                    "compiled mode runs graph {:?} lazily: MLX's kernel cache is not safe to \
                     load code from: {}",
                    graph.name,
                    unsafe_cache.as_deref().unwrap_or_default()
                );
                None
            }
            Mode::Compiled => Some(Arc::new(compile_graph(
                graph.clone(),
                rng,
                custom.clone(),
                &inputs,
                &params,
                compiled_writes.clone(),
                hoisting.clone(),
            )?)),
            _ => None,
        };
        let plan = compiled.as_ref().and_then(|c| {
            let leaves = compiled_leaves(&inputs, &params, hoisting.as_deref());
            Plan::record(&graph, rng, &custom, &leaves, hoisting.as_deref(), c).map(Arc::new)
        });
        // Where the compiled function fuses (no recorded plan), its
        // kernels are built beside the first runs, not in one.
        let warmup = match (&compiled, &plan) {
            (Some(_), None) => Warmup::start(
                &graph,
                rng,
                &inputs,
                &params,
                hoisting.as_ref(),
                &device,
                source,
                options,
            ),
            _ => None,
        };
        log::debug!(
            "compiled graph {:?}: {} nodes, {} inputs, {} params, {} mode",
            graph.name,
            graph.len(),
            inputs.len(),
            params.len(),
            mode.name()
        );
        Ok(MlxExecutable {
            graph,
            mode,
            rng,
            inputs,
            params,
            bound: HashMap::new(),
            kept_inputs: InputSlots::new(),
            compiled,
            plan,
            args: rlx_mlx_shim::array::new_array_list(),
            device,
            custom,
            compiled_writes,
            states: States::default(),
            pending: Default::default(),
            extent: None,
            narrowed: Vec::new(),
            hoisting,
            hoisted: Hoisted::default(),
            warmup,
        })
    }

    /// Build its compiled function's kernels by calling the function once
    /// on zeros, here and now: the kernel builder process's work
    /// (`crate::kernel_builder`). Nothing to do outside compiled mode.
    pub fn build_kernels(&self) -> PluginResult<()> {
        let Some(f) = &self.compiled else {
            return Ok(());
        };
        let leaves = compiled_leaves(&self.inputs, &self.params, self.hoisting.as_deref());
        warmup::build_kernels(&self.graph, f, &leaves, &self.device)
    }

    fn value_info(&self, role: Role, name: String, id: NodeId) -> ValueInfo {
        let s = self.graph.shape(id);
        ValueInfo {
            role,
            name,
            dtype: ir_to_abi(s.dtype()).expect("checked"),
            shape: static_dims(s.dims())
                .iter()
                .map(|d| Some(*d as usize))
                .collect(),
        }
    }

    /// A host tensor must have the leaf's dtype and shape: checked before
    /// anything is copied (a broadcast view may claim any size).
    fn check_leaf(
        &self,
        what: &str,
        name: &str,
        id: NodeId,
        dtype: rlx_plugin_api::DType,
        shape: &[usize],
    ) -> PluginResult<()> {
        let (want_dt, want) = self.declared_layout(id);
        if dtype != want_dt || shape != want.as_slice() {
            return Err(PluginError::invalid_argument(format!(
                "{what} {name:?} is {}, got {dtype}{shape:?}",
                shape_str(&self.graph, id)
            )));
        }
        Ok(())
    }

    /// Bind param `name` to a copy of `bytes` in an MLX array.
    fn bind_bytes(
        &mut self,
        name: &str,
        dtype: rlx_plugin_api::DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> PluginResult<()> {
        // The array is allocated by the device's allocator (the GPU lock
        // covers it, see GpuTurn).
        let _on = on_device(&self.device)?;
        let id = leaf_named(&self.params, name).ok_or_else(|| {
            PluginError::not_found(format!(
                "the graph has no param named {name:?} (params: {})",
                self.params
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let arr = self.leaf_array("param", name, id, dtype, shape, bytes)?;
        self.bound.insert(id, arr);
        Ok(())
    }

    /// Where the last run's input `name` lives (the address of its first
    /// element), for tests and diagnostics of buffer reuse; None before a
    /// run.
    pub fn input_buffer_address(&self, name: &str) -> Option<usize> {
        let slot = self.input_slot(name)?;
        array::array_data_ptr(self.kept_inputs.get(slot)?.as_ref()?).ok()
    }

    /// The position of the input called `name` in `inputs` (and so in a
    /// run's input slots and `kept_inputs`).
    fn input_slot(&self, name: &str) -> Option<usize> {
        self.inputs.iter().position(|(n, _)| n == name)
    }

    /// Check a host tensor against a leaf and make an MLX array of it.
    fn leaf_array(
        &self,
        what: &str,
        name: &str,
        id: NodeId,
        dtype: rlx_plugin_api::DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> PluginResult<A> {
        self.check_leaf(what, name, id, dtype, shape)?;
        self.new_leaf(what, name, id, shape, bytes)
    }

    /// An MLX array of a host tensor already checked against leaf `id`.
    fn new_leaf(
        &self,
        what: &str,
        name: &str,
        id: NodeId,
        shape: &[usize],
        bytes: &[u8],
    ) -> PluginResult<A> {
        let dims: Dims<i32> = shape.iter().map(|d| *d as i32).collect();
        let dtype = ir_to_mx(self.graph.shape(id).dtype()).expect("checked");
        array::array_from_bytes(bytes, &dims, dtype)
            .map_err(|e| PluginError::internal(format!("{what} {name:?}: {e}")))
    }
}

/// The node of the input or param called `name` in `leaves`.
/// A declared layout (`declared_layout`) as errors print it: `f32[2, 3]`.
fn layout_text((dtype, dims): &(rlx_plugin_api::DType, Dims<usize>)) -> String {
    format!("{dtype}{:?}", dims.as_slice())
}

fn leaf_named(leaves: &[(String, NodeId)], name: &str) -> Option<NodeId> {
    leaves.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
}

/// The compiled function's arguments, in order: the inputs, the params,
/// then the hoisted values (see `hoist`). Its trace, a recorded plan, and
/// a build of its kernels on zeros all call it with these.
fn compiled_leaves(
    inputs: &[(String, NodeId)],
    params: &[(String, NodeId)],
    hoisting: Option<&Hoisting>,
) -> Vec<NodeId> {
    inputs
        .iter()
        .chain(params)
        .map(|(_, id)| *id)
        .chain(hoisting.map_or(&[][..], |h| &h.nodes[..]).iter().copied())
        .collect()
}

/// `mx::compile` over the graph: inputs, then params, are the compiled
/// function's arguments, so rebinding a param needs no recompilation.
fn compile_graph(
    graph: Arc<Graph>,
    rng: rlx_ir::RngOptions,
    custom: Arc<CustomScope>,
    inputs: &[(String, NodeId)],
    params: &[(String, NodeId)],
    write_ids: Arc<std::sync::Mutex<Vec<NodeId>>>,
    hoisting: Option<Arc<Hoisting>>,
) -> PluginResult<Compiled> {
    let slot: HashMap<NodeId, usize> = compiled_leaves(inputs, params, hoisting.as_deref())
        .into_iter()
        .enumerate()
        .map(|(i, id)| (id, i))
        .collect();
    // The elementwise regions MLX's fuser would split, fused whole.
    let regions = fusion::Fusion::plan(&graph, &|id| {
        hoisting.as_ref().is_none_or(|h| h.built_in_run(id))
    });
    rlx_mlx_shim::compile(move |args: &ArrayList| {
        let leaf = |id: NodeId| -> PluginResult<A> {
            args.get(slot[&id])
                .map_err(|e| PluginError::internal(e.to_string()))
        };
        let writes = ParamWrites::default();
        let env = Env {
            fusion: regions.as_ref(),
            ..Env::lazy(rng, &custom, &writes)
        };
        let outs =
            hoist::evaluate_run(hoisting.as_deref(), &graph, &env, &leaf).map_err(|e| e.message)?;
        // State written back rides along as extra outputs.
        let w = writes.take_for(&graph);
        *write_ids.lock().unwrap_or_else(|e| e.into_inner()) =
            w.iter().map(|(id, _)| *id).collect();
        Ok(ArrayList::from_arrays(
            outs.iter().map(|a| &**a).chain(w.iter().map(|(_, v)| &**v)),
        ))
    })
    .map_err(|e| PluginError::internal(e.to_string()))
}

/// Whether `graph` is one MLX op that computes, as its check build made it
/// (`outs` from the leaves `zeros`; views such as a broadcast do not count):
/// one output, no loop or branch (whose check build is one step).
/// `mx::compile` can fuse nothing there, and its call costs more than
/// building the op: MLX's JIT kernel for a broadcast add took 1.07 ms where
/// its own op took 0.56.
fn single_op(graph: &Graph, outs: &[A], zeros: &[A]) -> bool {
    const VIEWS: [&str; 6] = [
        "Broadcast",
        "Reshape",
        "ExpandDims",
        "Squeeze",
        "Transpose",
        "Slice",
    ];
    let leaves = ArrayList::from_arrays(zeros.iter().map(|z| &**z));
    outs.len() == 1
        && graph.nodes().iter().all(|n| n.op.subgraphs().is_empty())
        && array::graph_ops(&ArrayList::from_arrays([&*outs[0]]), &leaves)
            .is_ok_and(|ops| ops.iter().filter(|o| !VIEWS.contains(&o.as_str())).count() <= 1)
}

impl Executable for MlxExecutable {
    fn signature(&self) -> Vec<ValueInfo> {
        let mut v: Vec<ValueInfo> = Vec::new();
        v.extend(
            self.inputs
                .iter()
                .map(|(n, id)| self.value_info(Role::Input, n.clone(), *id)),
        );
        v.extend(
            self.params
                .iter()
                .map(|(n, id)| self.value_info(Role::Param, n.clone(), *id)),
        );
        v.extend(
            self.graph
                .outputs
                .iter()
                .enumerate()
                .map(|(i, id)| self.value_info(Role::Output, self.output_label(i), *id)),
        );
        v
    }

    fn bind_param(&mut self, name: &str, p: BoundParam) -> PluginResult<()> {
        // MLX copies the bytes (see `bound`), so the host's tensor is
        // released (or no longer used) when this returns.
        self.bind_bytes(name, p.dtype, &p.shape, p.bytes())
    }

    fn bind_param_lent(&mut self, name: &str, p: TensorRef<'_>) -> PluginResult<()> {
        // Read in place while the call lasts: no copy before MLX's own.
        self.bind_bytes(name, p.dtype, &p.shape, &p.compact_cow()?)
    }

    fn device(&self) -> Option<DeviceInfo> {
        Some(self.device.clone())
    }

    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<Vec<HostTensor>> {
        self.traced_run(inputs, |exe, _, a, id| exe.host_output(&a, id))
    }

    fn run_owned(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<Vec<OwnedTensor>> {
        self.traced_run(inputs, |exe, _, a, id| exe.owned_output(a, id))
    }

    /// Each output the caller lends memory for is copied there once,
    /// straight from MLX's buffer: on the GPU one DMA from device memory
    /// into the caller's buffer, where `run_owned` copied into a buffer of
    /// the plugin's that the caller then copied again.
    fn run_into(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        slots: &mut [OutputSlot<'_>],
    ) -> PluginResult<()> {
        if slots.len() != self.graph.outputs.len() {
            return Err(PluginError::invalid_argument(format!(
                "the executable has {} outputs but the caller passed {} slots",
                self.graph.outputs.len(),
                slots.len()
            )));
        }
        self.traced_run(inputs, |exe, i, a, id| {
            exe.put_output(i, a, id, &mut slots[i])
        })
        .map(|_| ())
    }

    fn state_bind(&mut self, name: &str, value: TensorRef<'_>) -> PluginResult<()> {
        self.bind_state(name, value)
    }
    fn state_bind_from(
        &mut self,
        name: &str,
        src: Option<&dyn Executable>,
        value: &str,
    ) -> PluginResult<()> {
        self.bind_state_from(name, src, value)
    }
    fn state_unbind(&mut self, name: &str) -> PluginResult<()> {
        self.unbind_state(name)
    }
    fn state_read(&mut self, name: &str, first: usize, into: StateBuf<'_>) -> PluginResult<()> {
        self.read_state(name, first, into)
    }
    fn state_list(&self) -> Vec<ValueInfo> {
        self.list_states()
    }
    fn state_set_feed(&mut self, name: &str, feed: Feed) -> PluginResult<()> {
        self.set_state_feed(name, feed)
    }
    fn state_feed_rows(&mut self, name: Option<&str>, rows: &RowFeed) -> PluginResult<()> {
        self.feed_state_rows(name, rows)
    }
    fn output_read(&mut self, output: usize, first: usize, into: StateBuf<'_>) -> PluginResult<()> {
        self.read_last_output(output, first, into)
    }
    fn clone_executable(&self) -> PluginResult<Box<dyn Executable>> {
        Ok(Box::new(self.clone_exe()?))
    }
    fn share_params_from(&mut self, src: &dyn Executable) -> PluginResult<usize> {
        self.share_from(src)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    fn submit(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<()> {
        self.submit_run(inputs)
    }
    fn wait(&mut self, slots: &mut [OutputSlot<'_>]) -> PluginResult<()> {
        self.wait_run(slots)
    }
    fn bind_param_range(
        &mut self,
        name: &str,
        byte_offset: usize,
        data: &[u8],
    ) -> PluginResult<()> {
        self.bind_range(name, byte_offset, data)
    }
    fn set_rng(&mut self, policy: u32, seed: u64) -> PluginResult<()> {
        self.set_rng_policy(policy, seed)
    }
    fn set_active_extent(&mut self, extent: Option<(usize, usize)>) -> PluginResult<()> {
        self.set_extent(extent)
    }
}

/// On the CPU, an evaluated row-major output is handed over in MLX's own
/// buffer, kept alive by a reference to the array until the host releases
/// it: no copy. The buffer is MLX's (the plugin never wraps host memory in
/// an array), and the reference held keeps MLX from donating it to a later
/// op. The array comes back (`Err`) for a strided or broadcast view, to be
/// copied out instead.
fn lent_output(
    a: A,
    dtype: rlx_plugin_api::DType,
    dims: &[usize],
) -> Result<PluginResult<OwnedTensor>, A> {
    /// An array reference that may be dropped on any thread (MLX's arrays
    /// are reference counted atomically).
    struct Keep(#[allow(dead_code)] A);
    // SAFETY: see above; nothing else is reached through it.
    unsafe impl Send for Keep {}
    let n = a.nbytes();
    if n == 0 {
        return Err(a);
    }
    let ptr = match array::array_row_major_ptr(&a) {
        Ok(p) if p != 0 => p as *const u8,
        _ => return Err(a),
    };
    // SAFETY: `ptr` is the evaluated array's first element, `n` bytes of
    // row-major elements (checked above) in a buffer the kept handle
    // holds (moved in, not copied: the run's own handle); MLX arrays are
    // immutable once evaluated.
    // (`kept_by` checks that `n` is the bytes of the declared shape.)
    Ok(unsafe { OwnedTensor::kept_by(dtype, dims, ptr, n, Keep(a)) })
}

impl MlxExecutable {
    /// One run on the executable's device, each output handed over by
    /// `hand_over`, traced by phase when `RLX_MLX_TRACE_RUNS` asks.
    fn traced_run<T>(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        mut hand_over: impl FnMut(&Self, usize, A, NodeId) -> PluginResult<T>,
    ) -> PluginResult<Vec<T>> {
        let mut trace = RunTrace::start();
        let _on = on_device(&self.device)?;
        trace.mark("device");
        let outs = self.run_arrays(inputs, &mut trace)?;
        let handed = outs
            .into_iter()
            .zip(&self.graph.outputs)
            .enumerate()
            .map(|(i, (a, id))| hand_over(self, i, a, *id))
            .collect();
        trace.mark("outputs");
        trace.finish(|| self.trace_label());
        handed
    }

    /// Bind, evaluate and check one run: its outputs as evaluated arrays.
    fn run_arrays(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        trace: &mut RunTrace,
    ) -> PluginResult<Vec<A>> {
        let (built, given) = self.build(inputs, trace)?;
        array::eval_list_spinning(&built.list, spin_us(array::thread_device_is_gpu())).map_err(
            |e| {
                PluginError::internal(format!(
                    "MLX evaluation failed: {} (run in eager mode to find the node)",
                    explain(&self.graph, e)
                ))
            },
        )?;
        trace.mark("eval");
        // A kernel that failed on MLX's stream left its output zeroed and
        // said why here: the run fails with that.
        self.custom.check()?;
        self.keep(&built, given);
        trace.mark("finish");
        Ok(built.outs)
    }

    /// Check a run's inputs and build its graph, evaluating nothing (but
    /// in eager mode, which evaluates node by node): the outputs, the
    /// param writes and the list that evaluates both, and the run's input
    /// arrays by slot (a held state's slot is empty).
    fn build(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        trace: &mut RunTrace,
    ) -> PluginResult<(Built, InputSlots)> {
        // A failure left from an earlier run that failed before reading it.
        let _ = self.custom.failures().take();
        // The narrowed graph of the active extent, if one applies.
        self.narrowed()?;
        // One slot per graph input, in `self.inputs` order: a run has a
        // handful, found by a scan (hashing cost more than it saved on a
        // tiny run).
        let mut given: InputSlots = (0..self.inputs.len()).map(|_| None).collect();
        for (name, t) in inputs {
            let slot = self.input_slot(name).ok_or_else(|| {
                PluginError::invalid_argument(format!("the graph has no input named {name:?}"))
            })?;
            let id = self.inputs[slot].1;
            if given[slot].is_some() {
                return Err(PluginError::invalid_argument(format!(
                    "input {name:?} is given twice"
                )));
            }
            self.check_leaf("input", name, id, t.dtype, &t.shape)?;
            // A compact input is read in place (MLX copies it into its own
            // buffer once); only a strided one is gathered first.
            let bytes = t.compact_cow()?;
            let reused = match self.kept_inputs.get_mut(slot).and_then(Option::take) {
                Some(a) if reuse_inputs() => array::array_overwrite(&a, &bytes)
                    .map_err(|e| PluginError::internal(format!("input {name:?}: {e}")))?
                    .then_some(a),
                _ => None,
            };
            let arr = match reused {
                Some(a) => a,
                // Checked above, before anything was written.
                None => self.new_leaf("input", name, id, &t.shape, &bytes)?,
            };
            given[slot] = Some(arr);
        }
        if let Some(slot) =
            (0..given.len()).find(|&s| given[s].is_none() && !self.states.is_held(s))
        {
            return Err(PluginError::invalid_argument(format!(
                "missing input {:?}",
                self.inputs[slot].0
            )));
        }
        let states = &self.states;
        // An input given for a held state overrides it for this run (the
        // state keeps its value unless a feed replaces it).
        let base = |slot: usize| -> &A {
            given[slot]
                .as_ref()
                .or_else(|| states.value(slot))
                .expect("every input given or held")
        };
        if let Some((n, _)) = self
            .params
            .iter()
            .find(|(_, id)| !self.bound.contains_key(id))
        {
            return Err(PluginError::invalid_argument(format!(
                "param {n:?} is not bound"
            )));
        }
        // `narrowed()` above left the current extent's plan last.
        let plan = match self.extent {
            Some((a, u)) if a < u => self.narrowed.last().and_then(|n| n.plan.as_ref()),
            _ => None,
        };
        // The row-carrying inputs' live rows (none without an extent).
        let sliced: InputSlots = match plan {
            Some(p) => (0..self.inputs.len())
                .map(|slot| {
                    p.row_inputs[slot]
                        .then(|| extent::first_rows(base(slot), self.extent.unwrap().0))
                        .transpose()
                })
                .collect::<PluginResult<_>>()?,
            None => InputSlots::new(),
        };
        let input = |slot: usize| -> &A {
            sliced
                .get(slot)
                .and_then(Option::as_ref)
                .unwrap_or_else(|| base(slot))
        };
        // Lazily, while the compiled function's kernels are being built.
        let building = self.warmup.as_mut().is_some_and(|w| !w.ready(&self.graph));
        let (graph, compiled, write_ids, recorded) = match plan {
            Some(p) => (&p.graph, p.compiled.as_ref(), &p.compiled_writes, None),
            None => (
                &self.graph,
                self.compiled.as_deref(),
                &self.compiled_writes,
                self.plan.as_deref(),
            ),
        };
        // The params-only values, made again if a param they read changed
        // (a narrowed graph builds its own).
        let hoisting = match plan {
            None => self.hoisting.as_deref(),
            Some(_) => None,
        };
        let hoisted: &[A] = match hoisting {
            Some(h) => self
                .hoisted
                .current(h, &self.graph, &self.bound, self.rng, &self.custom)?,
            None => &[],
        };
        trace.mark("inputs");
        let leaf = |id: NodeId| -> PluginResult<A> {
            // `nodes` is in graph order, so sorted: a lookup per leaf, not a scan.
            if let Some(k) = hoisting.and_then(|h| h.nodes.binary_search(&id).ok()) {
                return Ok(hoisted[k].clone_handle());
            }
            Ok(match self.inputs.iter().position(|(_, i)| *i == id) {
                Some(slot) => input(slot).clone_handle(),
                None => self.bound[&id].clone_handle(),
            })
        };
        let writes = ParamWrites::default();
        // The list a compiled call returns is the list to evaluate (its
        // outputs, then its param writes): kept rather than built again.
        let compiled = compiled.filter(|_| !building);
        let mut built = match (compiled, self.mode) {
            (Some(c), _) => {
                let args = &mut self.args;
                // Empty unless an earlier run failed while filling it.
                args.pin_mut().clear();
                for a in (0..self.inputs.len())
                    .map(|slot| &**input(slot))
                    .chain(self.params.iter().map(|(_, id)| &*self.bound[id]))
                    .chain(hoisted.iter().map(|a| &**a))
                {
                    args.pin_mut()
                        .push(a)
                        .map_err(|e| PluginError::internal(format!("argument list: {e}")))?;
                }
                let returned = match recorded.and_then(|p| p.run(args)) {
                    Some(r) => r.map_err(|e| e.message),
                    None => c.call(args).map_err(|e| e.to_string()),
                };
                args.pin_mut().clear();
                let returned = returned.map_err(|e| {
                    PluginError::internal(format!(
                        "compiled graph: {} (run in eager mode to find the node)",
                        explain(graph, e)
                    ))
                })?;
                let mut outs = returned.to_vec();
                let n = graph.outputs.len();
                let ids = write_ids.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let values = outs.split_off(n.min(outs.len()));
                Built {
                    outs,
                    writes: ids.into_iter().zip(values).collect(),
                    list: returned,
                }
            }
            (None, mode) => {
                let env = Env {
                    rng: self.rng,
                    custom: &self.custom,
                    how: if mode == Mode::Eager {
                        Eval::Eager
                    } else {
                        Eval::Lazy
                    },
                    writes: &writes,
                    observe: None,
                    fusion: None,
                };
                let outs = hoist::evaluate_run(hoisting, graph, &env, &leaf)?;
                // Param writes belong to the executable's own graph.
                let writes = writes.take_for(graph);
                let list = ArrayList::from_arrays(
                    outs.iter()
                        .map(|a| &**a)
                        .chain(writes.iter().map(|(_, v)| &**v)),
                );
                Built { outs, writes, list }
            }
        };
        if let Some(p) = plan {
            // Back to the declared rows, the padding zeros.
            let upper = self.extent.unwrap().1;
            for (o, rows) in built.outs.iter_mut().zip(&p.row_outputs) {
                if *rows {
                    *o = extent::pad_rows(o, upper)?;
                }
            }
            built.list = ArrayList::from_arrays(
                built
                    .outs
                    .iter()
                    .map(|a| &**a)
                    .chain(built.writes.iter().map(|(_, v)| &**v)),
            );
        }
        crate::op_counts::record(&graph.name, self.mode, &built.list);
        trace.mark("build");
        Ok((built, given))
    }

    /// A run's effects, once it succeeded (or was submitted): its input
    /// arrays are kept for the next run to write over, its param writes
    /// become the params' values, and its state feeds take effect.
    fn keep(&mut self, built: &Built, given: InputSlots) {
        self.kept_inputs = given;
        for (id, v) in &built.writes {
            if let Some(b) = self.bound.get_mut(id) {
                *b = v.clone_handle();
            }
        }
        self.states.follow(&built.outs);
    }

    /// The device and mode a traced run names, `-inline` when its
    /// evaluation ran on the caller's thread (shim `inline_eval.cc`).
    fn trace_label(&self) -> String {
        // What ran: compiled mode without a compiled function (a host loop,
        // an unusable kernel cache, a graph of one op) builds it lazily.
        let building = self.warmup.as_ref().is_some_and(|w| !w.is_ready());
        let mode = match (&self.compiled, self.mode) {
            (None, Mode::Compiled) => "lazy",
            (Some(_), Mode::Compiled) if building => "lazy (compiling)",
            (_, m) => m.name(),
        };
        let inline = if array::last_eval_inline() {
            "-inline"
        } else {
            ""
        };
        format!("{} {mode}{inline}", self.device.label())
    }

    /// Output `i`'s name in the signature (and for `bind_from`): the
    /// graph's, else `output{i}`.
    pub(super) fn output_label(&self, i: usize) -> String {
        self.graph
            .output_name(i)
            .map_or_else(|| format!("output{i}"), str::to_string)
    }

    /// `src` as an MLX executable, or `INVALID_ARGUMENT` naming the call
    /// (`what`) that was handed another plugin's.
    fn of<'a>(src: &'a dyn Executable, what: &str) -> PluginResult<&'a MlxExecutable> {
        src.as_any()
            .and_then(|a| a.downcast_ref::<MlxExecutable>())
            .ok_or_else(|| {
                PluginError::invalid_argument(format!("{what}: src is not an MLX executable"))
            })
    }

    /// Node `id`'s declared dtype and dims (an output's, a leaf's).
    fn declared_layout(&self, id: NodeId) -> (rlx_plugin_api::DType, Dims<usize>) {
        let s = self.graph.shape(id);
        (
            ir_to_abi(s.dtype()).expect("checked"),
            static_dims(s.dims()).iter().map(|d| *d as usize).collect(),
        )
    }

    /// Output `i` (node `id`) into its slot: copied into the caller's
    /// buffer (on a GPU, one copy from device memory), handed over, or
    /// (skipped) left on the device.
    fn put_output(
        &self,
        i: usize,
        a: A,
        id: NodeId,
        slot: &mut OutputSlot<'_>,
    ) -> PluginResult<()> {
        match slot {
            OutputSlot::Into(buf) => {
                let (dtype, dims) = self.declared_layout(id);
                buf.check(i, dtype, &dims)?;
                array::array_copy_into(&a, buf.bytes)
                    .map_err(|e| PluginError::internal(format!("output {i}: {e}")))
            }
            OutputSlot::Owned(slot) => {
                *slot = Some(self.owned_output(a, id)?);
                Ok(())
            }
            OutputSlot::Skip => Ok(()),
        }
    }

    /// Output `id` handed over as an owned tensor: lent in MLX's own
    /// buffer on the CPU where it can be, else copied out.
    fn owned_output(&self, a: A, id: NodeId) -> PluginResult<OwnedTensor> {
        let a = if self.device.kind == rlx_plugin_api::DeviceKind::Cpu {
            let (dtype, dims) = self.declared_layout(id);
            match lent_output(a, dtype, &dims) {
                Ok(lent) => return lent,
                Err(a) => a,
            }
        } else {
            a
        };
        self.host_output(&a, id).map(OwnedTensor::from_host)
    }

    /// Output `id`'s array copied out into a host tensor.
    fn host_output(&self, a: &A, id: NodeId) -> PluginResult<HostTensor> {
        let data = a
            .to_bytes()
            .map_err(|e| PluginError::internal(e.to_string()))?;
        let (dtype, dims) = self.declared_layout(id);
        HostTensor::new(dtype, dims.to_vec(), data)
    }
}
