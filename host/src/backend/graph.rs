//! A plugin executable as rlx-runtime's `ExecutableGraph`: buffers
//! converted to and from the dtypes its signature declares.

use super::outputs::Plan;
use rlx_plugin_api::tensor::Dims;
use rlx_plugin_api::{DType, HostTensorRef, Role, TensorRef, ValueInfo};
use rlx_plugin_loader::PluginExecutable;
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::HashMap;

// ---- dtypes ----

pub use crate::abi_names::{abi_dtype, ir_dtype};

// ---- the executable ----

/// `info`'s shape with at most one run-time size filled in from `n`
/// elements, or why `n` does not fit it.
pub(super) fn shape_for(kind: &str, info: &ValueInfo, n: usize) -> Result<Dims<usize>, String> {
    let known: usize = info.shape.iter().flatten().product();
    let unknown = info.shape.iter().filter(|d| d.is_none()).count();
    match unknown {
        0 if known == n => Ok(info.shape.iter().map(|d| d.unwrap()).collect()),
        1 if known > 0 && n.is_multiple_of(known) => {
            Ok(info.shape.iter().map(|d| d.unwrap_or(n / known)).collect())
        }
        _ => {
            let dims: Vec<String> = info
                .shape
                .iter()
                .map(|d| d.map_or("?".into(), |d| d.to_string()))
                .collect();
            Err(format!(
                "{kind} {:?} is {}[{}] but {n} elements were given",
                info.name,
                info.dtype,
                dims.join(", ")
            ))
        }
    }
}

/// A plugin executable as an rlx-runtime [`rlx_runtime::ExecutableGraph`].
pub struct PluginGraph {
    pub(super) exe: PluginExecutable,
    pub(super) plugin: String,
    /// By position; a run looks each name up (a graph has few inputs,
    /// and a scan costs less than hashing the name).
    pub(super) inputs: Vec<ValueInfo>,
    pub(super) params: HashMap<String, ValueInfo>,
    pub(super) outputs: Vec<ValueInfo>,
    /// Whether runs lend the plugin the output buffers. Not on a CPU device:
    /// there the plugin hands over its own buffer for the host's one copy, so
    /// lending saves no copy and costs the checks.
    pub(super) lend_outputs: bool,
    /// What the plugin offers beyond compile and run: the capabilities this
    /// executable reports, and the methods that work.
    pub(super) offers: rlx_plugin_api::Offers,
    /// The inputs held as state (rlx-runtime's GPU handles), by name, with
    /// their dtype and element count, and those fed rows (its KV row feeds).
    pub(super) held: std::collections::BTreeMap<String, (DType, usize)>,
    pub(super) row_fed: std::collections::BTreeSet<String>,
    /// Runs submitted and not waited for.
    pub(super) pending: usize,
    /// The RNG policy the executable runs with (rlx-runtime's `rng()`).
    pub(super) rng: rlx_ir::RngOptions,
    /// Params that already hold their values because they are shared
    /// with another executable (`share_params_from`).
    pub(super) shared_params: bool,
    /// Whether it came from the compile cache: a graph compiled before,
    /// cloned instead of compiled again (`compile_cache.rs`).
    pub(super) reused: bool,
}

impl PluginGraph {
    pub fn new(exe: PluginExecutable, plugin: String) -> PluginGraph {
        let by_role = |r: Role| -> HashMap<String, ValueInfo> {
            exe.values(r).map(|v| (v.name.clone(), v.clone())).collect()
        };
        let inputs = exe.values(Role::Input).cloned().collect();
        let params = by_role(Role::Param);
        let outputs = exe.values(Role::Output).cloned().collect();
        let lend_outputs = exe
            .device()
            .is_none_or(|d| d.kind != rlx_plugin_api::DeviceKind::Cpu);
        let offers = exe.plugin().offers();
        PluginGraph {
            exe,
            plugin,
            inputs,
            params,
            outputs,
            lend_outputs,
            offers,
            held: Default::default(),
            row_fed: Default::default(),
            pending: 0,
            rng: rlx_ir::RngOptions::default(),
            shared_params: false,
            reused: false,
        }
    }

    /// Whether this executable is a graph compiled before, cloned from the
    /// compile cache rather than compiled again.
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// A clone: the compiled program and bound params shared, the state copied.
    /// Fails when the plugin cannot clone.
    pub(super) fn clone_graph(&self) -> Result<PluginGraph, String> {
        if !self.offers.clone {
            return Err(format!(
                "{} plugin cannot clone executables (no ABI 1.9 clones)",
                self.plugin
            ));
        }
        let exe = self
            .exe
            .clone_executable()
            .map_err(|e| format!("{} plugin: clone: {e}", self.plugin))?;
        Ok(PluginGraph {
            exe,
            plugin: self.plugin.clone(),
            inputs: self.inputs.clone(),
            params: self.params.clone(),
            outputs: self.outputs.clone(),
            lend_outputs: self.lend_outputs,
            offers: self.offers,
            held: self.held.clone(),
            row_fed: self.row_fed.clone(),
            pending: 0,
            rng: self.rng,
            shared_params: self.shared_params,
            reused: self.reused,
        })
    }

    /// A clone of an executable that has nothing bound (the compile
    /// cache's templates): what a compile of its graph would return.
    pub(super) fn pristine_clone(&self) -> Result<PluginGraph, String> {
        debug_assert!(self.held.is_empty(), "a template holds no state");
        let mut g = self.clone_graph()?;
        g.reused = false;
        Ok(g)
    }

    /// Whether it keeps state when the plugin offers it: off, it reports no
    /// handles and refuses them, so rlx-runtime's callers take their host paths
    /// ([`super::set_resident`]).
    pub fn with_state(mut self, on: bool) -> PluginGraph {
        if !on {
            self.offers.state = false;
            self.offers.row_feeds = false;
        }
        self
    }

    /// The RNG policy it was compiled with (what `rng()` reports until
    /// `set_rng`).
    pub fn with_rng(mut self, rng: rlx_ir::RngOptions) -> PluginGraph {
        self.rng = rng;
        self
    }

    /// Lend the plugin the output buffers or not, whatever the device: the
    /// default lends them off the CPU only. For tests and measurements of
    /// either path.
    pub fn with_lent_outputs(mut self, lend: bool) -> PluginGraph {
        self.lend_outputs = lend;
        self
    }

    /// The executable's signature (inputs, params, outputs).
    pub fn signature(&self) -> &[ValueInfo] {
        self.exe.signature()
    }

    /// What the plugin's tensors hold now, process-wide (its
    /// `memory_usage`), where it gives the figures.
    pub fn memory_usage(&self) -> Option<rlx_plugin_api::MemoryUsage> {
        self.exe.plugin().memory_usage().ok()
    }

    pub(super) fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!("{} plugin: {msg}", self.plugin)
    }

    /// `info`'s concrete shape and the bytes in its dtype: `data` itself
    /// (borrowed stays borrowed) when `have` is that dtype, else converted
    /// through f32.
    pub(super) fn converted<'d>(
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
    pub(super) fn concrete_shape(&self, kind: &str, info: &ValueInfo, n: usize) -> Dims<usize> {
        shape_for(kind, info, n).unwrap_or_else(|e| self.fail(e))
    }

    pub(super) fn bind(&mut self, name: &str, data: Cow<'_, [u8]>, have: rlx_ir::DType) {
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

    /// Run with each output `want`ed: written by the plugin into a `Vec` lent
    /// for it where `elems` sizes it (in `T`s: only an output whose signature
    /// fixes every size) and outputs are lent, made a result by `filled`; else
    /// read with `read`. An output not wanted is skipped (not copied off the
    /// device) and its place is `None`.
    pub(super) fn run_to<T, U>(
        &mut self,
        inputs: Vec<(&str, Cow<'_, [u8]>, rlx_ir::DType)>,
        want: impl Fn(usize) -> bool,
        elems: impl Fn(&ValueInfo) -> Option<usize>,
        read: impl FnMut(&TensorRef<'_>) -> rlx_plugin_api::PluginResult<U>,
        filled: impl FnMut(usize, Vec<T>) -> U,
    ) -> Vec<Option<U>> {
        let plan = Plan::<T>::new(&self.outputs, want, self.lend_outputs, elems);
        // SAFETY: each lent buffer is the spare capacity of a `Vec` the
        // plan made for this run, of its length, aliased by nothing.
        let outs = self.run_bytes(inputs, |exe, named| unsafe {
            exe.run_refs_dest_raw(named, plan.dests(), read)
        });
        // SAFETY: the plan's rooms were lent to this run, which succeeded
        // (a failed one does not return).
        unsafe { plan.finish(outs, filled) }
    }

    /// Run with `inputs` (converted to the dtypes the plugin wants where
    /// they differ) through `call`, the run the caller chose (outputs read
    /// in place, or written into lent buffers): one result per output.
    pub(super) fn run_bytes<U>(
        &mut self,
        inputs: Vec<(&str, Cow<'_, [u8]>, rlx_ir::DType)>,
        call: impl FnOnce(
            &mut PluginExecutable,
            &[(&str, HostTensorRef<'_>)],
        ) -> rlx_plugin_api::PluginResult<Vec<U>>,
    ) -> Vec<U> {
        let outs = self.with_inputs(inputs, call);
        if outs.len() != self.outputs.len() {
            self.fail(format!(
                "run returned {} outputs, the signature declares {}",
                outs.len(),
                self.outputs.len()
            ));
        }
        outs
    }

    /// `inputs` converted to the dtypes the plugin wants where they differ
    /// and handed to `call` (a run, a submission) with the executable. An
    /// input held as state may be left out; an unknown one is ignored.
    pub(super) fn with_inputs<R>(
        &mut self,
        inputs: Vec<(&str, Cow<'_, [u8]>, rlx_ir::DType)>,
        call: impl FnOnce(
            &mut PluginExecutable,
            &[(&str, HostTensorRef<'_>)],
        ) -> rlx_plugin_api::PluginResult<R>,
    ) -> R {
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
            .find(|k| !given.iter().any(|(n, ..)| n == k) && !self.held.contains_key(*k))
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
        call(&mut self.exe, &named).unwrap_or_else(|e| self.fail(e))
    }
}
