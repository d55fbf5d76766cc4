//! A plugin executable as rlx-runtime's `ExecutableGraph`: buffers
//! converted to and from the dtypes its signature declares.

use rlx_plugin_api::host::{LentBuffer, PluginExecutable};
use rlx_plugin_api::tensor::Dims;
use rlx_plugin_api::{convert, DType, HostTensorRef, Role, TensorRef, ValueInfo};
use rlx_runtime::ExecutableGraph;
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::HashMap;

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

/// Room for `n` elements of an output the plugin writes whole: a `Vec`
/// of length 0 whose capacity is lent for the run (nothing reads it before
/// it is written, so no fill is paid for, and its length is set only once
/// the run has written it), or None when the memory cannot be had (the
/// output is then handed over by the plugin, and a copy that cannot be
/// made is an error there, never an abort).
fn room<T>(n: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    Some(v)
}

/// The element count of an output whose signature fixes every size: the
/// outputs whose buffers the host can allocate before a run.
fn fixed_numel(v: &ValueInfo) -> Option<usize> {
    v.shape
        .iter()
        .try_fold(1usize, |n, d| d.and_then(|d| n.checked_mul(d)))
}

/// Per output: its room and its element count, or None for an output
/// the plugin hands over.
type Rooms<T> = SmallVec<[Option<(Vec<T>, usize)>; 4]>;

/// `v`'s spare capacity for `n` elements as the buffer an output is
/// written into.
fn lend<T>(v: &mut Vec<T>, n: usize) -> LentBuffer {
    debug_assert!(v.capacity() >= n && v.is_empty());
    LentBuffer {
        ptr: v.as_mut_ptr().cast(),
        len: n * std::mem::size_of::<T>(),
    }
}

/// The outputs of a run: each written into its room (whose length is now
/// set) or read by the run's reader.
///
/// # Safety
/// Each room in `made` was lent to a run that succeeded and returned
/// `read`, so its first `n` elements are written (`run_refs_into_raw`).
unsafe fn finish<T, U>(
    read: Vec<Option<U>>,
    made: Rooms<T>,
    mut filled: impl FnMut(usize, Vec<T>) -> U,
) -> Vec<U> {
    read.into_iter()
        .zip(made)
        .enumerate()
        .map(|(i, (r, m))| match (r, m) {
            (Some(r), _) => r,
            (None, Some((mut v, n))) => {
                // SAFETY: the caller's promise: the run wrote n elements.
                unsafe { v.set_len(n) };
                filled(i, v)
            }
            (None, None) => unreachable!("each output written or read"),
        })
        .collect()
}

/// A plugin executable as an rlx-runtime [`ExecutableGraph`].
pub struct PluginGraph {
    exe: PluginExecutable,
    plugin: String,
    /// By position; a run looks each name up (a graph has few inputs,
    /// and a scan costs less than hashing the name).
    inputs: Vec<ValueInfo>,
    params: HashMap<String, ValueInfo>,
    outputs: Vec<ValueInfo>,
    /// Whether runs lend the plugin the output buffers (ABI 1.8). Not on
    /// a CPU device: there the plugin hands over its own buffer for the
    /// host's one copy, so lending saves no copy and costs the checks.
    lend_outputs: bool,
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
        PluginGraph {
            exe,
            plugin,
            inputs,
            params,
            outputs,
            lend_outputs,
        }
    }

    /// Lend the plugin the output buffers (ABI 1.8) or not, whatever the
    /// device: the default lends them off the CPU only. For tests and
    /// measurements of either path.
    pub fn with_lent_outputs(mut self, lend: bool) -> PluginGraph {
        self.lend_outputs = lend;
        self
    }

    /// The executable's signature (inputs, params, outputs).
    pub fn signature(&self) -> &[ValueInfo] {
        self.exe.signature()
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

    /// Run with each output that `elems` sizes (in `T`s: only an output
    /// whose signature fixes every size) written by the plugin into a `Vec`
    /// lent for it, and made a result by `filled`; the others are read with
    /// `read`.
    fn run_lent<T, U>(
        &mut self,
        inputs: Vec<(&str, Cow<'_, [u8]>, rlx_ir::DType)>,
        elems: impl Fn(&ValueInfo) -> Option<usize>,
        read: impl FnMut(&TensorRef<'_>) -> rlx_plugin_api::PluginResult<U>,
        filled: impl FnMut(usize, Vec<T>) -> U,
    ) -> Vec<U> {
        let mut made: Rooms<T> = self
            .outputs
            .iter()
            .map(|v| elems(v).and_then(|n| room::<T>(n).map(|r| (r, n))))
            .collect();
        let into: SmallVec<[Option<LentBuffer>; 4]> = made
            .iter_mut()
            .map(|m| m.as_mut().map(|(v, n)| lend(v, *n)))
            .collect();
        // SAFETY: each buffer is the spare capacity of a `Vec` made above
        // for this run (`room`), of its length, aliased by nothing.
        let outs = self.run_bytes(inputs, |exe, named| unsafe {
            exe.run_refs_into_raw(named, &into, read)
        });
        // SAFETY: `made`'s rooms were lent to this run, which succeeded
        // (a failed one does not return).
        unsafe { finish(outs, made, filled) }
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
        let outs = call(&mut self.exe, &named).unwrap_or_else(|e| self.fail(e));
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
        // Off the CPU, an f32 output of fixed shape is written by the
        // plugin straight into the Vec handed on (on a GPU: its one copy
        // from device memory). Any other is converted from the plugin's
        // buffer, one copy as well (on the CPU the plugin lends MLX's
        // own). A big-endian host converts every output (its f32s are not
        // the ABI's little-endian bytes).
        let read = |t: &TensorRef<'_>| convert::bytes_to_f32(t.dtype, &t.compact_cow()?);
        if !self.lend_outputs {
            return self.run_bytes(owned, |exe, named| exe.run_refs_with(named, read));
        }
        let f32_le = cfg!(target_endian = "little");
        self.run_lent(
            owned,
            |v| {
                (v.dtype == DType::F32 && f32_le)
                    .then(|| fixed_numel(v))
                    .flatten()
            },
            read,
            |_, v| v,
        )
    }

    fn run_typed(
        &mut self,
        inputs: &[(&str, &[u8], rlx_ir::DType)],
    ) -> Vec<(Vec<u8>, rlx_ir::DType)> {
        let borrowed = inputs
            .iter()
            .map(|(n, b, d)| (*n, Cow::Borrowed(*b), *d))
            .collect();
        let read = |t: &TensorRef<'_>| Ok((t.to_compact_bytes()?, ir_dtype(t.dtype)));
        if !self.lend_outputs {
            return self.run_bytes(borrowed, |exe, named| exe.run_refs_with(named, read));
        }
        let dtypes: SmallVec<[rlx_ir::DType; 4]> =
            self.outputs.iter().map(|v| ir_dtype(v.dtype)).collect();
        self.run_lent(
            borrowed,
            |v| fixed_numel(v)?.checked_mul(v.dtype.size_bytes()),
            read,
            |i, v| (v, dtypes[i]),
        )
    }
}
