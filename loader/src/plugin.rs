//! A loaded plugin, used safely: its descriptor and tables copied into
//! Rust values, its functions wrapped so statuses become `PluginError`s.

use super::load_error::LoadError;
use rlx_plugin_api::error::{PluginError, PluginResult, RlxStatus, StatusCode};
use rlx_plugin_api::plugin::{Descriptor, DeviceInfo, DeviceKind, Strategy};
use rlx_plugin_api::sized::AbiStruct;
use rlx_plugin_api::strings::RlxStr;
use rlx_plugin_api::tables::*;
use rlx_plugin_api::tensor::{DType, HostTensor, RlxDataType, RlxTensor};
use rlx_plugin_api::version::RlxAbiVersion;
use std::ffi::c_void;
use std::path::{Path, PathBuf};

/// One supported op kind and its dtypes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpSupport {
    pub op_kind: String,
    pub dtypes: Vec<DType>,
}

/// One row of a plugin's lowering table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoweringInfo {
    pub op_kind: String,
    pub dtypes: Vec<DType>,
    pub strategy: Strategy,
    pub note: String,
    pub eager: bool,
}

/// A lowering-table row and its eager entry point with its context.
type LoweringRow = (LoweringInfo, Option<(RlxExecuteOpFn, usize)>);

/// A plugin that passed every check. Cheap to share (`Arc`).
pub struct LoadedPlugin {
    path: PathBuf,
    pub(super) api: RlxPluginApi,
    pub(super) descriptor: Descriptor,
    ops: std::sync::OnceLock<Vec<OpSupport>>,
    lowering: std::sync::OnceLock<Vec<LoweringRow>>,
    pub(super) custom: Option<RlxCustomOpApi>,
    /// (1.9) The state, sharing and submit tables, as read at load.
    pub(super) state: Option<RlxStateApi>,
    pub(super) sharing: Option<RlxSharingApi>,
    pub(super) submits: Option<RlxSubmitApi>,
    /// (1.11) The host-memory table, as read at load.
    pub(super) host_memory: Option<RlxHostMemoryApi>,
    /// (1.12) The graph-form table and the names of its forms, as read
    /// at load.
    pub(super) graph_forms: Option<RlxGraphFormApi>,
    pub(super) graph_form_names: Vec<String>,
    /// Whether the plugin's reading of another rlx-ir layout was reported.
    pub(super) other_layout_warned: std::sync::atomic::AtomicBool,
}

// SAFETY: the tables are immutable process-lifetime data and the ABI requires the root functions to be thread-safe (docs/ABI.md, threading).
unsafe impl Send for LoadedPlugin {}
// SAFETY: as for Send.
unsafe impl Sync for LoadedPlugin {}

fn required<T: Copy>(f: Option<T>, name: &str) -> Result<T, LoadError> {
    f.ok_or_else(|| LoadError::InvalidTable {
        detail: format!("required function `{name}` is null"),
    })
}

/// The most elements any array in a plugin's tables may hold. A count
/// beyond it is a corrupt table (`InvalidTable`), not an allocation or a
/// read of that size.
pub const MAX_TABLE_LEN: usize = 1 << 20;

/// A plugin's array as a slice, after checking its count and pointer.
///
/// # Safety
/// A non-null `p` with `n <= MAX_TABLE_LEN` points at `n` readable `T`s
/// that live for `'a`.
unsafe fn table_slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], String> {
    if n == 0 {
        return Ok(&[]);
    }
    if n > MAX_TABLE_LEN {
        return Err(format!(
            "{what} claims {n} elements (at most {MAX_TABLE_LEN})"
        ));
    }
    if p.is_null() {
        return Err(format!("{what} is null but its count is {n}"));
    }
    // SAFETY: checked non-null and bounded; the plugin promises the rest.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// # Safety
/// As for [`table_slice`].
unsafe fn strs(p: *const RlxStr, n: usize, what: &str) -> Result<Vec<String>, String> {
    // SAFETY: the caller's promise; each RlxStr is the plugin's static data.
    Ok(unsafe { table_slice(p, n, what)? }
        .iter()
        .map(|s| unsafe { s.to_string_lossy() })
        .collect())
}

/// The dtypes of a table row. A dtype this host does not know (a newer
/// minor's) is skipped with a warning naming it, never misread.
///
/// # Safety
/// As for [`table_slice`].
unsafe fn dtypes(
    p: *const RlxDataType,
    n: usize,
    op_kind: &str,
    plugin: &Path,
) -> Result<Vec<DType>, String> {
    // SAFETY: the caller's promise.
    let raw = unsafe { table_slice(p, n, &format!("the dtypes of {op_kind}"))? };
    Ok(raw
        .iter()
        .filter_map(|d| match DType::from_dl(*d) {
            Ok(t) => Some(t),
            Err(_) => {
                log::warn!(
                    "{}: {op_kind} lists DLPack dtype (code {}, bits {}, lanes {}), which this \
                     host does not know (a newer ABI minor?); skipping that dtype",
                    plugin.display(),
                    d.code,
                    d.bits,
                    d.lanes
                );
                None
            }
        })
        .collect())
}

/// The descriptor's 1.4 device list (empty from an older plugin, whose
/// descriptor `struct_size` does not reach it: those fields read as zero).
/// A device of a kind this host does not know is skipped with a warning.
///
/// # Safety
/// `d` was read from the plugin's static descriptor.
unsafe fn device_infos(d: &RlxPluginDescriptor, plugin: &Path) -> Result<Vec<DeviceInfo>, String> {
    // SAFETY: the plugin's static array; count and pointer checked.
    let rows = unsafe { table_slice(d.device_infos, d.n_device_infos, "descriptor.device_infos")? };
    let mut out = Vec::new();
    for (i, &p) in rows.iter().enumerate() {
        // SAFETY: a non-null element is the plugin's static RlxDeviceInfo.
        let r = unsafe { read_sized(p) }.ok_or(format!("device_infos[{i}] is null"))?;
        let Some(kind) = DeviceKind::from_raw(r.kind) else {
            log::warn!(
                "{}: device {i} has kind {}, which this host does not know; skipping it",
                plugin.display(),
                r.kind
            );
            continue;
        };
        out.push(DeviceInfo {
            kind,
            ordinal: r.ordinal,
            // SAFETY: the plugin's static string.
            name: unsafe { r.name.to_string_lossy() },
            memory_bytes: r.memory_bytes,
        });
    }
    Ok(out)
}

/// A struct the plugin wrote into our (zeroed, full-size) buffer, with the
/// fields beyond the `struct_size` it declared reset to zero.
pub(super) fn read_written<T>(t: &T) -> T {
    // SAFETY: `t` is our own fully initialised buffer, so any declared size
    // is readable up to size_of::<T>(); ABI structs accept all-zero.
    unsafe { rlx_plugin_api::sized::read_zero_filled(t) }
}

/// Copy a struct that starts with `struct_size`, zero-filling the fields a
/// smaller (older) writer lacks and never reading past its `struct_size`.
///
/// # Safety
/// `p` is null or points at such a struct, readable for its `struct_size`.
pub(super) unsafe fn read_sized<T>(p: *const T) -> Option<T> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; ABI structs accept all-zero.
    Some(unsafe { rlx_plugin_api::sized::read_zero_filled(p) })
}

impl LoadedPlugin {
    /// Validate the root table's required functions and read the descriptor.
    pub(crate) unsafe fn new(path: PathBuf, api: RlxPluginApi) -> Result<LoadedPlugin, LoadError> {
        required(api.status_new, "status_new")?;
        required(api.status_code, "status_code")?;
        required(api.status_message, "status_message")?;
        required(api.status_free, "status_free")?;
        required(api.init, "init")?;
        required(api.supported_ops, "supported_ops")?;
        required(api.lowering_table, "lowering_table")?;
        required(api.compile, "compile")?;
        required(api.executable_destroy, "executable_destroy")?;
        required(api.executable_signature, "executable_signature")?;
        required(api.executable_bind_param, "executable_bind_param")?;
        required(api.executable_run, "executable_run")?;
        let d = read_sized(api.descriptor).ok_or_else(|| LoadError::InvalidTable {
            detail: "the descriptor is null".into(),
        })?;
        let invalid = |detail: String| LoadError::InvalidTable { detail };
        let build_info = table_slice(d.build_info, d.n_build_info, "descriptor.build_info")
            .map_err(invalid)?
            .iter()
            .map(|kv| (kv.key.to_string_lossy(), kv.value.to_string_lossy()))
            .collect();
        let opsets = table_slice(d.opsets, d.n_opsets, "descriptor.opsets")
            .map_err(invalid)?
            .to_vec();
        let descriptor = Descriptor {
            name: d.name.to_string_lossy(),
            version: d.version.to_string_lossy(),
            description: d.description.to_string_lossy(),
            devices: strs(d.devices, d.n_devices, "descriptor.devices").map_err(invalid)?,
            build_info,
            opsets,
            device_infos: device_infos(&d, &path).map_err(invalid)?,
        };
        if descriptor.name.is_empty() {
            return Err(LoadError::InvalidTable {
                detail: "the descriptor has an empty name".into(),
            });
        }
        if semver::Version::parse(&descriptor.version).is_err() {
            return Err(LoadError::InvalidTable {
                detail: format!("plugin version {:?} is not semver", descriptor.version),
            });
        }
        let custom = read_sized(api.custom_ops);
        let (state, sharing, submits) = (
            read_sized(api.state),
            read_sized(api.sharing),
            read_sized(api.submits),
        );
        let host_memory = read_sized(api.host_memory);
        let graph_forms = read_sized(api.graph_forms);
        let graph_form_names = match &graph_forms {
            Some(t) if t.compile.is_none() => {
                return Err(invalid(
                    "the graph-form table's `compile` is null".to_string(),
                ))
            }
            Some(t) => strs(t.forms, t.n_forms, "graph_forms.forms").map_err(invalid)?,
            None => Vec::new(),
        };
        Ok(LoadedPlugin {
            path,
            api,
            descriptor,
            ops: Default::default(),
            lowering: Default::default(),
            custom,
            state,
            sharing,
            submits,
            host_memory,
            graph_forms,
            graph_form_names,
            other_layout_warned: Default::default(),
        })
    }

    /// Registration, then read the op list and lowering table.
    pub(crate) fn init(&self) -> Result<(), LoadError> {
        // SAFETY: `init` is required (checked at load) and called once, by the loader.
        unsafe { self.check((self.api.init.unwrap())()) }.map_err(LoadError::RegistrationFailed)?;
        let ops = self
            .read_ops()
            .map_err(|e| LoadError::InvalidTable { detail: e })?;
        let lowering = self
            .read_lowering()
            .map_err(|e| LoadError::InvalidTable { detail: e })?;
        let _ = self.ops.set(ops);
        let _ = self.lowering.set(lowering);
        Ok(())
    }

    fn read_ops(&self) -> Result<Vec<OpSupport>, String> {
        // The caller sizes an out-struct (docs/ABI.md §2).
        let mut list = RlxOpList {
            struct_size: RlxOpList::STRUCT_SIZE,
            ops: std::ptr::null(),
            n_ops: 0,
        };
        // SAFETY: `list` is a writable RlxOpList; the function is required.
        unsafe { self.check((self.api.supported_ops.unwrap())(&mut list)) }
            .map_err(|e| e.to_string())?;
        let list = read_written(&list);
        let mut out = Vec::new();
        // SAFETY: the plugin's static table; count and pointer checked.
        for (i, &p) in unsafe { table_slice(list.ops, list.n_ops, "the op list")? }
            .iter()
            .enumerate()
        {
            // SAFETY: a non-null entry is the plugin's static RlxOpSupport.
            let op = unsafe { read_sized(p) }.ok_or(format!("op list entry {i} is null"))?;
            // SAFETY: strings and arrays of the plugin's static tables.
            let op_kind = unsafe { op.op_kind.to_string_lossy() };
            if op_kind.is_empty() {
                return Err(format!(
                    "op list entry {i} has no op kind ({})",
                    str_shape(op.op_kind)
                ));
            }
            // SAFETY: strings and arrays of the plugin's static tables.
            let dtypes = unsafe { dtypes(op.dtypes, op.n_dtypes, &op_kind, &self.path)? };
            out.push(OpSupport { op_kind, dtypes });
        }
        Ok(out)
    }

    fn read_lowering(&self) -> Result<Vec<LoweringRow>, String> {
        let mut t = RlxLoweringTable {
            struct_size: RlxLoweringTable::STRUCT_SIZE,
            entries: std::ptr::null(),
            n_entries: 0,
        };
        // SAFETY: `t` is a writable RlxLoweringTable; the function is required.
        unsafe { self.check((self.api.lowering_table.unwrap())(&mut t)) }
            .map_err(|e| e.to_string())?;
        let t = read_written(&t);
        let mut out = Vec::new();
        // SAFETY: the plugin's static table; count and pointer checked.
        for (i, &p) in unsafe { table_slice(t.entries, t.n_entries, "the lowering table")? }
            .iter()
            .enumerate()
        {
            // SAFETY: a non-null entry is the plugin's static RlxLoweringEntry.
            let e = unsafe { read_sized(p) }.ok_or(format!("lowering entry {i} is null"))?;
            // SAFETY: a string of the plugin's static tables.
            let op_kind = unsafe { e.op_kind.to_string_lossy() };
            if op_kind.is_empty() {
                return Err(format!(
                    "lowering entry {i} has no op kind ({})",
                    str_shape(e.op_kind)
                ));
            }
            let Some(strategy) = Strategy::from_raw(e.strategy) else {
                log::warn!(
                    "{}: lowering entry {op_kind} has strategy {}, which this host does not \
                     know (a newer ABI minor?); skipping the entry",
                    self.path.display(),
                    e.strategy
                );
                continue;
            };
            out.push((
                LoweringInfo {
                    // SAFETY: an array of the plugin's static tables.
                    dtypes: unsafe { dtypes(e.dtypes, e.n_dtypes, &op_kind, &self.path)? },
                    op_kind,
                    strategy,
                    // SAFETY: a string of the plugin's static tables.
                    note: unsafe { e.note.to_string_lossy() },
                    eager: e.execute.is_some(),
                },
                e.execute.map(|f| (f, e.execute_ctx as usize)),
            ));
        }
        Ok(out)
    }

    /// Turn a status this plugin returned into a result, releasing it: for
    /// a caller that drives the raw table itself.
    ///
    /// # Safety
    /// `s` is null or a status this plugin returned and nobody released.
    pub unsafe fn take_status(&self, s: *mut RlxStatus) -> PluginResult<()> {
        self.check(s)
    }

    /// Turn a status into a result, releasing it.
    pub(crate) fn check(&self, s: *mut RlxStatus) -> PluginResult<()> {
        if s.is_null() {
            return Ok(());
        }
        // SAFETY: `s` is a non-null status of this plugin, freed once, after its message is copied.
        unsafe {
            let raw = (self.api.status_code.unwrap())(s);
            let code = StatusCode::from_raw(raw);
            let mut message = (self.api.status_message.unwrap())(s).to_string_lossy();
            (self.api.status_free.unwrap())(s);
            // A code this host does not know (a newer minor's, or a plugin's
            // mistake) reads as INTERNAL; the message keeps the number.
            if code as u32 != raw {
                message = format!("{message} (status code {raw}, unknown to this host)");
            }
            Err(PluginError::new(code, message))
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The root table as read at load (fields beyond the plugin's
    /// `struct_size` zeroed), for tools that exercise the ABI directly
    /// (the conformance kit). Every required function is non-null.
    pub fn raw_api(&self) -> &RlxPluginApi {
        &self.api
    }
    /// The custom-op registry table as read at load, if any.
    pub fn raw_custom_ops(&self) -> Option<&RlxCustomOpApi> {
        self.custom.as_ref()
    }
    pub fn abi_version(&self) -> RlxAbiVersion {
        self.api.abi_version
    }
    pub fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }
    pub fn supported_ops(&self) -> &[OpSupport] {
        self.ops.get().map(Vec::as_slice).unwrap_or(&[])
    }
    pub fn lowering_table(&self) -> Vec<LoweringInfo> {
        self.lowering
            .get()
            .map(|v| v.iter().map(|(i, _)| i.clone()).collect())
            .unwrap_or_default()
    }
    /// Does the plugin offer a custom-op registry (ABI 1.1+)?
    pub fn has_custom_ops(&self) -> bool {
        self.custom.is_some()
    }

    /// Does the plugin write outputs into memory the host lends
    /// (`executable_run_into`, ABI 1.8)? Without it the host copies.
    pub fn has_run_into(&self) -> bool {
        self.api.executable_run_into.is_some()
    }

    /// (ABI 1.9) What the plugin offers beyond compile and run, read from
    /// its tables: exactly the functions it published.
    pub fn offers(&self) -> rlx_plugin_api::plugin::Offers {
        let st = self.state.as_ref();
        let sh = self.sharing.as_ref();
        let su = self.submits.as_ref();
        rlx_plugin_api::plugin::Offers {
            state: st.is_some_and(|t| {
                t.bind.is_some()
                    && t.unbind.is_some()
                    && t.read.is_some()
                    && t.list.is_some()
                    && t.set_feed.is_some()
                    && t.read_output.is_some()
            }),
            row_feeds: st.is_some_and(|t| t.feed_rows.is_some()),
            state_from: st.is_some_and(|t| t.bind_from.is_some()),
            clone: sh.is_some_and(|t| t.clone.is_some()),
            share_params: sh.is_some_and(|t| t.share_params.is_some()),
            submit: su.is_some_and(|t| t.submit.is_some() && t.wait.is_some()),
            param_range: self.api.executable_bind_param_range.is_some(),
            set_rng: self.api.executable_set_rng.is_some(),
            active_extent: self.api.executable_set_active_extent.is_some(),
            memory_usage: self.api.memory_usage.is_some(),
            dma_map: self
                .host_memory
                .as_ref()
                .is_some_and(|t| t.dma_map.is_some() && t.dma_unmap.is_some()),
        }
    }

    /// (ABI 1.9) The state, sharing and submit tables as read at load, for
    /// tools that drive the ABI directly (the conformance kit).
    pub fn raw_state(&self) -> Option<&RlxStateApi> {
        self.state.as_ref()
    }
    pub fn raw_sharing(&self) -> Option<&RlxSharingApi> {
        self.sharing.as_ref()
    }
    pub fn raw_submits(&self) -> Option<&RlxSubmitApi> {
        self.submits.as_ref()
    }

    /// (ABI 1.9) What the plugin's tensors hold now.
    pub fn memory_usage(&self) -> PluginResult<rlx_plugin_api::plugin::MemoryUsage> {
        let f = self.api.memory_usage.ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {} gives no memory figures (ABI 1.9 memory_usage)",
                self.descriptor.name
            ))
        })?;
        let mut out = RlxMemoryUsage {
            struct_size: RlxMemoryUsage::STRUCT_SIZE,
            ..Default::default()
        };
        // SAFETY: `out` is a writable out-struct sized here.
        self.check(unsafe { f(&mut out) })?;
        let out = read_written(&out);
        Ok(rlx_plugin_api::plugin::MemoryUsage {
            active_bytes: out.active_bytes,
            peak_bytes: out.peak_bytes,
            cached_bytes: out.cached_bytes,
        })
    }

    /// Execute one op eagerly through its lowering-table entry. `node` is
    /// a `.rlxmodel` graph holding just that op.
    pub fn execute_op(
        &self,
        op_kind: &str,
        node: &str,
        inputs: &[HostTensor],
    ) -> PluginResult<Vec<HostTensor>> {
        let (f, ctx) = self
            .lowering
            .get()
            .and_then(|v| v.iter().find(|(i, _)| i.op_kind == op_kind))
            .ok_or_else(|| {
                PluginError::unsupported(format!(
                    "{} has no lowering for {op_kind}",
                    self.descriptor.name
                ))
            })?
            .1
            .ok_or_else(|| PluginError::unsupported(format!("{op_kind} has no eager entry")))?;
        // Keep the views alive: the descriptors point into them.
        let borrowed = rlx_plugin_api::tensor::borrow_all(inputs);
        let raws = &borrowed.raws;
        // Generous: no rlx op has more outputs than this.
        let mut slots = vec![RlxTensor::empty(); 16];
        let mut n = 0usize;
        // SAFETY: `ctx` is the entry's own static context; the inputs point into `borrowed`, alive for the call; `slots` has out_capacity entries.
        self.check(unsafe {
            f(
                ctx as *const c_void,
                RlxStr::from_str(node),
                raws.as_ptr(),
                raws.len(),
                slots.as_mut_ptr(),
                slots.len(),
                &mut n,
            )
        })?;
        take_outputs(slots.into_iter().take(n))
    }
}

/// How an empty or broken string looked: `{null, 5}` names the mistake.
fn str_shape(s: RlxStr) -> String {
    if s.ptr.is_null() {
        format!("a null pointer with length {}", s.len)
    } else {
        "an empty string".into()
    }
}

pub(super) fn take_outputs(
    slots: impl Iterator<Item = RlxTensor>,
) -> PluginResult<Vec<HostTensor>> {
    // Take every slot (so each is released) before reporting an error.
    let taken: Vec<PluginResult<HostTensor>> =
        // SAFETY: the plugin wrote an OWNED tensor (or left the empty slot) in each slot.
        slots.map(|s| unsafe { HostTensor::take_raw(s) }).collect();
    taken
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.map_err(|e| e.context(format!("output {i}"))))
        .collect()
}

/// The `opset N` line of `.rlxmodel` text, if present.
pub fn graph_opset(text: &str) -> Option<u32> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .take(4)
        .find_map(|l| l.strip_prefix("opset ").and_then(|n| n.trim().parse().ok()))
}
