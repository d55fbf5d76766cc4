//! The adapter that makes a loaded plugin an rlx-runtime backend.
//!
//! [`register_plugin_backend`] stores a plugin (and the execution mode to
//! compile with) for a [`Device`] and registers a factory for that device
//! with `rlx_runtime::register_backend`. From then on
//! `rlx_runtime::Session::new(device)` compiles through the plugin:
//!
//! 1. rlx-runtime's own pipeline (`stages::compile_*_stages`) runs with the
//!    plugin's supported-op list as the claim set, so fusion and
//!    legalization decompose whatever the plugin does not claim. One
//!    adjustment: without `Concat` and `Narrow` claimed, the weight-concat
//!    fusions are switched off (see [`Pipeline::options`]);
//! 2. the resulting graph goes through the post-fusion steps the built-in
//!    backends use (control-flow pipeline, skipped for the loops and
//!    conditionals the plugin claims, backward-op decomposition, the
//!    backend rewrite/legalize probe, cleanup);
//! 3. it is checked once more against the claim set (so an op the plugin
//!    does not claim is reported here, counted per kind), written as
//!    `.rlxmodel` text and compiled by the plugin;
//! 4. the plugin executable is wrapped in an [`ExecutableGraph`]
//!    ([`PluginGraph`]) that converts rlx-runtime's f32 (or typed) buffers
//!    to and from the dtypes the executable's signature declares.
//!
//! When steps 1–3 fail for the plugin's claims, or leave a node whose dtype
//! the plugin does not claim, and fallback is on ([`set_fallback`], the
//! default), the pipeline runs again for the plugin's and the CPU
//! backend's claims together. The plugin then compiles the partitions it
//! takes, the CPU backend compiles the rest, and a
//! [`crate::partition::SplitGraph`] runs them in order ([`explain`] shows
//! the plan). A graph the plugin takes whole is never split.
//!
//! [`lower_for_claims`] runs steps 1–3 without a plugin: what a plugin
//! claiming a given op set would be sent.
//!
//! `ExecutableGraph` and `Backend` methods cannot return errors, so a
//! failure panics with one line: `"<plugin name> plugin: <message>"`
//! (rlx-runtime's own backends do the same). Callers that want an error
//! value use [`crate::guard::catch`].
//!
//! The mode a compile uses is, in order: a thread-local override set with
//! [`with_mode`], else the device's current mode ([`set_plugin_mode`], or
//! the one given to [`register_plugin_backend`]). `Session::compile`
//! compiles on the calling thread, except for graphs with dynamic dims,
//! which rlx-runtime compiles at their first run (use [`set_plugin_mode`]
//! for those).

pub use crate::partition::Fallback;
use rlx_ir::lir::LirModule;
use rlx_ir::{Graph, OpKind};
use rlx_opt::pass::Pass as _;
use rlx_plugin_api::host::{LoadedPlugin, PluginExecutable};
use rlx_plugin_api::tensor::Dims;
use rlx_plugin_api::{convert, DType, HostTensorRef, Mode, Role, TensorRef, ValueInfo};
use rlx_runtime::{Backend, CompileOptions, Device, ExecutableGraph};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// What is registered for one device.
#[derive(Clone)]
struct Registration {
    plugin: Arc<LoadedPlugin>,
    /// The plugin's supported ops as rlx-ir kinds (leaked once per plugin).
    ops: &'static [OpKind],
    mode: Mode,
    /// Whether nodes the plugin does not take may run on the CPU backend.
    fallback: Fallback,
    /// Its claims with their dtypes, for placing nodes.
    claims: Arc<crate::partition::Claims>,
    /// The per-tensor limit its compiles send (ABI 1.7); None = the
    /// plugin's own.
    memory_limit: Option<u64>,
}

fn registry() -> &'static RwLock<HashMap<Device, Registration>> {
    static R: OnceLock<RwLock<HashMap<Device, Registration>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

thread_local! {
    static MODE_OVERRIDE: Cell<Option<Mode>> = const { Cell::new(None) };
}

/// Parse the plugin's op-kind names into rlx-ir kinds. Names this rlx-ir
/// does not know are skipped with a warning (a newer plugin may claim ops an
/// older host has never heard of; they simply are not claimed).
pub fn parse_op_kinds(plugin: &LoadedPlugin) -> Vec<OpKind> {
    let mut out = Vec::new();
    for o in plugin.supported_ops() {
        match op_kind(&o.op_kind) {
            Some(k) => {
                if !out.contains(&k) {
                    out.push(k)
                }
            }
            None => log::warn!(
                "plugin {}: supported op {:?} is not an rlx-ir op kind this host knows; not claimed",
                plugin.descriptor().name,
                o.op_kind
            ),
        }
    }
    out
}

/// The rlx-ir op kind an ABI op-kind name spells, if this rlx-ir knows it.
pub fn op_kind(name: &str) -> Option<OpKind> {
    serde_json::from_str::<OpKind>(&format!("\"{name}\"")).ok()
}

/// The claim set for `plugin`, leaked once per plugin (by path) so it can
/// be the `&'static [OpKind]` rlx-runtime's `Backend::supported_ops` wants.
fn leaked_ops(plugin: &Arc<LoadedPlugin>) -> &'static [OpKind] {
    static CACHE: OnceLock<Mutex<HashMap<std::path::PathBuf, &'static [OpKind]>>> = OnceLock::new();
    let mut map = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    map.entry(plugin.path().to_path_buf())
        .or_insert_with(|| Box::leak(parse_op_kinds(plugin).into_boxed_slice()))
}

/// Make `plugin` the backend for `device`, compiling in `mode`. Replaces
/// whatever was registered for the device before (a built-in backend too).
/// Register before `Session::new(device)`: a session asserts its device is
/// available, and a registered device is.
pub fn register_plugin_backend(plugin: Arc<LoadedPlugin>, device: Device, mode: Mode) {
    let ops = leaked_ops(&plugin);
    log::info!(
        "registering plugin {} {} as the {device} backend ({} op kinds claimed, mode {})",
        plugin.descriptor().name,
        plugin.descriptor().version,
        ops.len(),
        mode.name()
    );
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            device,
            Registration {
                plugin: plugin.clone(),
                ops,
                mode,
                fallback: Fallback::Cpu,
                claims: Arc::new(crate::partition::Claims::of(&plugin)),
                memory_limit: None,
            },
        );
    rlx_runtime::register_backend(device, factory_for(device));
    // Its custom ops become rlx-ir ops, so host graphs can use them.
    crate::custom_ops::register_plugin_ops(&plugin);
}

/// Change the mode later compiles on `device` use (no effect on graphs
/// already compiled). Returns false when no plugin is registered for it.
pub fn set_plugin_mode(device: Device, mode: Mode) -> bool {
    update_registration(device, |r| r.mode = mode)
}

/// Change what is registered for `device`; false when nothing is.
fn update_registration(device: Device, f: impl FnOnce(&mut Registration)) -> bool {
    match registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(&device)
    {
        Some(r) => {
            f(r);
            true
        }
        None => false,
    }
}

/// Set the per-tensor memory limit later compiles on `device` send to the
/// plugin (ABI 1.7 `memory_limit_bytes`; None = the plugin's own limit).
/// A graph with a larger tensor then fails to compile, naming it. Returns
/// false when no plugin is registered for the device.
/// Whether graphs compiled on `device` may run the nodes its plugin does
/// not take on rlx-runtime's CPU backend (the default), or fail at the
/// first such node. False when no plugin is registered for `device`.
pub fn set_fallback(device: Device, fallback: Fallback) -> bool {
    match registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(&device)
    {
        Some(r) => {
            r.fallback = fallback;
            true
        }
        None => false,
    }
}

/// Where each node of `graph` would run when compiled on `device` with
/// default options: the plugin, or the CPU backend and why, partition by
/// partition. The nodes are those of the graph after rlx-runtime's
/// pipeline, as the plugin would receive them.
pub fn explain(device: Device, graph: &Graph) -> Result<crate::partition::Plan, String> {
    let backend = crate::guard::catch_raw(make_backend_for(device))?;
    let options = CompileOptions::default();
    crate::guard::catch_quiet(|| {
        backend.placed(&options, &|l: &Pipeline, o: &CompileOptions| {
            Ok(l.lower(graph.clone(), o))
        })
    })?
    .map(|(_, plan)| plan)
    .map_err(|e| e.to_string())
}

pub fn set_memory_limit(device: Device, limit: Option<u64>) -> bool {
    update_registration(device, |r| r.memory_limit = limit)
}

/// The mode the next compile on `device` would use from this thread.
pub fn plugin_mode(device: Device) -> Option<Mode> {
    MODE_OVERRIDE.with(|m| m.get()).or_else(|| {
        registry()
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&device)
            .map(|r| r.mode)
    })
}

/// The plugin registered for `device`, if any.
pub fn registered_plugin(device: Device) -> Option<Arc<LoadedPlugin>> {
    registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&device)
        .map(|r| r.plugin.clone())
}

/// Run `f` with every plugin compile on this thread using `mode` (compiles
/// run on the calling thread, so this scopes the mode to `f` without
/// touching other threads — parallel tests can compile in different modes).
pub fn with_mode<R>(mode: Mode, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Mode>);
    impl Drop for Restore {
        fn drop(&mut self) {
            MODE_OVERRIDE.with(|m| m.set(self.0));
        }
    }
    let _restore = Restore(MODE_OVERRIDE.with(|m| m.replace(Some(mode))));
    f()
}

// ---- the factory: rlx-runtime takes a plain `fn()`, one per device ----

fn make_backend<const I: usize>() -> Box<dyn Backend> {
    Box::new(make_backend_for(Device::all()[I])())
}

fn make_backend_for(device: Device) -> impl FnOnce() -> PluginBackend {
    move || make_plugin_backend(device)
}

fn make_plugin_backend(device: Device) -> PluginBackend {
    let reg = registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&device)
        .cloned()
        .unwrap_or_else(|| panic!("no plugin is registered for device {device}"));
    let pipeline = Pipeline {
        device,
        ops: reg.ops,
        label: reg.plugin.descriptor().name.clone(),
    };
    PluginBackend { reg, pipeline }
}

macro_rules! factories {
    ($($i:literal)*) => { [$(make_backend::<$i> as rlx_runtime::registry::BackendFactory),*] };
}

fn factory_for(device: Device) -> rlx_runtime::registry::BackendFactory {
    const TABLE: [rlx_runtime::registry::BackendFactory; 16] =
        factories!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    let i = Device::all()
        .iter()
        .position(|d| *d == device)
        .expect("a device is in Device::all()");
    assert!(
        i < TABLE.len(),
        "rlx-host: device index {i} exceeds the adapter's factory table"
    );
    TABLE[i]
}

// ---- Pipeline: rlx-runtime's compile stages for a claim set ----

/// rlx-runtime's compile pipeline for one device and one claim set, as
/// the plugin backend runs it before handing the graph to the plugin.
/// Failures panic with `"<label> plugin: <one line>"`.
#[derive(Clone)]
pub struct Pipeline {
    pub device: Device,
    pub ops: &'static [OpKind],
    /// The plugin's name, for messages.
    pub label: String,
}

impl Pipeline {
    fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!("{} plugin: {msg}", self.label)
    }

    fn claims(&self, k: OpKind) -> bool {
        self.ops.contains(&k)
    }

    /// Run one of rlx-runtime's stages; its panic (a legalize failure
    /// lists the unclaimed ops one per line) is re-raised as this plugin's,
    /// on one line.
    fn stage<T>(&self, f: impl FnOnce() -> T) -> T {
        crate::guard::catch_raw(f).unwrap_or_else(|e| {
            self.fail(match summarize_legalize_error(&e) {
                Some(s) => format!("rlx-runtime's {} pipeline left {s}", self.device),
                None => format!(
                    "rlx-runtime's {} compile pipeline failed: {}",
                    self.device,
                    crate::guard::one_line(&e)
                ),
            })
        })
    }

    /// The session's options, adjusted to what the plugin claims.
    ///
    /// rlx-runtime's `FuseSharedInputMatMul` (QKV, gate/up) runs whenever
    /// the backend claims `MatMul` and rewrites sibling matmuls into
    /// `Concat` (of the weights) + `MatMul` + `Narrow`, whether or not the
    /// backend claims `Concat` and `Narrow`; legalization then fails on
    /// them. Without both claimed, that fusion is switched off
    /// (`FusionOptions::no_weight_concat`, the `RLX_NO_WEIGHT_CONCAT_FUSION`
    /// knob): the matmuls read their weights in place.
    pub fn options(&self, options: &CompileOptions) -> CompileOptions {
        let mut o = options.clone();
        let claims_both = self.claims(OpKind::Concat) && self.claims(OpKind::Narrow);
        if !claims_both && !o.fusion_opts.no_weight_concat {
            log::debug!(
                "plugin {} claims no Concat/Narrow: weight-concat fusions off",
                self.label
            );
            o.fusion_opts.no_weight_concat = true;
        }
        o
    }

    /// Fusion + legalization (`stages::compile_graph_stages_for_backend`)
    /// with the claim set.
    pub fn stages(&self, graph: Graph, options: &CompileOptions) -> LirModule {
        let options = &self.options(options);
        let result = self.stage(|| {
            rlx_runtime::stages::compile_graph_stages_for_backend(
                self.device,
                graph,
                options,
                self.ops,
            )
        });
        rlx_runtime::stages::maybe_log_fusion(&result.fusion);
        result.lir
    }

    /// The post-fusion steps rlx-runtime's built-in backends run on LIR
    /// (`backend/mlx_backend.rs::compile_lir` and `prepare_fused_graph`),
    /// then a last check that every node's kind is claimed.
    pub fn prepare(&self, lir: LirModule, options: &CompileOptions) -> Graph {
        let ops = self.ops;
        let (graph, report) = self.stage(|| {
            let mut graph = lir.into_graph();
            // A plugin that runs While keeps loops (and If, when claimed)
            // intact: unrolling is only for plugins without a loop.
            graph = if !ops.contains(&OpKind::While) {
                rlx_opt::LowerControlFlow.run(graph)
            } else if !ops.contains(&OpKind::If) {
                rlx_opt::LowerIf.run(graph)
            } else {
                graph
            };
            graph = rlx_opt::rlx_autodiff::decompose_backward_ops_except(graph, ops);
            rlx_opt::prepare_graph_for_backend_with_report(
                graph,
                &self.label,
                ops,
                options.kernel_dispatch,
            )
        });
        rlx_opt::maybe_log_dispatch_report(&report);
        if !report.compile_ready {
            log::debug!("{}", rlx_opt::format_dispatch_report(&report));
            self.fail(format!(
                "rlx-runtime's {} pipeline left {}",
                self.device,
                unclaimed_message(&graph, &report.still_unsupported)
            ));
        }
        let graph = self.stage(|| {
            let mut graph = rlx_runtime::precompile::post_fusion_cleanup(graph, options);
            if let Some(p) = options.policy.clone() {
                graph = rlx_opt::AutoMixedPrecision::new(p).run(graph);
            }
            graph
        });
        // The last word before the plugin sees it. Legalization should
        // guarantee this; if a later cleanup introduced something, say so.
        let unclaimed: Vec<(rlx_ir::NodeId, OpKind)> = graph
            .nodes()
            .iter()
            .filter(|n| !self.claims(n.op.kind()))
            .map(|n| (n.id, n.op.kind()))
            .collect();
        if !unclaimed.is_empty() {
            self.fail(format!(
                "rlx-runtime's {} cleanup after legalization produced {}",
                self.device,
                unclaimed_message(&graph, &unclaimed)
            ));
        }
        graph
    }

    /// [`Self::stages`] then [`Self::prepare`]: the graph the plugin would
    /// be sent.
    pub fn lower(&self, graph: Graph, options: &CompileOptions) -> Graph {
        let lir = self.stages(graph, options);
        self.prepare(lir, options)
    }
}

/// The graph a plugin claiming `ops` would receive for `graph` compiled on
/// `device` with default options, or the one-line reason it cannot.
/// No plugin is involved: this shows what rlx-runtime's pipeline does.
pub fn lower_for_claims(
    device: Device,
    graph: Graph,
    ops: &'static [OpKind],
    label: &str,
) -> Result<Graph, String> {
    let l = Pipeline {
        device,
        ops,
        label: label.to_string(),
    };
    crate::guard::catch_quiet(|| l.lower(graph, &CompileOptions::default()))
}

/// rlx-opt's legalize panic (`backend "mlx" doesn't claim support for N op
/// kind(s):` then `  - node NodeId(i): Kind` per node) as one line that
/// counts nodes per kind: "5 node(s) of op kinds the plugin does not claim:
/// Gather x1, RmsNorm x3, Rope x1". `None` for any other message.
pub fn summarize_legalize_error(msg: &str) -> Option<String> {
    if !msg.contains("doesn't claim support") {
        return None;
    }
    let pairs: Vec<String> = msg
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- node "))
        .filter_map(|rest| rest.rsplit_once(": ").map(|(_, k)| k.trim().to_string()))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    Some(count_kinds(pairs.len(), pairs.iter().map(String::as_str)))
}

/// "N node(s) of op kinds the plugin does not claim: A x2, B x1".
fn count_kinds<'a>(total: usize, kinds: impl Iterator<Item = &'a str>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for k in kinds {
        match counts.iter_mut().find(|(c, _)| *c == k) {
            Some((_, n)) => *n += 1,
            None => counts.push((k, 1)),
        }
    }
    format!(
        "{total} node(s) of op kinds the plugin does not claim: {}",
        counts
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// [`count_kinds`] for (node, kind) pairs, plus the first node of each.
fn unclaimed_message(graph: &Graph, nodes: &[(rlx_ir::NodeId, OpKind)]) -> String {
    let names: Vec<String> = nodes.iter().map(|(_, k)| format!("{k:?}")).collect();
    let first = nodes
        .first()
        .and_then(|(id, _)| graph.nodes().get(id.0 as usize))
        .map(|n| format!(" (first: node {} = {})", n.id, n.op))
        .unwrap_or_default();
    format!(
        "{}{first}",
        count_kinds(nodes.len(), names.iter().map(String::as_str))
    )
}

/// The stages of a [`Pipeline`] for one claim set, from the
/// input a compile entry point was given to the graph the plugin would get.
type Staged<'a> = dyn Fn(&Pipeline, &CompileOptions) -> Result<Graph, rlx_ir::hir::LowerError> + 'a;

/// The plugin's claims and the CPU backend's together, leaked once per
/// claim set (rlx-runtime wants a `&'static` list).
fn union_claims(plugin: &'static [OpKind]) -> &'static [OpKind] {
    static CACHE: OnceLock<Mutex<HashMap<usize, &'static [OpKind]>>> = OnceLock::new();
    let mut map = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    map.entry(plugin.as_ptr() as usize).or_insert_with(|| {
        let mut all = plugin.to_vec();
        if let Some(cpu) = rlx_runtime::registry::backend_for(Device::Cpu) {
            for k in cpu.supported_ops() {
                if !all.contains(k) {
                    all.push(*k);
                }
            }
        }
        Box::leak(all.into_boxed_slice())
    })
}

// ---- the backend ----

struct PluginBackend {
    reg: Registration,
    pipeline: Pipeline,
}

/// rlx-ir's `RngBackend` as the ABI numbers it (`tables::rng_policy`).
pub fn rng_policy_number(b: rlx_ir::RngBackend) -> u32 {
    use rlx_plugin_api::tables::rng_policy;
    match b {
        rlx_ir::RngBackend::Philox => rng_policy::PHILOX,
        rlx_ir::RngBackend::Ort => rng_policy::ORT,
        rlx_ir::RngBackend::Bnns => rng_policy::BNNS,
        rlx_ir::RngBackend::Zero => rng_policy::ZERO,
    }
}

impl PluginBackend {
    /// May nodes the plugin does not take run on the CPU backend?
    fn falls_back(&self) -> bool {
        // A plugin registered for the CPU device itself has nothing to fall back to.
        self.reg.fallback == Fallback::Cpu && self.pipeline.device != Device::Cpu
    }

    /// The graph as rlx-runtime's pipeline prepares it, and where each of
    /// its nodes runs. `lower` runs the pipeline for a claim set. The
    /// plugin's claims come first: a graph the pipeline can fit to them
    /// (decomposing what the plugin lacks) goes to the plugin whole, unless
    /// a node's dtype is not claimed. When it cannot, and fallback is
    /// allowed, the pipeline runs again for the plugin's and the CPU
    /// backend's claims together, and the nodes the plugin does not take go
    /// to the CPU.
    fn placed(
        &self,
        options: &CompileOptions,
        lower: &Staged<'_>,
    ) -> Result<(Graph, crate::partition::Plan), rlx_ir::hir::LowerError> {
        let g = if !self.falls_back() {
            lower(&self.pipeline, options)?
        } else {
            match crate::guard::catch_raw(|| lower(&self.pipeline, options)) {
                Ok(r) => r?,
                Err(why) => {
                    log::debug!(
                        "{} plugin cannot take the graph whole: {why}",
                        self.pipeline.label
                    );
                    let both = Pipeline {
                        ops: union_claims(self.reg.ops),
                        ..self.pipeline.clone()
                    };
                    lower(&both, options)?
                }
            }
        };
        let plan = crate::partition::Plan::new(&g, &self.reg.claims);
        Ok((g, plan))
    }

    /// The plan's executable: the plugin's alone when it takes every node
    /// (or fallback is off: then its compile names the first node it
    /// refuses), else the partitions on the plugin and the CPU backend.
    fn compile_placed(
        &self,
        options: &CompileOptions,
        lower: &Staged<'_>,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        let (graph, plan) = self.placed(options, lower)?;
        if plan.is_whole() || !self.falls_back() {
            return Ok(self.build(graph, options.rng));
        }
        log::info!(
            "{} plugin: the graph runs split with the CPU backend:\n{plan}",
            self.pipeline.label
        );
        let cpu = rlx_runtime::registry::backend_for(Device::Cpu).unwrap_or_else(|| {
            self.pipeline
                .fail("no CPU backend is registered to fall back to")
        });
        Ok(Box::new(crate::partition::SplitGraph::compile(
            &graph,
            &plan,
            |sub| self.build(sub, options.rng),
            |sub| cpu.compile(sub, options),
        )))
    }

    /// [`Self::compile_placed`] for `compile_hir` and `compile_module`:
    /// rlx-runtime's stages for the input under the plugin's options and
    /// the claim set tried, then the post-fusion steps.
    fn compile_staged(
        &self,
        options: &CompileOptions,
        stages: impl Fn(&CompileOptions) -> Result<rlx_opt::CompileResult, rlx_ir::hir::LowerError>,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        self.compile_placed(options, &|l: &Pipeline, o: &CompileOptions| {
            let o = &rlx_runtime::stages::options_with_supported_ops(&l.options(o), l.ops);
            let result = l.stage(|| stages(o))?;
            rlx_runtime::stages::maybe_log_fusion(&result.fusion);
            Ok(l.prepare(result.lir, o))
        })
    }

    fn build(&self, graph: Graph, rng: rlx_ir::RngOptions) -> Box<dyn ExecutableGraph> {
        let name = &self.pipeline.label;
        let text = rlx_ir::rlxmodel::to_text(&graph).unwrap_or_else(|e| {
            self.pipeline
                .fail(format!("cannot write the graph as .rlxmodel: {e}"))
        });
        log::trace!("graph sent to plugin {name}:\n{text}");
        let mode = plugin_mode(self.pipeline.device).unwrap_or(self.reg.mode);
        log::debug!(
            "compiling {} nodes on plugin {name} in {} mode",
            graph.len(),
            mode.name()
        );
        // rlx-runtime's RNG options travel in the compile options (ABI 1.2),
        // so random ops draw the stream the CPU backend would.
        let options = rlx_plugin_api::CompileOptions {
            mode,
            rng_policy: rng_policy_number(rng.backend),
            rng_seed: rng.seed,
            // The plugin's default device (ABI 1.4): its GPU when it has one.
            device: None,
            // The per-tensor limit (ABI 1.7) as set for the device now.
            memory_limit: registry()
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&self.pipeline.device)
                .and_then(|r| r.memory_limit),
        };
        let exe = self
            .reg
            .plugin
            .compile_with(&text, &options)
            .unwrap_or_else(|e| self.pipeline.fail(e));
        Box::new(PluginGraph::new(exe, name.clone()))
    }
}

impl Backend for PluginBackend {
    fn compile(&self, graph: Graph, options: &CompileOptions) -> Box<dyn ExecutableGraph> {
        self.compile_placed(options, &|l: &Pipeline, o: &CompileOptions| {
            Ok(l.lower(graph.clone(), o))
        })
        .unwrap_or_else(|e| self.pipeline.fail(e))
    }

    fn compile_hir(
        &self,
        hir: rlx_ir::hir::HirModule,
        device: Device,
        options: &CompileOptions,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        self.compile_staged(options, |o| {
            rlx_runtime::stages::compile_hir_stages(device, hir.clone(), o)
        })
    }

    fn compile_module(
        &self,
        module: rlx_ir::GraphModule,
        device: Device,
        options: &CompileOptions,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        self.compile_staged(options, |o| {
            rlx_runtime::stages::compile_module_stages(device, module.clone(), o)
        })
    }

    fn compile_lir(&self, lir: LirModule, options: &CompileOptions) -> Box<dyn ExecutableGraph> {
        self.compile_placed(options, &|l: &Pipeline, o: &CompileOptions| {
            Ok(l.prepare(lir.clone(), o))
        })
        .unwrap_or_else(|e| self.pipeline.fail(e))
    }

    fn supported_ops(&self) -> &'static [OpKind] {
        self.reg.ops
    }
}

// ---- dtypes ----

/// The plugin-ABI dtype of an rlx-ir dtype (`None`: no ABI equivalent).
pub fn abi_dtype(d: rlx_ir::DType) -> Option<DType> {
    use rlx_ir::DType as D;
    Some(match d {
        D::F32 => DType::F32,
        D::F16 => DType::F16,
        D::BF16 => DType::BF16,
        D::F64 => DType::F64,
        D::I8 => DType::I8,
        D::I16 => DType::I16,
        D::I32 => DType::I32,
        D::I64 => DType::I64,
        D::U8 => DType::U8,
        D::U32 => DType::U32,
        D::Bool => DType::Bool,
        D::C64 => DType::C64,
        D::C128 => return None,
    })
}

/// The rlx-ir dtype of a plugin-ABI dtype.
pub fn ir_dtype(d: DType) -> rlx_ir::DType {
    use rlx_ir::DType as D;
    match d {
        DType::F32 => D::F32,
        DType::F16 => D::F16,
        DType::BF16 => D::BF16,
        DType::F64 => D::F64,
        DType::I8 => D::I8,
        DType::I16 => D::I16,
        DType::I32 => D::I32,
        DType::I64 => D::I64,
        DType::U8 => D::U8,
        DType::U32 => D::U32,
        DType::Bool => D::Bool,
        DType::C64 => D::C64,
    }
}

// ---- the executable ----

/// A plugin executable as an rlx-runtime [`ExecutableGraph`].
pub struct PluginGraph {
    exe: PluginExecutable,
    plugin: String,
    /// By position; a run looks each name up (a graph has few inputs,
    /// and a scan costs less than hashing the name).
    inputs: Vec<ValueInfo>,
    params: HashMap<String, ValueInfo>,
    outputs: Vec<ValueInfo>,
}

impl PluginGraph {
    pub fn new(exe: PluginExecutable, plugin: String) -> PluginGraph {
        let by_role = |r: Role| -> HashMap<String, ValueInfo> {
            exe.values(r).map(|v| (v.name.clone(), v.clone())).collect()
        };
        let inputs = exe.values(Role::Input).cloned().collect();
        let params = by_role(Role::Param);
        let outputs = exe.values(Role::Output).cloned().collect();
        PluginGraph {
            exe,
            plugin,
            inputs,
            params,
            outputs,
        }
    }

    /// The executable's signature (inputs, params, outputs).
    pub fn signature(&self) -> &[ValueInfo] {
        self.exe.signature()
    }

    fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!("{} plugin: {msg}", self.plugin)
    }

    /// `info`'s concrete shape and the bytes in its dtype: `data` itself
    /// (borrowed stays borrowed) when `have` is that dtype, else converted
    /// through f32.
    fn converted<'d>(
        &self,
        kind: &str,
        info: &ValueInfo,
        data: Cow<'d, [u8]>,
        have: rlx_ir::DType,
    ) -> (Dims<usize>, Cow<'d, [u8]>) {
        let n = data.len() / have.size_bytes().max(1);
        let shape = self.concrete_shape(kind, info, n);
        let bytes = match abi_dtype(have) {
            Some(d) if d == info.dtype => data,
            _ => {
                let wide = rlx_runtime::backend::widen_bytes_to_f32(&data, have);
                Cow::Owned(
                    rlx_plugin_api::convert::f32_to_bytes(info.dtype, &wide)
                        .unwrap_or_else(|e| self.fail(format!("{kind} {:?}: {e}", info.name))),
                )
            }
        };
        (shape, bytes)
    }

    /// `info`'s shape with at most one run-time size filled in from `n`.
    fn concrete_shape(&self, kind: &str, info: &ValueInfo, n: usize) -> Dims<usize> {
        let known: usize = info.shape.iter().flatten().product();
        let unknown = info.shape.iter().filter(|d| d.is_none()).count();
        let shape_str = || {
            let dims: Vec<String> = info
                .shape
                .iter()
                .map(|d| d.map_or("?".into(), |d| d.to_string()))
                .collect();
            format!("{}[{}]", info.dtype, dims.join(", "))
        };
        match unknown {
            0 if known == n => info.shape.iter().map(|d| d.unwrap()).collect(),
            1 if known > 0 && n.is_multiple_of(known) => {
                info.shape.iter().map(|d| d.unwrap_or(n / known)).collect()
            }
            _ => self.fail(format!(
                "{kind} {:?} is {} but {n} elements were given",
                info.name,
                shape_str()
            )),
        }
    }

    fn bind(&mut self, name: &str, data: Cow<'_, [u8]>, have: rlx_ir::DType) {
        let Some(info) = self.params.get(name) else {
            // The optimizer may have removed a param the original graph
            // declared (rlx-runtime already checked the name against it).
            log::debug!(
                "{} plugin: the compiled graph has no param {name:?}; ignored",
                self.plugin
            );
            return;
        };
        // Lent for the call, like run inputs: the plugin copies what it
        // keeps, so a borrowed param of the right dtype is never copied here.
        let (shape, bytes) = self.converted("param", info, data, have);
        let t = HostTensorRef::new(info.dtype, &shape, &bytes)
            .unwrap_or_else(|e| self.fail(format!("param {name:?}: {e}")));
        if let Err(e) = self.exe.bind_param_ref(name, t) {
            self.fail(e)
        }
    }

    /// Run with `inputs` (converted to the dtypes the plugin wants where
    /// they differ) and read each output with `read`, in place.
    fn run_bytes<T>(
        &mut self,
        inputs: Vec<(&str, Cow<'_, [u8]>, rlx_ir::DType)>,
        read: impl FnMut(&TensorRef<'_>) -> rlx_plugin_api::PluginResult<T>,
    ) -> Vec<T> {
        // Inputs in the dtype the plugin wants are lent to it as they are
        // (it copies them into its own arrays); only converted ones are new.
        type Input<'n, 'd> = (&'n str, DType, Dims<usize>, Cow<'d, [u8]>);
        let mut given: SmallVec<[Input<'_, '_>; 4]> = SmallVec::with_capacity(inputs.len());
        for (name, data, dt) in inputs {
            match self.inputs.iter().find(|i| i.name == name) {
                Some(info) => {
                    let (shape, bytes) = self.converted("input", info, data, dt);
                    given.push((name, info.dtype, shape, bytes));
                }
                None => log::debug!(
                    "{} plugin: the compiled graph has no input {name:?}; ignored",
                    self.plugin
                ),
            }
        }
        if let Some(missing) = self
            .inputs
            .iter()
            .map(|i| &i.name)
            .find(|k| !given.iter().any(|(n, ..)| n == k))
        {
            self.fail(format!("input {missing:?} was not given"));
        }
        let named: SmallVec<[(&str, HostTensorRef<'_>); 4]> = given
            .iter()
            .map(|(n, dtype, shape, bytes)| {
                let t = HostTensorRef::new(*dtype, shape, bytes)
                    .unwrap_or_else(|e| self.fail(format!("input {n:?}: {e}")));
                (*n, t)
            })
            .collect();
        let outs = self
            .exe
            .run_refs_with(&named, read)
            .unwrap_or_else(|e| self.fail(e));
        if outs.len() != self.outputs.len() {
            self.fail(format!(
                "run returned {} outputs, the signature declares {}",
                outs.len(),
                self.outputs.len()
            ));
        }
        outs
    }
}

impl ExecutableGraph for PluginGraph {
    fn capabilities(&self) -> rlx_runtime::ExecutableCapabilities {
        rlx_runtime::ExecutableCapabilities {
            typed_io: true,
            ..rlx_runtime::ExecutableCapabilities::NONE
        }
    }

    fn set_param(&mut self, name: &str, data: &[f32]) {
        // Lent as it is: the plugin makes the one copy it keeps.
        self.bind(name, convert::f32_le_bytes(data), rlx_ir::DType::F32);
    }

    fn set_param_typed(&mut self, name: &str, data: &[u8], dtype: rlx_ir::DType) {
        self.bind(name, Cow::Borrowed(data), dtype);
    }

    fn run(&mut self, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
        let owned = inputs
            .iter()
            .map(|(n, v)| (*n, convert::f32_le_bytes(v), rlx_ir::DType::F32))
            .collect();
        // Each output is converted straight from the plugin's buffer: one
        // copy (the plugin lends MLX's own on the CPU).
        self.run_bytes(owned, |t| convert::bytes_to_f32(t.dtype, &t.compact_cow()?))
    }

    fn run_typed(
        &mut self,
        inputs: &[(&str, &[u8], rlx_ir::DType)],
    ) -> Vec<(Vec<u8>, rlx_ir::DType)> {
        let borrowed = inputs
            .iter()
            .map(|(n, b, d)| (*n, Cow::Borrowed(*b), *d))
            .collect();
        self.run_bytes(borrowed, |t| Ok((t.to_compact_bytes()?, ir_dtype(t.dtype))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legalize_panics_become_counts_per_kind() {
        let msg = "rlx-opt: backend \"mlx\" doesn't claim support for 3 op kind(s):\n  - node NodeId(4): Gather\n  - node NodeId(7): RmsNorm\n  - node NodeId(9): RmsNorm\n  Backend::supported_ops() must include each kind, or rewrite the graph upstream to remove them.";
        assert_eq!(
            summarize_legalize_error(msg).unwrap(),
            "3 node(s) of op kinds the plugin does not claim: Gather x1, RmsNorm x2"
        );
        assert_eq!(summarize_legalize_error("something else"), None);
    }

    #[test]
    fn dtypes_map_both_ways() {
        for d in DType::ALL {
            assert_eq!(abi_dtype(ir_dtype(d)), Some(d));
        }
        assert_eq!(abi_dtype(rlx_ir::DType::C128), None);
    }

    #[test]
    fn every_device_has_a_factory() {
        for d in Device::all() {
            let _ = factory_for(*d);
        }
    }
}
