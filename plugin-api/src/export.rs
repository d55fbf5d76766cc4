//! The plugin side of the ABI: `export_plugin!` and the `extern "C"`
//! functions behind the root table. Each exported function is a few lines
//! that delegate to [`guard`], which turns errors and panics into statuses.

use crate::custom_ops::{CustomKernel, CustomOpInfo, CustomOpRegistry, Origin};
use crate::error::{panic_message, PluginError, PluginResult, RlxStatus, StatusCode};
use crate::plugin::{BoundParam, Descriptor, LoweringEntry, Mode, ParamBytes, Plugin, Role};
use crate::strings::{leak_str, RlxStr};
use crate::tables::*;
use crate::tensor::{
    ownership, DType, HostTensor, RlxDataType, RlxNamedTensor, RlxTensor, TensorRef,
};
use crate::version::{check_compatible, RlxAbiVersion, ABI_VERSION};
use abi_stable::StableAbi;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

/// Write the plugin's entry symbol. `$make` is an expression that builds
/// the plugin (a value implementing [`Plugin`]); it runs once, at the first
/// handshake that passes the version check.
#[macro_export]
macro_rules! export_plugin {
    ($make:expr) => {
        $crate::export_plugin!($make, $crate::export::EntryOptions::default());
    };
    ($make:expr, $opts:expr) => {
        /// The plugin's entry symbol (written by `export_plugin!`).
        ///
        /// # Safety
        /// Called by an RLX host with a valid host table, per docs/ABI.md.
        #[no_mangle]
        pub unsafe extern "C" fn rlx_plugin_entry(
            host: *const $crate::tables::RlxHostApi,
        ) -> *const $crate::tables::RlxPluginApi {
            $crate::export::entry(
                host,
                || ::std::boxed::Box::new($make) as ::std::boxed::Box<dyn $crate::Plugin>,
                $opts,
            )
        }
    };
}

/// How the generated entry presents itself. The default is this build's
/// true ABI; the other knobs exist so the test suite can build plugins that
/// look like other builds (older or newer minors, other majors, another
/// layout) with the real glue.
#[derive(Clone, Copy)]
pub struct EntryOptions {
    pub abi_version: RlxAbiVersion,
    /// Declare this `struct_size` for the root table instead of the real one.
    pub struct_size: Option<usize>,
    /// Append this many extra (zero) bytes after the root table and count
    /// them in `struct_size`, as a newer minor with more fields would.
    pub extra_tail_bytes: usize,
    /// Publish this layout instead of the true one.
    pub rust_layout: Option<&'static abi_stable::type_layout::TypeLayout>,
    /// Store this address in `custom_ops` (to prove a host ignores fields
    /// beyond `struct_size`).
    pub custom_ops_override: Option<usize>,
}

impl Default for EntryOptions {
    fn default() -> Self {
        EntryOptions {
            abi_version: ABI_VERSION,
            struct_size: None,
            extra_tail_bytes: 0,
            rust_layout: None,
            custom_ops_override: None,
        }
    }
}

struct State {
    plugin: Box<dyn Plugin>,
    registry: CustomOpRegistry,
    tables: OnceLock<Tables>,
}

struct Tables {
    op_list: RlxOpList,
    lowering: RlxLoweringTable,
}

// The tables hold pointers to leaked, immutable data.
unsafe impl Send for Tables {}
unsafe impl Sync for Tables {}

static STATE: OnceLock<State> = OnceLock::new();
/// Address of the published root table (accepted or refused).
static ROOT: OnceLock<usize> = OnceLock::new();

/// The body of the generated entry symbol.
///
/// # Safety
/// `host` is null or points at a host table as docs/ABI.md defines it.
pub unsafe fn entry(
    host: *const RlxHostApi,
    make: impl FnOnce() -> Box<dyn Plugin>,
    opts: EntryOptions,
) -> *const RlxPluginApi {
    if let Some(root) = ROOT.get() {
        return *root as *const RlxPluginApi;
    }
    let root = match catch_unwind(AssertUnwindSafe(|| handshake(host, make, &opts))) {
        Ok(Ok(root)) => root,
        Ok(Err(e)) => refusal(opts.abi_version, e),
        Err(payload) => refusal(
            opts.abi_version,
            PluginError::new(
                StatusCode::Panic,
                format!("plugin entry panicked: {}", panic_message(&*payload)),
            ),
        ),
    };
    *ROOT.get_or_init(|| root as usize) as *const RlxPluginApi
}

fn refusal(version: RlxAbiVersion, e: PluginError) -> *const RlxPluginApi {
    let mut t = RlxPluginApi::blank(version);
    t.struct_size = PLUGIN_API_HEADER_SIZE;
    t.refusal_code = e.code as u32;
    t.refusal_message = leak_str(e.message);
    Box::leak(Box::new(t))
}

unsafe fn handshake(
    host: *const RlxHostApi,
    make: impl FnOnce() -> Box<dyn Plugin>,
    opts: &EntryOptions,
) -> PluginResult<*const RlxPluginApi> {
    let host = crate::log::read_host_table(host)?;
    check_compatible(host.abi_version, opts.abi_version)
        .map_err(|e| PluginError::new(StatusCode::VersionMismatch, e.to_string()))?;
    crate::log::install_plugin_logger(&host);

    let plugin = make();
    let desc = plugin.descriptor();
    let descriptor: &'static RlxPluginDescriptor = Box::leak(Box::new(raw_descriptor(&desc)));
    let _ = STATE.set(State {
        plugin,
        registry: CustomOpRegistry::new(),
        tables: OnceLock::new(),
    });

    let mut t = RlxPluginApi::blank(opts.abi_version);
    let layout: &'static abi_stable::type_layout::TypeLayout = opts
        .rust_layout
        .unwrap_or(<RlxPluginApi as StableAbi>::LAYOUT);
    t.rust_layout_tag = RlxStr::from_static(RUST_LAYOUT_TAG);
    t.rust_layout = layout as *const _ as *const c_void;
    t.descriptor = descriptor;
    t.status_new = Some(status_new);
    t.status_code = Some(status_code);
    t.status_message = Some(status_message);
    t.status_free = Some(status_free);
    t.init = Some(init);
    t.supported_ops = Some(supported_ops);
    t.lowering_table = Some(lowering_table);
    t.compile = Some(compile);
    t.executable_destroy = Some(executable_destroy);
    t.executable_signature = Some(executable_signature);
    t.executable_bind_param = Some(executable_bind_param);
    t.executable_run = Some(executable_run);
    t.custom_ops = match opts.custom_ops_override {
        Some(addr) => addr as *const RlxCustomOpApi,
        None => &CUSTOM_OP_API,
    };
    t.struct_size = opts
        .struct_size
        .unwrap_or(std::mem::size_of::<RlxPluginApi>())
        + opts.extra_tail_bytes;

    // A newer minor's table: the same prefix followed by fields this build
    // does not know, all zero.
    #[repr(C)]
    struct Extended {
        api: RlxPluginApi,
        tail: [u8; 256],
    }
    if opts.extra_tail_bytes > 256 {
        return Err(PluginError::internal("extra_tail_bytes is limited to 256"));
    }
    let ext: &'static Extended = Box::leak(Box::new(Extended {
        api: t,
        tail: [0; 256],
    }));
    Ok(&ext.api)
}

fn raw_descriptor(d: &Descriptor) -> RlxPluginDescriptor {
    let devices: &'static [RlxStr] =
        Box::leak(d.devices.iter().map(|s| leak_str(s.clone())).collect());
    let build_info: &'static [RlxKeyValue] = Box::leak(
        d.build_info
            .iter()
            .map(|(k, v)| RlxKeyValue {
                key: leak_str(k.clone()),
                value: leak_str(v.clone()),
            })
            .collect(),
    );
    let opsets: &'static [u32] = Box::leak(d.opsets.clone().into_boxed_slice());
    RlxPluginDescriptor {
        struct_size: std::mem::size_of::<RlxPluginDescriptor>(),
        name: leak_str(d.name.clone()),
        version: leak_str(d.version.clone()),
        description: leak_str(d.description.clone()),
        devices: devices.as_ptr(),
        n_devices: devices.len(),
        build_info: build_info.as_ptr(),
        n_build_info: build_info.len(),
        opsets: opsets.as_ptr(),
        n_opsets: opsets.len(),
    }
}

// ------------------------------------------------------------------ status

struct StatusBox {
    code: u32,
    message: String,
}

/// Turn an error into a status owned by the receiver (freed by `status_free`).
pub fn into_status(e: PluginError) -> *mut RlxStatus {
    Box::into_raw(Box::new(StatusBox {
        code: e.code as u32,
        message: e.message,
    })) as *mut RlxStatus
}

/// Take back a status this plugin made (null → Ok).
///
/// # Safety
/// `s` is null or came from this plugin's `status_new`, and is not used again.
pub unsafe fn take_status(s: *mut RlxStatus) -> PluginResult<()> {
    if s.is_null() {
        return Ok(());
    }
    let b = Box::from_raw(s as *mut StatusBox);
    Err(PluginError::new(StatusCode::from_raw(b.code), b.message))
}

/// Run `f`, turning an error or a panic into a status.
pub fn guard(f: impl FnOnce() -> PluginResult<()>) -> *mut RlxStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => into_status(e),
        Err(payload) => into_status(PluginError::new(
            StatusCode::Panic,
            format!("plugin panicked: {}", panic_message(&*payload)),
        )),
    }
}

unsafe extern "C" fn status_new(code: u32, message: RlxStr) -> *mut RlxStatus {
    let code = StatusCode::from_raw(code);
    let message = message.to_string_lossy();
    into_status(PluginError::new(code, message))
}

unsafe extern "C" fn status_code(s: *const RlxStatus) -> u32 {
    if s.is_null() {
        return 0;
    }
    (*(s as *const StatusBox)).code
}

unsafe extern "C" fn status_message(s: *const RlxStatus) -> RlxStr {
    if s.is_null() {
        return RlxStr::EMPTY;
    }
    RlxStr::from_str(&(*(s as *const StatusBox)).message)
}

unsafe extern "C" fn status_free(s: *mut RlxStatus) {
    if !s.is_null() {
        drop(Box::from_raw(s as *mut StatusBox));
    }
}

// ------------------------------------------------------------ registration

fn state() -> PluginResult<&'static State> {
    STATE.get().ok_or_else(|| {
        PluginError::internal("the plugin was not initialised by a successful handshake")
    })
}

fn tables() -> PluginResult<&'static Tables> {
    state()?.tables.get().ok_or_else(|| {
        PluginError::invalid_argument("call `init` before reading the plugin's tables")
    })
}

unsafe extern "C" fn init() -> *mut RlxStatus {
    guard(|| {
        let st = state()?;
        if st.tables.get().is_some() {
            return Ok(());
        }
        let entries = st
            .plugin
            .init(&st.registry)
            .map_err(|e| e.context("plugin registration failed"))?;
        let _ = st.tables.set(build_tables(entries)?);
        Ok(())
    })
}

fn raw_dtypes(dtypes: &[DType]) -> (*const RlxDataType, usize) {
    let v: &'static [RlxDataType] = Box::leak(dtypes.iter().map(|d| d.to_dl()).collect());
    (v.as_ptr(), v.len())
}

fn build_tables(entries: Vec<LoweringEntry>) -> PluginResult<Tables> {
    let mut seen = std::collections::BTreeSet::new();
    for e in &entries {
        if !seen.insert(e.op_kind.clone()) {
            return Err(PluginError::internal(format!(
                "lowering table lists op kind {:?} twice",
                e.op_kind
            )));
        }
    }
    let mut ops: Vec<*const RlxOpSupport> = Vec::new();
    let mut rows: Vec<*const RlxLoweringEntry> = Vec::new();
    for e in entries {
        let (dtypes, n_dtypes) = raw_dtypes(&e.dtypes);
        let op_kind = leak_str(e.op_kind.clone());
        ops.push(Box::leak(Box::new(RlxOpSupport {
            struct_size: std::mem::size_of::<RlxOpSupport>(),
            op_kind,
            dtypes,
            n_dtypes,
        })));
        let has_exec = e.execute.is_some();
        let note = leak_str(e.note.clone());
        let strategy = e.strategy.to_raw();
        let ctx: &'static LoweringEntry = Box::leak(Box::new(e));
        rows.push(Box::leak(Box::new(RlxLoweringEntry {
            struct_size: std::mem::size_of::<RlxLoweringEntry>(),
            op_kind,
            dtypes,
            n_dtypes,
            strategy,
            note,
            execute: if has_exec { Some(execute_op) } else { None },
            execute_ctx: ctx as *const LoweringEntry as *const c_void,
        })));
    }
    let ops: &'static [*const RlxOpSupport] = Box::leak(ops.into_boxed_slice());
    let rows: &'static [*const RlxLoweringEntry] = Box::leak(rows.into_boxed_slice());
    Ok(Tables {
        op_list: RlxOpList {
            struct_size: std::mem::size_of::<RlxOpList>(),
            ops: ops.as_ptr(),
            n_ops: ops.len(),
        },
        lowering: RlxLoweringTable {
            struct_size: std::mem::size_of::<RlxLoweringTable>(),
            entries: rows.as_ptr(),
            n_entries: rows.len(),
        },
    })
}

unsafe extern "C" fn supported_ops(out: *mut RlxOpList) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        *out = copy_op_list(&tables()?.op_list);
        Ok(())
    })
}

unsafe extern "C" fn lowering_table(out: *mut RlxLoweringTable) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        let t = &tables()?.lowering;
        *out = RlxLoweringTable {
            struct_size: t.struct_size,
            entries: t.entries,
            n_entries: t.n_entries,
        };
        Ok(())
    })
}

fn copy_op_list(l: &RlxOpList) -> RlxOpList {
    RlxOpList {
        struct_size: l.struct_size,
        ops: l.ops,
        n_ops: l.n_ops,
    }
}

unsafe fn non_null_mut<'a, T>(p: *mut T, what: &str) -> PluginResult<&'a mut T> {
    p.as_mut()
        .ok_or_else(|| PluginError::invalid_argument(format!("`{what}` is null")))
}

unsafe fn slice_or_empty<'a, T>(p: *const T, n: usize, what: &str) -> PluginResult<&'a [T]> {
    if n == 0 {
        Ok(&[])
    } else if p.is_null() {
        Err(PluginError::invalid_argument(format!(
            "`{what}` is null but its count is {n}"
        )))
    } else {
        Ok(std::slice::from_raw_parts(p, n))
    }
}

unsafe fn copy_inputs(inputs: *const RlxTensor, n: usize) -> PluginResult<Vec<HostTensor>> {
    slice_or_empty(inputs, n, "inputs")?
        .iter()
        .enumerate()
        .map(|(i, t)| HostTensor::copy_from_raw(t).map_err(|e| e.context(format!("input {i}"))))
        .collect()
}

/// Write `outs` as owned tensors into `slots`; on a count mismatch nothing
/// is written and the outputs are dropped here.
unsafe fn write_outputs(
    outs: Vec<HostTensor>,
    slots: *mut RlxTensor,
    capacity: usize,
) -> PluginResult<usize> {
    if outs.len() > capacity {
        return Err(PluginError::invalid_argument(format!(
            "the op produced {} outputs but the caller has room for {capacity}",
            outs.len()
        )));
    }
    if !outs.is_empty() && slots.is_null() {
        return Err(PluginError::invalid_argument("`outputs` is null"));
    }
    let n = outs.len();
    for (i, t) in outs.into_iter().enumerate() {
        slots.add(i).write(t.into_raw_owned());
    }
    Ok(n)
}

unsafe extern "C" fn execute_op(
    ctx: *const c_void,
    node: RlxStr,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    out_capacity: usize,
    n_outputs: *mut usize,
) -> *mut RlxStatus {
    guard(|| {
        let entry = (ctx as *const LoweringEntry)
            .as_ref()
            .ok_or_else(|| PluginError::invalid_argument("execute_ctx is null"))?;
        let exec = entry.execute.as_ref().ok_or_else(|| {
            PluginError::unsupported(format!("{} has no eager entry", entry.op_kind))
        })?;
        let node = node
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("node text is not UTF-8: {e}")))?;
        let n_out = non_null_mut(n_outputs, "n_outputs")?;
        let ins = copy_inputs(inputs, n_inputs)?;
        let outs = exec(node, &ins).map_err(|e| e.context(format!("eager {}", entry.op_kind)))?;
        *n_out = write_outputs(outs, outputs, out_capacity)?;
        Ok(())
    })
}

// ------------------------------------------------------------- executables

struct ExeBox(Box<dyn crate::plugin::Executable>);

unsafe fn exe_mut<'a>(exe: *mut RlxExecutable) -> PluginResult<&'a mut ExeBox> {
    (exe as *mut ExeBox)
        .as_mut()
        .ok_or_else(|| PluginError::invalid_argument("executable is null"))
}

unsafe extern "C" fn compile(
    graph: RlxStr,
    options: *const RlxCompileOptions,
    out: *mut *mut RlxExecutable,
) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let st = state()?;
        crate::log::sync_max_level();
        // Fields an older host did not send keep their defaults.
        let raw = if options.is_null() {
            RlxCompileOptions::default()
        } else {
            crate::sized::read_over(options, RlxCompileOptions::default())
        };
        let mode = Mode::from_raw(raw.mode).ok_or_else(|| {
            PluginError::unsupported(format!("unknown execution mode {}", raw.mode))
        })?;
        let opts = crate::plugin::CompileOptions {
            mode,
            rng_policy: raw.rng_policy,
            rng_seed: raw.rng_seed,
        };
        let text = graph
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("graph text is not UTF-8: {e}")))?;
        let exe = st.plugin.compile(text, &opts)?;
        *out = Box::into_raw(Box::new(ExeBox(exe))) as *mut RlxExecutable;
        Ok(())
    })
}

unsafe extern "C" fn executable_destroy(exe: *mut RlxExecutable) {
    if !exe.is_null() {
        // Dropping runs the plugin's own code: keep a panic inside.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(exe as *mut ExeBox))));
    }
}

unsafe extern "C" fn executable_signature(
    exe: *const RlxExecutable,
    visitor: *const RlxValueVisitor,
) -> *mut RlxStatus {
    guard(|| {
        let exe = exe_mut(exe as *mut RlxExecutable)?;
        let visitor = visitor
            .as_ref()
            .ok_or_else(|| PluginError::invalid_argument("`visitor` is null"))?;
        let (visit, ctx) = (
            visitor
                .visit
                .ok_or_else(|| PluginError::invalid_argument("`visitor.visit` is null"))?,
            visitor.ctx,
        );
        for v in exe.0.signature() {
            let shape: Vec<i64> = v.shape.iter().map(|d| d.map_or(-1, |d| d as i64)).collect();
            let info = RlxValueInfo {
                struct_size: std::mem::size_of::<RlxValueInfo>(),
                role: match v.role {
                    Role::Input => role::INPUT,
                    Role::Param => role::PARAM,
                    Role::Output => role::OUTPUT,
                },
                name: RlxStr::from_str(&v.name),
                dtype: v.dtype.to_dl(),
                ndim: shape.len() as i32,
                shape: shape.as_ptr(),
            };
            visit(ctx, &info);
        }
        Ok(())
    })
}

unsafe extern "C" fn executable_bind_param(
    exe: *mut RlxExecutable,
    name: RlxStr,
    tensor: *const RlxTensor,
) -> *mut RlxStatus {
    // An OWNED tensor is ours from here on, even if we fail: wrap it first
    // so every path releases it exactly once.
    let owned = tensor
        .as_ref()
        .filter(|t| t.ownership == ownership::OWNED)
        .copied();
    let guard_owned = OwnedGuard(owned);
    guard(move || {
        let exe = exe_mut(exe)?;
        let t = tensor
            .as_ref()
            .ok_or_else(|| PluginError::invalid_argument("`tensor` is null"))?;
        let name = name
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("param name is not UTF-8: {e}")))?;
        let view = TensorRef::from_raw(t).map_err(|e| e.context(format!("param {name:?}")))?;
        let (dtype, shape) = (view.dtype, view.shape.clone());
        let bytes = match (t.ownership, view.compact_bytes()) {
            (ownership::BORROWED_PERSISTENT, Some(b)) => ParamBytes::Persistent(b),
            (ownership::OWNED, Some(b)) => ParamBytes::Owned {
                bytes: b,
                raw: guard_owned.disarm().expect("owned tensor"),
            },
            _ => ParamBytes::Copied(view.to_compact_bytes()),
        };
        // Anything not disarmed above (a copied owned tensor) is released
        // when `guard_owned` drops at the end of this closure.
        exe.0.bind_param(
            name,
            BoundParam {
                dtype,
                shape,
                bytes,
            },
        )
    })
}

struct OwnedGuard(Option<RlxTensor>);

impl OwnedGuard {
    fn disarm(mut self) -> Option<RlxTensor> {
        self.0.take()
    }
}

impl Drop for OwnedGuard {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            unsafe { crate::tensor::release(t) };
        }
    }
}

unsafe extern "C" fn executable_run(
    exe: *mut RlxExecutable,
    inputs: *const RlxNamedTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    guard(|| {
        let exe = exe_mut(exe)?;
        let named = slice_or_empty(inputs, n_inputs, "inputs")?;
        let mut views = Vec::with_capacity(named.len());
        for nt in named {
            let name = nt.name.to_str().map_err(|e| {
                PluginError::invalid_argument(format!("input name is not UTF-8: {e}"))
            })?;
            let view = TensorRef::from_raw(&nt.tensor)
                .map_err(|e| e.context(format!("input {name:?}")))?;
            views.push((name, view));
        }
        let outs = exe.0.run(&views)?;
        if outs.len() != n_outputs {
            return Err(PluginError::invalid_argument(format!(
                "the executable has {} outputs but the caller passed {n_outputs} slots",
                outs.len()
            )));
        }
        write_outputs(outs, outputs, n_outputs).map(|_| ())
    })
}

// -------------------------------------------------------------- custom ops

static CUSTOM_OP_API: RlxCustomOpApi = RlxCustomOpApi {
    struct_size: std::mem::size_of::<RlxCustomOpApi>(),
    register: Some(custom_register),
    unregister: Some(custom_unregister),
    lookup: Some(custom_lookup),
    list: Some(custom_list),
    execute: Some(custom_execute),
};

unsafe fn str_arg<'a>(s: RlxStr, what: &str) -> PluginResult<&'a str> {
    s.to_str()
        .map_err(|e| PluginError::invalid_argument(format!("{what} is not UTF-8: {e}")))
}

/// A kernel supplied through the ABI, with the context it owns.
struct ForeignKernel {
    kernel: RlxCustomKernelFn,
    ctx: *mut c_void,
    ctx_drop: Option<unsafe extern "C" fn(*mut c_void)>,
    n_outputs: usize,
}

// The registering party promises its kernel and context are thread-safe
// (docs/ABI.md, threading contract).
unsafe impl Send for ForeignKernel {}
unsafe impl Sync for ForeignKernel {}

impl Drop for ForeignKernel {
    fn drop(&mut self) {
        if let Some(d) = self.ctx_drop {
            unsafe { d(self.ctx) };
        }
    }
}

impl ForeignKernel {
    fn call(&self, inputs: &[HostTensor]) -> PluginResult<Vec<HostTensor>> {
        // Keep the views alive: the descriptors point into them.
        let borrowed = crate::tensor::borrow_all(inputs);
        let raws = &borrowed.raws;
        let mut slots = vec![RlxTensor::empty(); self.n_outputs];
        let st = unsafe {
            (self.kernel)(
                self.ctx,
                raws.as_ptr(),
                raws.len(),
                slots.as_mut_ptr(),
                slots.len(),
            )
        };
        unsafe { take_status(st) }?;
        slots
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                unsafe { HostTensor::take_raw(s) }
                    .map_err(|e| e.context(format!("kernel output {i}")))
            })
            .collect()
    }
}

unsafe extern "C" fn custom_register(desc: *const RlxCustomOpDesc) -> *mut RlxStatus {
    guard(|| {
        let d = desc
            .as_ref()
            .ok_or_else(|| PluginError::invalid_argument("`desc` is null"))?;
        // Own the context first, so it is dropped on any error below.
        struct CtxGuard(*mut c_void, Option<unsafe extern "C" fn(*mut c_void)>);
        impl Drop for CtxGuard {
            fn drop(&mut self) {
                if let Some(d) = self.1.take() {
                    unsafe { d(self.0) };
                }
            }
        }
        let mut ctx = CtxGuard(d.kernel_ctx, d.kernel_ctx_drop);
        let kernel = d
            .kernel
            .ok_or_else(|| PluginError::invalid_argument("custom op kernel is null"))?;
        let fk = ForeignKernel {
            kernel,
            ctx: ctx.0,
            ctx_drop: ctx.1.take(),
            n_outputs: d.n_outputs as usize,
        };
        let info = CustomOpInfo {
            name: str_arg(d.name, "custom op name")?.to_string(),
            description: str_arg(d.description, "custom op description")?.to_string(),
            n_inputs: d.n_inputs,
            n_outputs: d.n_outputs,
            origin: Origin::Host,
        };
        let kernel: CustomKernel = Arc::new(move |ins: &[HostTensor]| fk.call(ins));
        state()?.registry.register(info, kernel)
    })
}

unsafe extern "C" fn custom_unregister(name: RlxStr) -> *mut RlxStatus {
    guard(|| {
        state()?
            .registry
            .unregister(str_arg(name, "custom op name")?)
    })
}

unsafe fn visitor_parts(
    v: *const RlxCustomOpVisitor,
) -> PluginResult<(
    unsafe extern "C" fn(*mut c_void, *const RlxCustomOpInfo),
    *mut c_void,
)> {
    let v = v
        .as_ref()
        .ok_or_else(|| PluginError::invalid_argument("`visitor` is null"))?;
    let f = v
        .visit
        .ok_or_else(|| PluginError::invalid_argument("`visitor.visit` is null"))?;
    Ok((f, v.ctx))
}

unsafe fn visit_info(
    visit: unsafe extern "C" fn(*mut c_void, *const RlxCustomOpInfo),
    ctx: *mut c_void,
    i: &CustomOpInfo,
) {
    let raw = RlxCustomOpInfo {
        struct_size: std::mem::size_of::<RlxCustomOpInfo>(),
        name: RlxStr::from_str(&i.name),
        description: RlxStr::from_str(&i.description),
        n_inputs: i.n_inputs,
        n_outputs: i.n_outputs,
        origin: i.origin.to_raw(),
    };
    visit(ctx, &raw);
}

unsafe extern "C" fn custom_lookup(
    name: RlxStr,
    visitor: *const RlxCustomOpVisitor,
) -> *mut RlxStatus {
    guard(|| {
        let name = str_arg(name, "custom op name")?;
        let (visit, ctx) = visitor_parts(visitor)?;
        let info = state()?
            .registry
            .lookup(name)
            .ok_or_else(|| PluginError::not_found(format!("no custom op named {name:?}")))?;
        visit_info(visit, ctx, &info);
        Ok(())
    })
}

unsafe extern "C" fn custom_list(visitor: *const RlxCustomOpVisitor) -> *mut RlxStatus {
    guard(|| {
        let (visit, ctx) = visitor_parts(visitor)?;
        for info in state()?.registry.list() {
            visit_info(visit, ctx, &info);
        }
        Ok(())
    })
}

unsafe extern "C" fn custom_execute(
    name: RlxStr,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    guard(|| {
        let name = str_arg(name, "custom op name")?;
        let ins = copy_inputs(inputs, n_inputs)?;
        let outs = state()?.registry.execute(name, &ins)?;
        if outs.len() != n_outputs {
            return Err(PluginError::invalid_argument(format!(
                "custom op {name:?} has {} outputs but the caller passed {n_outputs} slots",
                outs.len()
            )));
        }
        write_outputs(outs, outputs, n_outputs).map(|_| ())
    })
}
