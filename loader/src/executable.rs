//! A compiled graph in a loaded plugin: params bound, runs made, outputs
//! read in place and released, every status an error value.

use super::plugin::{graph_opset, read_sized, read_written, LoadedPlugin};
use rlx_plugin_api::error::{PluginError, PluginResult};
use rlx_plugin_api::plugin::{CompileOptions, DeviceInfo, DeviceKind, Mode, Role, ValueInfo};
use rlx_plugin_api::sized::AbiStruct;
use rlx_plugin_api::strings::RlxStr;
use rlx_plugin_api::tables::*;
use rlx_plugin_api::tensor::{
    ownership, DType, Dims, HostTensor, HostTensorRef, RlxNamedTensor, RlxTensor, TensorRef,
};
use std::ffi::c_void;
use std::sync::Arc;

/// `executable_run`'s and (1.8) `executable_run_into`'s type (the table
/// spells it out in each field, as its layout derive needs).
type RlxRunFn = unsafe extern "C" fn(
    *mut RlxExecutable,
    *const RlxNamedTensor,
    usize,
    *mut RlxTensor,
    usize,
) -> *mut rlx_plugin_api::error::RlxStatus;

/// Memory lent for one output of [`PluginExecutable::run_refs_into_raw`]:
/// `len` bytes at `ptr`, possibly uninitialised until the run writes them.
#[derive(Clone, Copy, Debug)]
pub struct LentBuffer {
    pub ptr: *mut u8,
    pub len: usize,
}

/// Where one output of a run goes.
#[derive(Clone, Copy, Debug)]
pub enum OutputDest {
    /// Handed over by the plugin and read by the caller's reader.
    Read,
    /// (ABI 1.8) Written by the plugin into memory the caller lends.
    Lend(LentBuffer),
    /// (ABI 1.9) Not wanted: not copied off the device (a plugin before
    /// 1.9 hands it over anyway, and it is released unread).
    Skip,
}

/// A compiled graph in a plugin. Released on drop.
pub struct PluginExecutable {
    pub(super) plugin: Arc<LoadedPlugin>,
    pub(super) exe: *mut RlxExecutable,
    pub(super) signature: Vec<ValueInfo>,
    /// Params bound without a copy; dropped after the executable (and
    /// after every clone or sharer of its params: each holds them too).
    pub(super) keep_alive: Vec<Arc<HostTensor>>,
}

// SAFETY: one call at a time per executable is the ABI's contract and `&mut self` enforces it, so moving the handle between threads is fine.
unsafe impl Send for PluginExecutable {}

/// The most dimensions a value in a signature may have (`RLX_MAX_NDIM`).
const MAX_NDIM: i32 = 64;

pub(super) unsafe extern "C" fn collect_value(ctx: *mut c_void, info: *const RlxValueInfo) {
    // A panic must not unwind into the plugin.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the Vec this host passed with the visitor; `info`
        // is null or the plugin's record, readable for its struct_size.
        let (Some(out), Some(i)) = (
            unsafe { (ctx as *mut Vec<PluginResult<ValueInfo>>).as_mut() },
            unsafe { read_sized(info) },
        ) else {
            return;
        };
        // SAFETY: the record's name is borrowed for this call.
        let name = unsafe { i.name.to_string_lossy() };
        let role = match i.role {
            role::INPUT => Role::Input,
            role::PARAM => Role::Param,
            role::OUTPUT => Role::Output,
            role::STATE => Role::State,
            other => {
                log::warn!(
                    "signature value {name:?} has role {other}, which this host does not know \
                     (a newer ABI minor?); skipping it"
                );
                return;
            }
        };
        if !(0..=MAX_NDIM).contains(&i.ndim) || (i.ndim > 0 && i.shape.is_null()) {
            out.push(Err(PluginError::internal(format!(
                "signature value {name:?} has ndim {} and {} shape",
                i.ndim,
                if i.shape.is_null() { "a null" } else { "a" }
            ))));
            return;
        }
        let shape = if i.ndim == 0 {
            Vec::new()
        } else {
            // SAFETY: non-null, ndim checked; borrowed for this call.
            unsafe { std::slice::from_raw_parts(i.shape, i.ndim as usize) }
                .iter()
                .map(|&d| (d >= 0).then_some(d as usize))
                .collect()
        };
        out.push(
            DType::from_dl(i.dtype)
                .map(|dtype| ValueInfo {
                    role,
                    name: name.clone(),
                    dtype,
                    shape,
                })
                .map_err(|e| e.context(format!("signature value {name:?}"))),
        );
    }));
}

/// Compiling is where a loaded plugin makes an executable: here, beside the
/// executable, so that the plugin's own file need not know it.
impl LoadedPlugin {
    /// Compile `.rlxmodel` text. A graph from an opset the plugin does not
    /// read is refused here, before the plugin sees it.
    pub fn compile(self: &Arc<Self>, graph: &str, mode: Mode) -> PluginResult<PluginExecutable> {
        self.compile_with(graph, &CompileOptions::mode(mode))
    }

    /// Compile with every option (mode, RNG policy and seed).
    pub fn compile_with(
        self: &Arc<Self>,
        graph: &str,
        options: &CompileOptions,
    ) -> PluginResult<PluginExecutable> {
        if let Some(opset) = graph_opset(graph) {
            if !self.descriptor.opsets.contains(&opset) {
                return Err(PluginError::unsupported(format!(
                    "the graph uses .rlxmodel opset {opset} but plugin {} {} reads opsets {:?}; \
                     upgrade the plugin or re-export the model for an older opset",
                    self.descriptor.name, self.descriptor.version, self.descriptor.opsets
                )));
            }
        }
        let opts = options.to_raw();
        let mut exe: *mut RlxExecutable = std::ptr::null_mut();
        // SAFETY: the graph text and options are borrowed for the call; `exe` is a writable out-pointer.
        self.check(unsafe {
            (self.api.compile.unwrap())(RlxStr::from_str(graph), &opts, &mut exe)
        })?;
        PluginExecutable::adopt_compiled(self.clone(), exe)
    }
}

impl PluginExecutable {
    /// Owns what a compile that succeeded wrote to its `out`.
    pub(super) fn adopt_compiled(
        plugin: Arc<LoadedPlugin>,
        exe: *mut RlxExecutable,
    ) -> PluginResult<PluginExecutable> {
        if exe.is_null() {
            return Err(PluginError::internal(
                "compile succeeded but returned no executable",
            ));
        }
        PluginExecutable::adopt(plugin, exe)
    }

    /// Owns `exe`, a handle `plugin` just compiled, and reads its signature.
    pub(super) fn adopt(
        plugin: Arc<LoadedPlugin>,
        exe: *mut RlxExecutable,
    ) -> PluginResult<PluginExecutable> {
        let mut pe = PluginExecutable {
            plugin,
            exe,
            signature: Vec::new(),
            keep_alive: Vec::new(),
        };
        pe.signature = pe.read_signature()?;
        Ok(pe)
    }

    fn read_signature(&self) -> PluginResult<Vec<ValueInfo>> {
        let mut out: Vec<PluginResult<ValueInfo>> = Vec::new();
        let visitor = RlxValueVisitor {
            struct_size: RlxValueVisitor::STRUCT_SIZE,
            ctx: &mut out as *mut _ as *mut c_void,
            visit: Some(collect_value),
        };
        // SAFETY: `exe` is live; the visitor is borrowed for the call and its ctx is `out`.
        self.plugin.check(unsafe {
            (self.plugin.api.executable_signature.unwrap())(self.exe, &visitor)
        })?;
        out.into_iter().collect()
    }

    pub fn signature(&self) -> &[ValueInfo] {
        &self.signature
    }

    pub fn values(&self, role: Role) -> impl Iterator<Item = &ValueInfo> {
        self.signature.iter().filter(move |v| v.role == role)
    }

    fn bind_raw(&mut self, name: &str, raw: &RlxTensor) -> PluginResult<()> {
        // SAFETY: `exe` is live; name and descriptor are borrowed for the call (or outlive the executable, when BORROWED_PERSISTENT: keep_alive).
        self.plugin.check(unsafe {
            (self.plugin.api.executable_bind_param.unwrap())(self.exe, RlxStr::from_str(name), raw)
        })
    }

    /// Bind a param; the plugin copies it.
    pub fn bind_param(&mut self, name: &str, t: &HostTensor) -> PluginResult<()> {
        self.bind_param_ref(name, HostTensorRef::from(t))
    }

    /// Bind a param borrowed from the caller for the call; the plugin
    /// copies it (so the caller needs no copy of its own first).
    pub fn bind_param_ref(&mut self, name: &str, t: HostTensorRef<'_>) -> PluginResult<()> {
        let view =
            rlx_plugin_api::tensor::RawView::of(t.dtype, t.shape, t.data, ownership::BORROWED);
        self.bind_raw(name, &view.raw)
    }

    /// Bind a param without a copy: the tensor is kept alive here until
    /// after the executable is destroyed.
    pub fn bind_param_shared(&mut self, name: &str, t: Arc<HostTensor>) -> PluginResult<()> {
        let view = t.as_raw(ownership::BORROWED_PERSISTENT);
        self.bind_raw(name, &view.raw)?;
        self.keep_alive.push(t);
        Ok(())
    }

    /// The plugin's handle, for a caller that drives the raw table itself
    /// (tests of the ABI). Calls through it obey the ABI's rules: one
    /// call at a time (docs/ABI.md §14), and no use after this drops.
    pub fn raw_handle(&self) -> *mut RlxExecutable {
        self.exe
    }

    /// Run with named inputs.
    pub fn run(&mut self, inputs: &[(&str, &HostTensor)]) -> PluginResult<Vec<HostTensor>> {
        let refs: Vec<(&str, HostTensorRef<'_>)> = inputs
            .iter()
            .map(|(n, t)| (*n, HostTensorRef::from(*t)))
            .collect();
        self.run_refs(&refs)
    }

    /// Run with named inputs borrowed from the caller: the plugin reads them
    /// in place (it copies what it keeps), so nothing is copied here.
    pub fn run_refs(
        &mut self,
        inputs: &[(&str, HostTensorRef<'_>)],
    ) -> PluginResult<Vec<HostTensor>> {
        self.run_refs_with(inputs, |t| {
            Ok(HostTensor {
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                data: t.to_compact_bytes()?,
            })
        })
    }

    /// As [`PluginExecutable::run_refs`], with each output read in place by
    /// `read` (in order, once its dtype and shape are checked against the
    /// signature) and then released: a caller that converts the outputs
    /// anyway (to f32 values, into its own buffers) copies each once.
    pub fn run_refs_with<T>(
        &mut self,
        inputs: &[(&str, HostTensorRef<'_>)],
        mut read: impl FnMut(&TensorRef<'_>) -> PluginResult<T>,
    ) -> PluginResult<Vec<T>> {
        // Keep the views alive: the descriptors point into them.
        let borrowed = rlx_plugin_api::tensor::borrow_named_refs(inputs);
        let named = &borrowed.named;
        let n_out = self.values(Role::Output).count();
        let mut slots: smallvec::SmallVec<[RlxTensor; 4]> =
            smallvec::smallvec![RlxTensor::empty(); n_out];
        // SAFETY: the inputs point into `borrowed`, alive for the call;
        // `slots` has exactly the output count.
        unsafe { self.call(self.plugin.api.executable_run.unwrap(), named, &mut slots)? };
        self.read_slots(slots, |me, i, info, slot| {
            me.read_slot(i, info, slot, &mut read)
        })
    }

    /// (ABI 1.8) As [`PluginExecutable::run_refs_with`], with output `i`
    /// written by the plugin straight into `into[i]` where that is `Some`:
    /// room for exactly the compact row-major bytes of the output's
    /// declared dtype and shape (so only an output whose shape the
    /// signature fixes). The others are read with `read` and returned in
    /// their places; a written one's place is `None`. A plugin before 1.8
    /// (no `executable_run_into`) runs as before and the host copies each
    /// output into its buffer.
    pub fn run_refs_into<T>(
        &mut self,
        inputs: &[(&str, HostTensorRef<'_>)],
        into: &mut [Option<&mut [u8]>],
        read: impl FnMut(&TensorRef<'_>) -> PluginResult<T>,
    ) -> PluginResult<Vec<Option<T>>> {
        let lent: smallvec::SmallVec<[Option<LentBuffer>; 4]> = into
            .iter_mut()
            .map(|b| {
                b.as_deref_mut().map(|b| LentBuffer {
                    ptr: b.as_mut_ptr(),
                    len: b.len(),
                })
            })
            .collect();
        // SAFETY: each buffer is a `&mut [u8]` borrowed for this call, so
        // valid for writes of its length and aliased by nothing else.
        unsafe { self.run_refs_into_raw(inputs, &lent, read) }
    }

    /// [`PluginExecutable::run_refs_into`] with the buffers as pointers,
    /// which may point at uninitialised memory (a `Vec`'s spare capacity):
    /// a caller that allocates an output only to have it overwritten need
    /// not fill it first.
    ///
    /// # Safety
    /// Each `Some` buffer is valid for writes of `len` bytes for the call
    /// and overlaps no input and no other buffer. On `Ok`, every byte of
    /// each lent buffer has been written (by the plugin, which the ABI
    /// binds to write the whole output, or by the copy made here for a
    /// plugin before 1.8).
    pub unsafe fn run_refs_into_raw<T>(
        &mut self,
        inputs: &[(&str, HostTensorRef<'_>)],
        into: &[Option<LentBuffer>],
        read: impl FnMut(&TensorRef<'_>) -> PluginResult<T>,
    ) -> PluginResult<Vec<Option<T>>> {
        let dests: smallvec::SmallVec<[OutputDest; 4]> = into
            .iter()
            .map(|b| b.map_or(OutputDest::Read, OutputDest::Lend))
            .collect();
        // SAFETY: the caller's promise, carried over.
        unsafe { self.run_refs_dest_raw(inputs, &dests, read) }
    }

    /// [`PluginExecutable::run_refs_into_raw`] with each output's
    /// destination spelled out: read, lent (ABI 1.8) or skipped (1.9). A
    /// read output's place in the result is `Some`, the others' `None`.
    ///
    /// # Safety
    /// As for [`PluginExecutable::run_refs_into_raw`], for each lent buffer.
    pub unsafe fn run_refs_dest_raw<T>(
        &mut self,
        inputs: &[(&str, HostTensorRef<'_>)],
        dests: &[OutputDest],
        mut read: impl FnMut(&TensorRef<'_>) -> PluginResult<T>,
    ) -> PluginResult<Vec<Option<T>>> {
        let mut shapes = self.check_dests(dests)?;
        if dests.iter().all(|d| matches!(d, OutputDest::Read)) {
            // Nothing lent or skipped: the plain run, without the slots' checks.
            return self
                .run_refs_with(inputs, read)
                .map(|v| v.into_iter().map(Some).collect());
        }
        let Some(run_into) = self.plugin.api.executable_run_into else {
            // Before 1.8: the plugin hands each output over; copied here.
            let mut i = 0;
            return self.run_refs_with(inputs, |t| {
                let at = i;
                i += 1;
                match dests[at] {
                    OutputDest::Lend(buf) => {
                        let bytes = t.compact_cow()?;
                        if bytes.len() != buf.len {
                            return Err(PluginError::internal(format!(
                                "output {at} has {} bytes for a buffer of {}",
                                bytes.len(),
                                buf.len
                            )));
                        }
                        // SAFETY: the caller's promise: `buf` is valid for
                        // writes of `len` bytes and overlaps nothing read.
                        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr, buf.len) };
                        Ok(None)
                    }
                    OutputDest::Skip => Ok(None),
                    OutputDest::Read => read(t).map(Some),
                }
            });
        };
        let borrowed = rlx_plugin_api::tensor::borrow_named_refs(inputs);
        let named = &borrowed.named;
        let mut slots = self.dest_slots(dests, &mut shapes);
        // SAFETY: the inputs point into `borrowed` and the lent slots into
        // the caller's buffers and `shapes`, all alive for the call;
        // `slots` has exactly the output count.
        unsafe { self.call(run_into, named, &mut slots)? };
        self.read_dest_slots(slots, dests, &mut read)
    }

    /// Each destination checked against the signature before anything
    /// runs: the descriptors' shapes for the lent ones (empty for others).
    pub(super) fn check_dests(
        &self,
        dests: &[OutputDest],
    ) -> PluginResult<smallvec::SmallVec<[Dims<i64>; 4]>> {
        let n_out = self.values(Role::Output).count();
        if dests.len() != n_out {
            return Err(PluginError::invalid_argument(format!(
                "{} output destinations for {n_out} outputs",
                dests.len()
            )));
        }
        let mut shapes: smallvec::SmallVec<[Dims<i64>; 4]> = smallvec::SmallVec::new();
        for (info, dest) in self.values(Role::Output).zip(dests.iter()) {
            let OutputDest::Lend(buf) = dest else {
                shapes.push(Dims::new());
                continue;
            };
            if buf.ptr.is_null() {
                // A null data pointer asks for an owned output (the ABI's
                // rule): never what a lent buffer means.
                return Err(PluginError::invalid_argument(format!(
                    "the buffer for output {:?} is a null pointer",
                    info.name
                )));
            }
            let dims: Option<Dims<i64>> = info.shape.iter().map(|d| d.map(|d| d as i64)).collect();
            let need = info.shape.iter().try_fold(info.dtype.size_bytes(), |n, d| {
                d.and_then(|d| n.checked_mul(d))
            });
            match (dims, need) {
                (Some(dims), Some(need)) if need == buf.len => shapes.push(dims),
                _ => {
                    return Err(PluginError::invalid_argument(format!(
                        "the buffer for output {:?} has {} bytes; {}[{}] needs {}",
                        info.name,
                        buf.len,
                        info.dtype,
                        info.shape
                            .iter()
                            .map(|d| d.map_or("?".into(), |d| d.to_string()))
                            .collect::<Vec<_>>()
                            .join(", "),
                        need.map_or("a size known only at run time".into(), |n| n.to_string())
                    )))
                }
            }
        }
        Ok(shapes)
    }

    /// The output slots for `dests` (checked by `check_dests`, which made
    /// `shapes`): lent ones describe the caller's buffers.
    pub(super) fn dest_slots(
        &self,
        dests: &[OutputDest],
        shapes: &mut [Dims<i64>],
    ) -> smallvec::SmallVec<[RlxTensor; 4]> {
        dests
            .iter()
            .zip(shapes.iter_mut())
            .zip(self.values(Role::Output))
            .map(|((dest, shape), info)| match dest {
                OutputDest::Lend(buf) => RlxTensor::compact(
                    info.dtype,
                    buf.ptr as *mut c_void,
                    shape.as_mut_ptr(),
                    shape.len(),
                    ownership::BORROWED,
                ),
                OutputDest::Skip => {
                    let mut t = RlxTensor::empty();
                    t.ownership = ownership::SKIP;
                    t
                }
                OutputDest::Read => RlxTensor::empty(),
            })
            .collect()
    }

    /// After a call that succeeded: each read output read and released, a
    /// skipped one released if a plugin before 1.9 handed it over anyway.
    pub(super) fn read_dest_slots<T>(
        &self,
        slots: smallvec::SmallVec<[RlxTensor; 4]>,
        dests: &[OutputDest],
        read: &mut impl FnMut(&TensorRef<'_>) -> PluginResult<T>,
    ) -> PluginResult<Vec<Option<T>>> {
        self.read_slots(slots, |me, i, info, slot| match dests[i] {
            OutputDest::Read => me.read_slot(i, info, slot, read).map(Some),
            OutputDest::Skip if slot.ownership == ownership::OWNED => {
                // SAFETY: an OWNED tensor the plugin handed over, released once.
                unsafe { rlx_plugin_api::tensor::release(slot) };
                Ok(None)
            }
            _ => Ok(None),
        })
    }

    /// One run call into the plugin, its status as a result.
    ///
    /// # Safety
    /// `named` and `slots` (and whatever they point at) are valid for the
    /// call, and `slots` has exactly the output count.
    pub(super) unsafe fn call(
        &self,
        run: RlxRunFn,
        named: &[RlxNamedTensor],
        slots: &mut [RlxTensor],
    ) -> PluginResult<()> {
        // SAFETY: `exe` is live; the rest is the caller's promise.
        self.plugin.check(unsafe {
            run(
                self.exe,
                named.as_ptr(),
                named.len(),
                slots.as_mut_ptr(),
                slots.len(),
            )
        })
    }

    /// Each slot handled by `each` (in order) after a successful run:
    /// every slot is read, then released, before an error is reported.
    pub(super) fn read_slots<U>(
        &self,
        slots: smallvec::SmallVec<[RlxTensor; 4]>,
        mut each: impl FnMut(&Self, usize, &ValueInfo, RlxTensor) -> PluginResult<U>,
    ) -> PluginResult<Vec<U>> {
        let mut first_error = None;
        let mut outs = Vec::with_capacity(slots.len());
        for (i, (slot, info)) in slots.into_iter().zip(self.values(Role::Output)).enumerate() {
            match each(self, i, info, slot) {
                Ok(v) => outs.push(v),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(outs),
        }
    }

    /// Read output `i`'s `OWNED` slot with `read`, once its dtype and shape
    /// are checked against `info`, its signature, then release it.
    pub(super) fn read_slot<T>(
        &self,
        i: usize,
        info: &ValueInfo,
        slot: RlxTensor,
        read: &mut impl FnMut(&TensorRef<'_>) -> PluginResult<T>,
    ) -> PluginResult<T> {
        // SAFETY: the plugin wrote an OWNED tensor (or left the empty slot) in the slot.
        let got = unsafe { TensorRef::from_raw(&slot) }
            .map_err(|e| {
                // The call succeeded: an output that cannot be read is
                // the plugin's fault, not the caller's.
                PluginError::internal(format!(
                    "plugin {} reported success but returned a malformed output {i}: {}",
                    self.plugin.descriptor.name, e.message
                ))
            })
            .and_then(|t| {
                self.check_output(i, info, &t)?;
                read(&t)
            });
        // SAFETY: each slot is released once, here, after its last read.
        unsafe { rlx_plugin_api::tensor::release(slot) };
        got
    }

    /// Each output must have the dtype and shape the executable's
    /// signature declares: a plugin that returns something else is reported
    /// (naming the output, what came and what was declared) rather than
    /// handed on to be misread.
    fn check_output(&self, i: usize, v: &ValueInfo, o: &TensorRef<'_>) -> PluginResult<()> {
        let shape_ok = o.shape.len() == v.shape.len()
            && o.shape
                .iter()
                .zip(&v.shape)
                .all(|(g, w)| w.is_none_or(|w| w == *g));
        if o.dtype != v.dtype || !shape_ok {
            let declared: Vec<String> = v
                .shape
                .iter()
                .map(|d| d.map_or("?".into(), |d| d.to_string()))
                .collect();
            return Err(PluginError::internal(format!(
                "plugin {} returned output {i} {:?} as {}{:?}, but its signature declares \
                 {}[{}]",
                self.plugin.descriptor.name,
                v.name,
                o.dtype,
                o.shape,
                v.dtype,
                declared.join(", ")
            )));
        }
        Ok(())
    }

    pub fn plugin(&self) -> &Arc<LoadedPlugin> {
        &self.plugin
    }

    /// A 1.9 root-table function, or `UNSUPPORTED` naming what was asked.
    fn optional<F>(&self, f: Option<F>, what: &str) -> PluginResult<F> {
        f.ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {} cannot {what} (ABI 1.9)",
                self.plugin.descriptor.name
            ))
        })
    }

    /// (ABI 1.9) Overwrite bytes `byte_offset ..` of the bound param
    /// `name` with `data`.
    pub fn bind_param_range(
        &mut self,
        name: &str,
        byte_offset: usize,
        data: &[u8],
    ) -> PluginResult<()> {
        let f = self.optional(
            self.plugin.api.executable_bind_param_range,
            "overwrite part of a param",
        )?;
        // SAFETY: `exe` is live; name and data are borrowed for the call.
        self.plugin.check(unsafe {
            f(
                self.exe,
                RlxStr::from_str(name),
                byte_offset as u64,
                data.as_ptr() as *const c_void,
                data.len(),
            )
        })
    }

    /// (ABI 1.9) The RNG policy (`tables::rng_policy`) and seed from the
    /// next run on.
    pub fn set_rng(&mut self, policy: u32, seed: u64) -> PluginResult<()> {
        let f = self.optional(self.plugin.api.executable_set_rng, "change its RNG")?;
        // SAFETY: `exe` is live.
        self.plugin.check(unsafe { f(self.exe, policy, seed) })
    }

    /// (ABI 1.9) Compute only `active` of `upper` rows along axis 0 from
    /// the next run on (`None` clears).
    pub fn set_active_extent(&mut self, extent: Option<(usize, usize)>) -> PluginResult<()> {
        let f = self.optional(
            self.plugin.api.executable_set_active_extent,
            "narrow its runs",
        )?;
        let (a, u) = extent.map_or((0, 0), |(a, u)| (a as u64, u as u64));
        // SAFETY: `exe` is live.
        self.plugin.check(unsafe { f(self.exe, a, u) })
    }

    /// (ABI 1.4) The device the executable runs on, as the plugin says;
    /// None from a plugin that does not say (before 1.4, or no answer).
    pub fn device(&self) -> Option<DeviceInfo> {
        let f = self.plugin.api.executable_device?;
        let mut out = RlxDeviceInfo {
            struct_size: RlxDeviceInfo::STRUCT_SIZE,
            kind: 0,
            ordinal: 0,
            name: RlxStr::EMPTY,
            memory_bytes: 0,
        };
        // SAFETY: `exe` is live; `out` is a writable out-struct sized here.
        if let Err(e) = self.plugin.check(unsafe { f(self.exe, &mut out) }) {
            log::warn!(
                "plugin {}: executable_device failed: {e}",
                self.plugin.descriptor.name
            );
            return None;
        }
        let out = read_written(&out);
        let Some(kind) = DeviceKind::from_raw(out.kind) else {
            // Kind 0 is what this host wrote: the plugin wrote nothing.
            log::warn!(
                "plugin {}: executable_device succeeded but wrote device kind {}{}",
                self.plugin.descriptor.name,
                out.kind,
                if out.kind == 0 {
                    " (nothing written)"
                } else {
                    ", unknown to this host"
                }
            );
            return None;
        };
        Some(DeviceInfo {
            kind,
            ordinal: out.ordinal,
            // SAFETY: valid until the executable is destroyed; copied now.
            name: unsafe { out.name.to_string_lossy() },
            memory_bytes: out.memory_bytes,
        })
    }
}

impl Drop for PluginExecutable {
    fn drop(&mut self) {
        // SAFETY: `exe` came from this plugin's compile and is destroyed once.
        unsafe { (self.plugin.api.executable_destroy.unwrap())(self.exe) };
        // keep_alive drops after this body: the plugin no longer aliases it.
    }
}
