//! What a plugin author implements, in plain Rust. `export_plugin!` turns
//! an implementation into the C ABI (see `export.rs`).

use crate::custom_ops::CustomOpRegistry;
use crate::error::PluginError;
use crate::error::PluginResult;
use crate::state::{Feed, RowFeed};
use crate::tensor::{DType, Dims, HostTensor, OwnedTensor, TensorRef};
use std::sync::Arc;

/// Who the plugin is (published once, at load).
#[derive(Clone, Debug, Default)]
pub struct Descriptor {
    /// Unique name (`"mlx"`).
    pub name: String,
    /// The plugin's own semver version.
    pub version: String,
    pub description: String,
    pub devices: Vec<String>,
    /// Free-form facts such as `("mlx.version", "0.32.4")`.
    pub build_info: Vec<(String, String)>,
    /// The `.rlxmodel` opsets the plugin reads.
    pub opsets: Vec<u32>,
    /// The devices it can run on now, the default first. Empty when the
    /// plugin's descriptor lists none.
    pub device_infos: Vec<DeviceInfo>,
}

/// A kind of device (see `tables::device_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

impl DeviceKind {
    pub fn to_raw(self) -> u32 {
        match self {
            DeviceKind::Cpu => crate::tables::device_kind::CPU,
            DeviceKind::Gpu => crate::tables::device_kind::GPU,
        }
    }
    /// None for `DEFAULT` and for kinds this build does not know.
    pub fn from_raw(raw: u32) -> Option<DeviceKind> {
        match raw {
            crate::tables::device_kind::CPU => Some(DeviceKind::Cpu),
            crate::tables::device_kind::GPU => Some(DeviceKind::Gpu),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
        }
    }
    /// `cpu` or `gpu`.
    pub fn parse(s: &str) -> Option<DeviceKind> {
        [DeviceKind::Cpu, DeviceKind::Gpu]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// One device a plugin can run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub kind: DeviceKind,
    /// Index among devices of its kind.
    pub ordinal: u32,
    /// For people (`"NVIDIA H200"`).
    pub name: String,
    /// Total memory in bytes; 0 when unknown.
    pub memory_bytes: u64,
}

impl DeviceInfo {
    /// `gpu:0`, `cpu:0`: how a device is named on command lines and in
    /// messages.
    pub fn label(&self) -> String {
        format!("{}:{}", self.kind.name(), self.ordinal)
    }
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.label(), self.name)?;
        if self.memory_bytes > 0 {
            write!(
                f,
                ", {:.1} GiB",
                self.memory_bytes as f64 / (1u64 << 30) as f64
            )?;
        }
        Ok(())
    }
}

/// Parse `gpu`, `gpu:1`, `cpu`: a device as a user names it.
pub fn parse_device(s: &str) -> Option<(DeviceKind, u32)> {
    let (kind, ordinal) = match s.split_once(':') {
        Some((k, o)) => (k, o.parse().ok()?),
        None => (s, 0),
    };
    Some((DeviceKind::parse(kind)?, ordinal))
}

/// How a lowering computes its op (see `tables::strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Native,
    Composite,
    HostEvaluated,
}

impl Strategy {
    pub fn to_raw(self) -> u32 {
        match self {
            Strategy::Native => crate::tables::strategy::NATIVE,
            Strategy::Composite => crate::tables::strategy::COMPOSITE,
            Strategy::HostEvaluated => crate::tables::strategy::HOST_EVALUATED,
        }
    }
    pub fn from_raw(raw: u32) -> Option<Strategy> {
        [
            Strategy::Native,
            Strategy::Composite,
            Strategy::HostEvaluated,
        ]
        .into_iter()
        .find(|s| s.to_raw() == raw)
    }
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Native => "native",
            Strategy::Composite => "composite",
            Strategy::HostEvaluated => "host-evaluated",
        }
    }
}

/// Eager execution of one op: the `.rlxmodel` text of a graph holding just
/// that op, and its inputs in order.
pub type ExecuteOp =
    Arc<dyn Fn(&str, &[HostTensor]) -> PluginResult<Vec<HostTensor>> + Send + Sync>;

/// One row of the lowering table.
#[derive(Clone)]
pub struct LoweringEntry {
    /// The rlx-ir op-kind name.
    pub op_kind: String,
    pub dtypes: Vec<DType>,
    pub strategy: Strategy,
    pub note: String,
    /// None for entries that cannot run alone (graph inputs, params).
    pub execute: Option<ExecuteOp>,
}

/// Execution modes (see `tables::mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Lazy,
    Eager,
    Compiled,
}

impl Mode {
    pub fn to_raw(self) -> u32 {
        match self {
            Mode::Lazy => crate::tables::mode::LAZY,
            Mode::Eager => crate::tables::mode::EAGER,
            Mode::Compiled => crate::tables::mode::COMPILED,
        }
    }
    pub fn from_raw(raw: u32) -> Option<Mode> {
        [Mode::Lazy, Mode::Eager, Mode::Compiled]
            .into_iter()
            .find(|m| m.to_raw() == raw)
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::Lazy => "lazy",
            Mode::Eager => "eager",
            Mode::Compiled => "compiled",
        }
    }
    pub fn from_name(s: &str) -> Option<Mode> {
        [Mode::Lazy, Mode::Eager, Mode::Compiled]
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
    }
}

/// What `compile` is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    pub mode: Mode,
    /// One of `tables::rng_policy` (rlx-ir's `RngBackend` by number).
    pub rng_policy: u32,
    /// The global RNG seed (rlx's `RngOptions::seed`).
    pub rng_seed: u64,
    /// The device to compile for (kind, ordinal); None = the plugin's default
    /// device.
    pub device: Option<(DeviceKind, u32)>,
    /// The most bytes any one tensor may take, set by the host; None = the
    /// plugin's own limit.
    pub memory_limit: Option<u64>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            mode: Mode::default(),
            rng_policy: crate::tables::rng_policy::PHILOX,
            rng_seed: crate::tables::DEFAULT_RNG_SEED,
            device: None,
            memory_limit: None,
        }
    }
}

impl CompileOptions {
    pub fn mode(mode: Mode) -> Self {
        CompileOptions {
            mode,
            ..Default::default()
        }
    }

    pub fn to_raw(self) -> crate::tables::RlxCompileOptions {
        crate::tables::RlxCompileOptions {
            mode: self.mode.to_raw(),
            rng_policy: self.rng_policy,
            rng_seed: self.rng_seed,
            device_kind: self
                .device
                .map_or(crate::tables::device_kind::DEFAULT, |(k, _)| k.to_raw()),
            device_ordinal: self.device.map_or(0, |(_, o)| o),
            memory_limit_bytes: self.memory_limit.unwrap_or(0),
            ..Default::default()
        }
    }
}

/// The role of a value in an executable's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Input,
    Param,
    Output,
    /// A state tensor, in `Executable::state_list` only.
    State,
}

impl Role {
    /// The ABI number (`tables::role`).
    pub fn to_raw(self) -> u32 {
        use crate::tables::role;
        match self {
            Role::Input => role::INPUT,
            Role::Param => role::PARAM,
            Role::Output => role::OUTPUT,
            Role::State => role::STATE,
        }
    }
}

/// One input, param or output of an executable. A size of `None` is known
/// only at run time.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueInfo {
    pub role: Role,
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<Option<usize>>,
}

/// A param's bytes as the executable receives them.
pub enum ParamBytes {
    /// The plugin's own copy.
    Copied(Vec<u8>),
    /// The host's memory, guaranteed by the host to outlive the executable
    /// (`BORROWED_PERSISTENT`): use without copying.
    Persistent(&'static [u8]),
    /// An owned descriptor moved to the plugin; released on drop.
    Owned {
        bytes: &'static [u8],
        raw: crate::tensor::RlxTensor,
    },
}

/// A param handed to [`Executable::bind_param`]: compact row-major bytes.
pub struct BoundParam {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: ParamBytes,
}

impl BoundParam {
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            ParamBytes::Copied(v) => v,
            ParamBytes::Persistent(b) => b,
            ParamBytes::Owned { bytes, .. } => bytes,
        }
    }
    /// True when the bytes are the host's own memory (no copy was made).
    pub fn is_zero_copy(&self) -> bool {
        !matches!(self.bytes, ParamBytes::Copied(_))
    }
}

impl Drop for BoundParam {
    fn drop(&mut self) {
        if let ParamBytes::Owned { raw, .. } = &self.bytes {
            // SAFETY: ownership of `raw` moved to us in bind_param.
            unsafe { crate::tensor::release(*raw) };
        }
    }
}

// SAFETY: a persistent param's memory is the host's promise to keep valid and unmodified while bound.
unsafe impl Send for BoundParam {}

/// A compiled graph.
pub trait Executable: Send {
    /// Inputs, then params, then outputs.
    fn signature(&self) -> Vec<ValueInfo>;
    fn bind_param(&mut self, name: &str, param: BoundParam) -> PluginResult<()>;
    /// Bind a param the host lends for this call only (`BORROWED`, or a
    /// strided view): the default copies it into a [`BoundParam`] first; a
    /// plugin that copies what it keeps anyway overrides this to read the
    /// host's bytes in place, so the param is copied once, not twice.
    fn bind_param_lent(&mut self, name: &str, param: TensorRef<'_>) -> PluginResult<()> {
        let bytes = ParamBytes::Copied(param.to_compact_bytes()?);
        self.bind_param(
            name,
            BoundParam {
                dtype: param.dtype,
                shape: param.shape.to_vec(),
                bytes,
            },
        )
    }
    /// Run with named inputs; returns one tensor per output.
    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<Vec<HostTensor>>;
    /// As [`Executable::run`], with outputs handed over as descriptors: a
    /// plugin whose results already sit in memory it can lend (until the
    /// receiver releases them) overrides this to skip a copy.
    fn run_owned(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<Vec<OwnedTensor>> {
        Ok(self
            .run(inputs)?
            .into_iter()
            .map(OwnedTensor::from_host)
            .collect())
    }
    /// Run, writing each output whose slot lends memory ([`OutputSlot::Into`])
    /// there and handing the others back in their slots
    /// ([`OutputSlot::Owned`]). `slots` has one entry per output. The default
    /// runs [`Executable::run_owned`] and copies; a plugin whose results must
    /// be copied to the host anyway (from a GPU) overrides it to make that one
    /// copy straight into the caller's memory.
    fn run_into(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        slots: &mut [OutputSlot<'_>],
    ) -> PluginResult<()> {
        let outs = self.run_owned(inputs)?;
        if outs.len() != slots.len() {
            return Err(PluginError::internal(format!(
                "the run made {} outputs for {} slots",
                outs.len(),
                slots.len()
            )));
        }
        for (i, (out, slot)) in outs.into_iter().zip(slots.iter_mut()).enumerate() {
            slot.put(i, out)?;
        }
        Ok(())
    }
    /// The device it runs on; None if the plugin does not say.
    fn device(&self) -> Option<DeviceInfo> {
        None
    }

    // ---- what a plugin offers in its [`Offers`]; the defaults refuse, and are
    // never called for a part the plugin does not offer.

    /// Hold `value` (checked here against the input `name`'s dtype and
    /// shape) as the state `name`: runs read that input from it.
    fn state_bind(&mut self, name: &str, value: TensorRef<'_>) -> PluginResult<()> {
        let _ = (name, value);
        Err(not_offered("state"))
    }
    /// Hold as the state `name` the value `value` of `src` (its state of that
    /// name, else its last run's output of that name; `None`: this
    /// executable's), with the input `name`'s dtype and shape, without copying
    /// it. With `name` and `value` empty: every state of `src`, each under its
    /// own name with its feed, all or nothing.
    fn state_bind_from(
        &mut self,
        name: &str,
        src: Option<&dyn Executable>,
        value: &str,
    ) -> PluginResult<()> {
        let _ = (name, src, value);
        Err(not_offered("states bound from another executable"))
    }
    /// Forget the state `name` and its feed (`NOT_FOUND` if none).
    fn state_unbind(&mut self, name: &str) -> PluginResult<()> {
        let _ = name;
        Err(not_offered("state"))
    }
    /// Copy elements `first ..` of the state `name` into `into`, whose
    /// `dtype` must be the state's and whose length says how many.
    fn state_read(&mut self, name: &str, first: usize, into: StateBuf<'_>) -> PluginResult<()> {
        let _ = (name, first, into);
        Err(not_offered("state"))
    }
    /// Every state, role [`Role::State`], in name order.
    fn state_list(&self) -> Vec<ValueInfo> {
        Vec::new()
    }
    /// How the state `name` follows the runs.
    fn state_set_feed(&mut self, name: &str, feed: Feed) -> PluginResult<()> {
        let _ = (name, feed);
        Err(not_offered("state"))
    }
    /// Copy `rows` from the last run's outputs into every state fed
    /// [`Feed::Rows`] (or only `name`).
    fn state_feed_rows(&mut self, name: Option<&str>, rows: &RowFeed) -> PluginResult<()> {
        let _ = (name, rows);
        Err(not_offered("row feeds"))
    }
    /// Copy elements `first ..` of output `output` of the last run into
    /// `into`, whose `dtype` must be the output's.
    fn output_read(&mut self, output: usize, first: usize, into: StateBuf<'_>) -> PluginResult<()> {
        let _ = (output, first, into);
        Err(not_offered("output reads"))
    }
    /// A new executable sharing this one's program and params, with a copy
    /// of its state and feeds and nothing submitted.
    fn clone_executable(&self) -> PluginResult<Box<dyn Executable>> {
        Err(not_offered("clones"))
    }
    /// Take `src`'s params (same plugin, same device; every param of this
    /// executable bound there with the same dtype and shape): how many.
    fn share_params_from(&mut self, src: &dyn Executable) -> PluginResult<usize> {
        let _ = src;
        Err(not_offered("shared params"))
    }
    /// This executable as `Any`, so that [`Executable::share_params_from`]
    /// can find its own type behind `src`.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
    /// Start a run and return without waiting for it.
    fn submit(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<()> {
        let _ = inputs;
        Err(not_offered("submitted runs"))
    }
    /// Wait for the oldest submitted run and hand its outputs over into
    /// `slots` (one per output), or drop them when `slots` is empty.
    fn wait(&mut self, slots: &mut [OutputSlot<'_>]) -> PluginResult<()> {
        let _ = slots;
        Err(not_offered("submitted runs"))
    }
    /// Overwrite bytes `byte_offset ..` of the bound param `name`.
    fn bind_param_range(
        &mut self,
        name: &str,
        byte_offset: usize,
        data: &[u8],
    ) -> PluginResult<()> {
        let _ = (name, byte_offset, data);
        Err(not_offered("param ranges"))
    }
    /// The RNG policy (`tables::rng_policy`) and seed from the next run on.
    fn set_rng(&mut self, policy: u32, seed: u64) -> PluginResult<()> {
        let _ = (policy, seed);
        Err(not_offered("RNG changes"))
    }
    /// `Some((active, upper))`: compute only `active` of `upper` rows along
    /// axis 0 where the graph allows it; `None` clears.
    fn set_active_extent(&mut self, extent: Option<(usize, usize)>) -> PluginResult<()> {
        let _ = extent;
        Err(not_offered("active extents"))
    }
}

fn not_offered(what: &str) -> PluginError {
    PluginError::unsupported(format!("this plugin offers no {what}"))
}

/// Memory a caller lends for [`Executable::state_read`]: room for
/// `bytes.len() / dtype.size_bytes()` elements of `dtype`.
#[derive(Debug)]
pub struct StateBuf<'a> {
    pub dtype: DType,
    pub bytes: &'a mut [u8],
}

impl StateBuf<'_> {
    /// How many elements the buffer holds.
    pub fn elems(&self) -> usize {
        self.bytes.len() / self.dtype.size_bytes().max(1)
    }
}

/// The parts of the ABI beyond compile and run that a plugin offers: the glue
/// publishes exactly these (the others stay null), so a host knows before it
/// asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offers {
    /// State: bind, unbind, read, list, set_feed, and reads of the last
    /// run's outputs.
    pub state: bool,
    /// State row feeds (`feed_rows`); needs `state`.
    pub row_feeds: bool,
    /// States bound from another executable's value (`bind_from`); needs
    /// `state`.
    pub state_from: bool,
    pub clone: bool,
    pub share_params: bool,
    /// Submit and wait.
    pub submit: bool,
    pub param_range: bool,
    pub set_rng: bool,
    pub active_extent: bool,
    /// The plugin's memory figures ([`Plugin::memory_usage`]).
    pub memory_usage: bool,
    /// Host memory mapped for transfers ([`Plugin::dma_map`]).
    pub dma_map: bool,
}

/// What a plugin's tensors hold, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    pub active_bytes: u64,
    pub peak_bytes: u64,
    pub cached_bytes: u64,
}

/// Memory a caller lends for one output of [`Executable::run_into`]: room for
/// exactly the compact row-major bytes of `dtype` and `shape`.
#[derive(Debug)]
pub struct OutputBuf<'a> {
    pub dtype: DType,
    pub shape: Dims<usize>,
    pub bytes: &'a mut [u8],
}

impl OutputBuf<'_> {
    /// Whether output `i`, made as `dtype` and `shape`, is what this buffer
    /// was lent for: the caller sized it from the signature, so a run whose
    /// output came out otherwise (a size known only at run time) is refused
    /// rather than written short or past the end.
    pub fn check(&self, i: usize, dtype: DType, shape: &[usize]) -> PluginResult<()> {
        if dtype != self.dtype || shape != self.shape.as_slice() {
            return Err(PluginError::invalid_argument(format!(
                "output {i} is {dtype}{shape:?}, but the caller's buffer for it is {}{:?};                  leave its slot's data null to receive it as an owned tensor",
                self.dtype, self.shape
            )));
        }
        Ok(())
    }

    /// Copy output `i`, viewed as `t`, into this buffer.
    pub fn fill_from(&mut self, i: usize, t: &TensorRef<'_>) -> PluginResult<()> {
        self.check(i, t.dtype, &t.shape)?;
        self.bytes.copy_from_slice(&t.compact_cow()?);
        Ok(())
    }
}

/// Where [`Executable::run_into`] puts one output.
#[derive(Debug)]
pub enum OutputSlot<'a> {
    /// Written into the caller's memory.
    Into(OutputBuf<'a>),
    /// Handed back as an owned tensor; `None` until the run fills it.
    Owned(Option<OwnedTensor>),
    /// Not wanted: nothing is written or copied for it.
    Skip,
}

impl OutputSlot<'_> {
    /// Put output `i`, made as an owned tensor, in this slot: copied into
    /// the caller's buffer (and released), or kept to hand back.
    pub fn put(&mut self, i: usize, out: OwnedTensor) -> PluginResult<()> {
        match self {
            OutputSlot::Into(buf) => buf.fill_from(i, &out.view()?),
            OutputSlot::Owned(slot) => {
                *slot = Some(out);
                Ok(())
            }
            OutputSlot::Skip => Ok(()),
        }
    }
}

/// A backend plugin.
pub trait Plugin: Send + Sync + 'static {
    fn descriptor(&self) -> Descriptor;
    /// Asked once, at the handshake: an error refuses the host with its
    /// code and message (a plugin that cannot serve on this machine, such
    /// as a GPU build without a GPU, says why instead of loading).
    fn availability(&self) -> PluginResult<()> {
        Ok(())
    }
    /// Registration: return the lowering table (the supported-op list is
    /// derived from it) and register any custom ops the plugin provides.
    /// The registry lives for the rest of the process: a plugin may keep
    /// it to resolve `Custom` nodes at compile (and give it services for
    /// composites and native ops, [`CustomOpRegistry::set_services`]).
    fn init(&self, custom_ops: &'static CustomOpRegistry) -> PluginResult<Vec<LoweringEntry>>;
    /// Compile `.rlxmodel` text.
    fn compile(&self, graph: &str, options: &CompileOptions) -> PluginResult<Box<dyn Executable>>;
    /// The parts beyond compile and run its executables offer.
    fn offers(&self) -> Offers {
        Offers::default()
    }
    /// What its tensors hold now (offered with [`Offers::memory_usage`]).
    fn memory_usage(&self) -> PluginResult<MemoryUsage> {
        Err(not_offered("memory figures"))
    }
    /// Map the `len` bytes at `data` for the plugin's copies until
    /// [`Plugin::dma_unmap`] (offered with [`Offers::dma_map`]). The glue has
    /// checked that `data` is not null and `len` not 0; the plugin refuses a
    /// range that overlaps a mapped one.
    fn dma_map(&self, data: *mut u8, len: usize) -> PluginResult<()> {
        let _ = (data, len);
        Err(not_offered("host memory mapping"))
    }
    /// Undo [`Plugin::dma_map`] of the range starting at `data`: `NOT_FOUND`
    /// when none starts there.
    fn dma_unmap(&self, data: *mut u8) -> PluginResult<()> {
        let _ = data;
        Err(not_offered("host memory mapping"))
    }
    /// The graph forms the plugin reads besides `.rlxmodel` text (docs/ABI.md
    /// §24 names them), published once at the handshake.
    fn graph_forms(&self) -> Vec<String> {
        Vec::new()
    }
    /// Compile `graph`, bytes in `form` (one of [`Plugin::graph_forms`]; the
    /// glue has checked that it is listed).
    fn compile_form(
        &self,
        form: &str,
        graph: &[u8],
        options: &CompileOptions,
    ) -> PluginResult<Box<dyn Executable>> {
        let _ = (graph, options);
        Err(PluginError::unsupported(format!(
            "the plugin reads no graph form {form:?}"
        )))
    }
}
