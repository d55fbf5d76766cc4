//! A loaded plugin's custom-op registry (header §8), used safely: ops the
//! host registers (kernels written in Rust, composites), and what the
//! plugin's registry knows.

use super::plugin::{take_outputs, LoadedPlugin};
use rlx_plugin_api::custom_ops::{
    CustomImpl, CustomKind, CustomOp, CustomOpInfo, Origin, OwnedKernel, ShapeRule, ShapeRuleKind,
    TensorType, TensorView, TensorViewMut,
};
use rlx_plugin_api::error::{PluginError, PluginResult, RlxStatus, StatusCode};
use rlx_plugin_api::sized::AbiStruct;
use rlx_plugin_api::strings::RlxStr;
use rlx_plugin_api::tables::*;
use rlx_plugin_api::tensor::{HostTensor, RlxTensor, TensorRef};
use std::ffi::c_void;
use std::sync::Arc;

/// The first minor whose registry takes attributes, shape rules,
/// composites and in-place kernels.
const CUSTOM_1_5: u32 = 5;

impl LoadedPlugin {
    fn custom(&self) -> PluginResult<&RlxCustomOpApi> {
        self.custom.as_ref().ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {} (ABI {}) has no custom-op registry (added in ABI 1.1)",
                self.descriptor.name, self.api.abi_version
            ))
        })
    }

    fn custom_fn<T: Copy>(f: Option<T>, name: &str) -> PluginResult<T> {
        f.ok_or_else(|| {
            PluginError::unsupported(format!(
                "the custom-op registry lacks `{name}` (ABI 1.5 added infer_shape and execute_attrs)"
            ))
        })
    }

    /// Register a host kernel of the ABI 1.1 form (it returns its
    /// outputs; no attributes, no shape rule).
    pub fn register_custom_op(
        &self,
        name: &str,
        description: &str,
        n_inputs: u32,
        n_outputs: u32,
        kernel: impl Fn(&[HostTensor]) -> PluginResult<Vec<HostTensor>> + Send + Sync + 'static,
    ) -> PluginResult<()> {
        let owned: OwnedKernel = Arc::new(move |ins: &[TensorView], _attrs: &[u8]| {
            let ins: Vec<HostTensor> = ins
                .iter()
                .map(TensorView::to_host)
                .collect::<PluginResult<_>>()?;
            kernel(&ins)
        });
        self.register_op(
            CustomOp::new(
                name,
                description,
                n_inputs,
                Origin::Host,
                CustomImpl::Owned(owned),
            )
            .with_outputs(n_outputs),
        )
    }

    /// Register an op in the plugin's registry: a kernel (in place, with
    /// attributes; ABI 1.5), an ABI 1.1 kernel, or a composite (1.5). The
    /// op's origin reads as host whatever `op.info.origin` says.
    pub fn register_op(&self, op: CustomOp) -> PluginResult<()> {
        let api = self.custom()?;
        let register = Self::custom_fn(api.register_op, "register_op")?;
        let minor = self.api.abi_version.minor;
        let needs_1_5 =
            !matches!(op.imp, CustomImpl::Owned(_)) || !matches!(op.shape, ShapeRule::None);
        if needs_1_5 && minor < CUSTOM_1_5 {
            return Err(PluginError::unsupported(format!(
                "plugin {} speaks ABI {}: in-place kernels, composites and shape rules need 1.5",
                self.descriptor.name, self.api.abi_version
            )));
        }
        let (kernel, kernel_into, composite) = match &op.imp {
            CustomImpl::Owned(_) => (Some(owned_trampoline as RlxCustomKernelFn), None, None),
            CustomImpl::Kernel(_) => (None, Some(into_trampoline as RlxCustomKernelIntoFn), None),
            CustomImpl::Composite(body) => (None, None, Some(body.clone())),
            CustomImpl::Native => {
                return Err(PluginError::invalid_argument(format!(
                    "custom op {:?}: only a plugin registers native ops",
                    op.info.name
                )))
            }
        };
        let (shape_rule, shape_input) = op.shape.kind().to_raw();
        let shape_fn = matches!(op.shape, ShapeRule::Callback(_))
            .then_some(shape_trampoline as RlxCustomShapeFn);
        let name = op.info.name.clone();
        let description = op.info.description.clone();
        let (n_inputs, n_outputs) = (op.info.n_inputs, op.info.n_outputs);
        let ctx = Box::new(HostOp {
            status_new: self.api.status_new.unwrap(),
            op,
        });
        let mut desc = RlxCustomOpDesc {
            struct_size: RlxCustomOpDesc::STRUCT_SIZE,
            name: RlxStr::from_str(&name),
            description: RlxStr::from_str(&description),
            n_inputs,
            n_outputs,
            kernel,
            kernel_ctx: Box::into_raw(ctx) as *mut c_void,
            kernel_ctx_drop: Some(drop_host_op),
            kernel_into,
            composite: composite
                .as_deref()
                .map(RlxStr::from_str)
                .unwrap_or(RlxStr::from_static("")),
            shape_rule,
            shape_input,
            shape_fn,
        };
        if minor < CUSTOM_1_5 {
            desc.struct_size = CUSTOM_OP_DESC_SIZE_1_1;
        }
        // SAFETY: `desc` and its strings are borrowed for the call; ownership of kernel_ctx moves to the plugin, which drops it with drop_host_op.
        self.check(unsafe { register(&desc) })
    }

    pub fn unregister_custom_op(&self, name: &str) -> PluginResult<()> {
        let f = Self::custom_fn(self.custom()?.unregister, "unregister")?;
        // SAFETY: the name is borrowed for the call.
        self.check(unsafe { f(RlxStr::from_str(name)) })
    }

    pub fn lookup_custom_op(&self, name: &str) -> PluginResult<CustomOpInfo> {
        let f = Self::custom_fn(self.custom()?.lookup, "lookup")?;
        let mut found: Vec<CustomOpInfo> = Vec::new();
        let visitor = RlxCustomOpVisitor {
            struct_size: RlxCustomOpVisitor::STRUCT_SIZE,
            ctx: &mut found as *mut _ as *mut c_void,
            visit: Some(collect_info),
        };
        // SAFETY: the name and visitor are borrowed for the call; the visitor's ctx is `found`.
        self.check(unsafe { f(RlxStr::from_str(name), &visitor) })?;
        found
            .pop()
            .ok_or_else(|| PluginError::not_found(format!("no custom op named {name:?}")))
    }

    pub fn list_custom_ops(&self) -> PluginResult<Vec<CustomOpInfo>> {
        let f = Self::custom_fn(self.custom()?.list, "list")?;
        let mut found: Vec<CustomOpInfo> = Vec::new();
        let visitor = RlxCustomOpVisitor {
            struct_size: RlxCustomOpVisitor::STRUCT_SIZE,
            ctx: &mut found as *mut _ as *mut c_void,
            visit: Some(collect_info),
        };
        // SAFETY: the visitor is borrowed for the call; its ctx is `found`.
        self.check(unsafe { f(&visitor) })?;
        Ok(found)
    }

    /// The output type of op `name` for inputs of these types (ABI 1.5).
    pub fn infer_custom_shape(
        &self,
        name: &str,
        inputs: &[TensorType],
        attrs: &[u8],
    ) -> PluginResult<TensorType> {
        let f = Self::custom_fn(self.custom()?.infer_shape, "infer_shape")?;
        let infos: Vec<RlxValueInfo> = inputs.iter().map(TensorType::value_info).collect();
        let ptrs: Vec<*const RlxValueInfo> = infos.iter().map(|i| i as *const _).collect();
        let mut out = RlxShapeOut {
            struct_size: RlxShapeOut::STRUCT_SIZE,
            dtype: rlx_plugin_api::tensor::DType::F32.to_dl(),
            ndim: 0,
            dims: [0; CUSTOM_MAX_NDIM],
        };
        // SAFETY: every pointer is borrowed for the call; `out` is writable and says its size.
        self.check(unsafe {
            f(
                RlxStr::from_str(name),
                attrs.as_ptr(),
                attrs.len(),
                ptrs.as_ptr(),
                ptrs.len(),
                &mut out,
            )
        })?;
        if out.struct_size < RlxShapeOut::STRUCT_SIZE {
            return Err(PluginError::internal(format!(
                "infer_shape wrote {} bytes of a {}-byte answer",
                out.struct_size,
                RlxShapeOut::STRUCT_SIZE
            )));
        }
        TensorType::from_shape_out(&out)
    }

    pub fn execute_custom_op(
        &self,
        name: &str,
        inputs: &[HostTensor],
        n_outputs: usize,
    ) -> PluginResult<Vec<HostTensor>> {
        let f = Self::custom_fn(self.custom()?.execute, "execute")?;
        // Keep the views alive: the descriptors point into them.
        let borrowed = rlx_plugin_api::tensor::borrow_all(inputs);
        let raws = &borrowed.raws;
        let mut slots = vec![RlxTensor::empty(); n_outputs];
        // SAFETY: the inputs point into `borrowed`, alive for the call; `slots` has n_outputs entries.
        self.check(unsafe {
            f(
                RlxStr::from_str(name),
                raws.as_ptr(),
                raws.len(),
                slots.as_mut_ptr(),
                slots.len(),
            )
        })?;
        take_outputs(slots.into_iter())
    }

    /// Run op `name` with attributes outside a graph (ABI 1.5).
    pub fn execute_custom_op_with(
        &self,
        name: &str,
        inputs: &[HostTensor],
        attrs: &[u8],
        n_outputs: usize,
    ) -> PluginResult<Vec<HostTensor>> {
        let f = Self::custom_fn(self.custom()?.execute_attrs, "execute_attrs")?;
        let borrowed = rlx_plugin_api::tensor::borrow_all(inputs);
        let raws = &borrowed.raws;
        let mut slots = vec![RlxTensor::empty(); n_outputs];
        // SAFETY: the inputs and attrs are borrowed for the call; `slots` has n_outputs entries.
        self.check(unsafe {
            f(
                RlxStr::from_str(name),
                attrs.as_ptr(),
                attrs.len(),
                raws.as_ptr(),
                raws.len(),
                slots.as_mut_ptr(),
                slots.len(),
            )
        })?;
        take_outputs(slots.into_iter())
    }
}

unsafe extern "C" fn collect_info(ctx: *mut c_void, info: *const RlxCustomOpInfo) {
    // A panic must not unwind into the plugin.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the Vec this host passed with the visitor; `info`
        // is null or the plugin's record, readable for its struct_size.
        let (Some(out), Some(i)) = (
            unsafe { (ctx as *mut Vec<CustomOpInfo>).as_mut() },
            unsafe { super::plugin::read_sized(info) },
        ) else {
            return;
        };
        // SAFETY: the record's strings are borrowed for this call.
        out.push(unsafe {
            CustomOpInfo {
                name: i.name.to_string_lossy(),
                description: i.description.to_string_lossy(),
                n_inputs: i.n_inputs,
                n_outputs: i.n_outputs,
                origin: Origin::from_raw(i.origin),
                // A record before 1.5 reads as zero here: a kernel without a rule.
                kind: CustomKind::from_raw(i.kind),
                shape_rule: ShapeRuleKind::from_raw(i.shape_rule, i.shape_input),
            }
        });
    }));
}

/// An op the host registered: the context the plugin holds.
struct HostOp {
    /// The plugin's status allocator: a kernel's error must be the plugin's.
    status_new: unsafe extern "C" fn(u32, RlxStr) -> *mut RlxStatus,
    op: CustomOp,
}

impl HostOp {
    fn status(&self, e: PluginError) -> *mut RlxStatus {
        // SAFETY: the plugin's own status_new, with a message borrowed for the call.
        unsafe { (self.status_new)(e.code as u32, RlxStr::from_str(&e.message)) }
    }

    /// Run `f`, turning an error or a panic into the plugin's status.
    fn answer(&self, what: &str, f: impl FnOnce() -> PluginResult<()>) -> *mut RlxStatus {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(Ok(())) => std::ptr::null_mut(),
            Ok(Err(e)) => self.status(e),
            Err(p) => self.status(PluginError::new(
                StatusCode::Panic,
                format!(
                    "{what} of custom op {:?} panicked: {}",
                    self.op.info.name,
                    rlx_plugin_api::error::panic_message(&*p)
                ),
            )),
        }
    }
}

/// Compact views of borrowed descriptors (a strided one is gathered into
/// `keep`, which must outlive the views).
unsafe fn views<'a>(
    raws: &'a [RlxTensor],
    keep: &'a mut Vec<Vec<u8>>,
    shapes: &'a mut Vec<Vec<usize>>,
) -> PluginResult<Vec<TensorView<'a>>> {
    let refs: Vec<TensorRef<'a>> = raws
        .iter()
        .enumerate()
        .map(|(i, r)| TensorRef::from_raw(r).map_err(|e| e.context(format!("input {i}"))))
        .collect::<PluginResult<_>>()?;
    for r in &refs {
        shapes.push(r.shape.to_vec());
        if r.compact_bytes().is_none() {
            keep.push(r.to_compact_bytes()?);
        }
    }
    let mut gathered = keep.iter();
    Ok(refs
        .iter()
        .zip(shapes.iter())
        .map(|(r, shape)| TensorView {
            dtype: r.dtype,
            shape,
            data: match r.compact_bytes() {
                Some(b) => b,
                None => gathered.next().expect("gathered above"),
            },
        })
        .collect())
}

unsafe extern "C" fn owned_trampoline(
    ctx: *mut c_void,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    let Some(h) = (ctx as *const HostOp).as_ref() else {
        return std::ptr::null_mut();
    };
    h.answer("the kernel", || {
        let CustomImpl::Owned(k) = &h.op.imp else {
            return Err(PluginError::internal("not an owned kernel"));
        };
        let raws = if n_inputs == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(inputs, n_inputs)
        };
        let (mut keep, mut shapes) = (Vec::new(), Vec::new());
        let ins = views(raws, &mut keep, &mut shapes)?;
        let outs = k(&ins, &[])?;
        if outs.len() != n_outputs {
            return Err(PluginError::internal(format!(
                "host kernel returned {} outputs, {n_outputs} expected",
                outs.len()
            )));
        }
        for (i, t) in outs.into_iter().enumerate() {
            outputs.add(i).write(t.into_raw_owned());
        }
        Ok(())
    })
}

unsafe extern "C" fn into_trampoline(
    ctx: *mut c_void,
    attrs: *const u8,
    attrs_len: usize,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *const RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    let Some(h) = (ctx as *const HostOp).as_ref() else {
        return std::ptr::null_mut();
    };
    h.answer("the kernel", || {
        let CustomImpl::Kernel(k) = &h.op.imp else {
            return Err(PluginError::internal("not an in-place kernel"));
        };
        let slice = |p: *const RlxTensor, n: usize| {
            if n == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(p, n)
            }
        };
        let attrs = if attrs_len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(attrs, attrs_len)
        };
        let (mut keep, mut shapes) = (Vec::new(), Vec::new());
        let ins = views(slice(inputs, n_inputs), &mut keep, &mut shapes)?;
        let out_raws = slice(outputs, n_outputs);
        let out_refs: Vec<TensorRef> = out_raws
            .iter()
            .map(|r| TensorRef::from_raw(r))
            .collect::<PluginResult<_>>()?;
        let mut outs: Vec<TensorViewMut> = Vec::with_capacity(out_refs.len());
        for (i, (r, raw)) in out_refs.iter().zip(out_raws).enumerate() {
            if !r.is_compact() {
                return Err(PluginError::invalid_argument(format!(
                    "output {i} is not compact row-major"
                )));
            }
            let n = r.numel() * r.dtype.size_bytes();
            outs.push(TensorViewMut {
                dtype: r.dtype,
                shape: &r.shape,
                // SAFETY: the plugin allocated this output, compact and writable for the call (ABI §8).
                data: std::slice::from_raw_parts_mut(
                    (raw.dl.data as *mut u8).add(raw.dl.byte_offset as usize),
                    n,
                ),
            });
        }
        k(&ins, &mut outs, attrs)
    })
}

unsafe extern "C" fn shape_trampoline(
    ctx: *mut c_void,
    attrs: *const u8,
    attrs_len: usize,
    inputs: *const *const RlxValueInfo,
    n_inputs: usize,
    out: *mut RlxShapeOut,
) -> *mut RlxStatus {
    let Some(h) = (ctx as *const HostOp).as_ref() else {
        return std::ptr::null_mut();
    };
    h.answer("the shape rule", || {
        let ShapeRule::Callback(f) = &h.op.shape else {
            return Err(PluginError::internal("the op has no shape callback"));
        };
        let attrs = if attrs_len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(attrs, attrs_len)
        };
        let ptrs = if n_inputs == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(inputs, n_inputs)
        };
        let types = ptrs
            .iter()
            .map(|p| {
                let v = super::plugin::read_sized(*p)
                    .ok_or_else(|| PluginError::invalid_argument("an input record is null"))?;
                TensorType::from_value_info(&v)
            })
            .collect::<PluginResult<Vec<_>>>()?;
        let t = f(&types, attrs)?;
        let out = out
            .as_mut()
            .ok_or_else(|| PluginError::invalid_argument("`out` is null"))?;
        // The out-struct rule: 0 is the struct's first size, which for
        // RlxShapeOut (1.5) is this one.
        let size = match out.struct_size {
            0 => RlxShapeOut::STRUCT_SIZE,
            n => n.min(RlxShapeOut::STRUCT_SIZE),
        };
        let v = t.to_shape_out()?;
        std::ptr::copy_nonoverlapping(
            &v as *const RlxShapeOut as *const u8,
            out as *mut RlxShapeOut as *mut u8,
            size,
        );
        out.struct_size = size;
        Ok(())
    })
}

unsafe extern "C" fn drop_host_op(ctx: *mut c_void) {
    if !ctx.is_null() {
        // Dropping runs the user's closures' destructors: keep a panic here.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `ctx` is the Box this host leaked in register_op, and
            // the plugin drops it once.
            drop(unsafe { Box::from_raw(ctx as *mut HostOp) })
        }));
    }
}
