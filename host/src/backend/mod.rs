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
//!    adjustment: the weight-concat fusions are off, so that matmuls read
//!    their weights in place (see [`Pipeline::options`]);
//! 2. the resulting graph goes through the post-fusion steps the built-in
//!    backends use (control-flow pipeline, skipped for the loops and
//!    conditionals the plugin claims, backward-op decomposition, the
//!    backend rewrite/legalize probe, cleanup);
//! 3. it is checked once more against the claim set (so an op the plugin
//!    does not claim is reported here, counted per kind), and compiled by the
//!    plugin, sent in rlx-ir's own serialisation where the plugin reads this
//!    host's release's (a graph form), else as `.rlxmodel` text
//!    (`LoadedPlugin::compile_graph`);
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
use rlx_ir::{Graph, OpKind};
use rlx_plugin_api::{DeviceKind, Mode};
use rlx_plugin_loader::LoadedPlugin;
use rlx_runtime::{Backend, CompileOptions, Device};
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
    /// The per-tensor limit its compiles send; None = the plugin's own.
    memory_limit: Option<u64>,
    /// Whether its executables keep state ([`set_resident`]).
    resident: bool,
    /// The plugin device its compiles ask for; None = the plugin's default
    /// ([`set_plugin_device`]).
    plugin_device: Option<(DeviceKind, u32)>,
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

pub use crate::abi_names::op_kind;

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
                resident: true,
                plugin_device: None,
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

/// Set the per-tensor memory limit later compiles on `device` send to the
/// plugin (`memory_limit_bytes`; None = the plugin's own limit). A graph with a
/// larger tensor then fails to compile, naming it. Returns false when no plugin
/// is registered for the device.
pub fn set_memory_limit(device: Device, limit: Option<u64>) -> bool {
    update_registration(device, |r| r.memory_limit = limit)
}

/// Whether executables compiled later on `device` keep state on the plugin's
/// device (rlx-runtime's persistent and GPU handles and KV row feeds) when the
/// plugin offers it, the default. Off, they report no handles, and
/// rlx-runtime's trainer and model API take their host paths: the same results,
/// with every parameter, moment and cache copied across each step (to measure
/// what residency saves, or rule it out). False when no plugin is registered
/// for `device`.
pub fn set_resident(device: Device, resident: bool) -> bool {
    update_registration(device, |r| r.resident = resident)
}

/// Which of the plugin's devices later compiles on `device` ask for (a compile
/// option; `(Gpu, 1)` is `gpu:1`), or None for the plugin's default (its first
/// GPU where it has one). A device the plugin lacks makes those compiles fail,
/// naming the devices it has. False when no plugin is registered for `device`.
pub fn set_plugin_device(device: Device, plugin_device: Option<(DeviceKind, u32)>) -> bool {
    update_registration(device, |r| r.plugin_device = plugin_device)
}

/// The plugin device set with [`set_plugin_device`] for `device`.
pub fn plugin_device(device: Device) -> Option<(DeviceKind, u32)> {
    registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&device)
        .and_then(|r| r.plugin_device)
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

pub mod compile_cache;
mod direct;
mod executable_graph;
mod graph;
mod handles;
mod observe;
mod outputs;
mod pipeline;
mod plugin_backend;
mod submitted;

pub use direct::compile_on_plugin;
pub use graph::*;
pub use handles::{state_counters, StateCounters};
pub use observe::{set_compile_observer, CompileObserver};
pub use pipeline::*;
use plugin_backend::*;

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_plugin_api::DType;

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
