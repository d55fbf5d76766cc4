//! Header §8: the custom-op registry behind `RlxCustomOpApi`, and kernels
//! registered through it by another party.

use super::args::{copy_inputs, non_null_mut, read_arg, slice_or_empty, write_out, write_outputs};
use super::loaded::loaded;
use super::status::{guard, take_status};
use crate::custom_ops::{
    CustomImpl, CustomKernel, CustomOp, CustomOpInfo, Origin, OwnedKernel, ShapeFn, ShapeRule,
    TensorType, TensorView, TensorViewMut,
};
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::sized::AbiStruct;
use crate::strings::RlxStr;
use crate::tables::*;
use crate::tensor::{ownership, HostTensor, RawView, RlxTensor};
use std::ffi::c_void;
use std::sync::Arc;

pub(super) static CUSTOM_OP_API: RlxCustomOpApi = RlxCustomOpApi {
    struct_size: RlxCustomOpApi::STRUCT_SIZE,
    register_op: Some(custom_register),
    unregister: Some(custom_unregister),
    lookup: Some(custom_lookup),
    list: Some(custom_list),
    execute: Some(custom_execute),
    infer_shape: Some(custom_infer_shape),
    execute_attrs: Some(custom_execute_attrs),
};

unsafe fn str_arg<'a>(s: RlxStr, what: &str) -> PluginResult<&'a str> {
    s.to_str()
        .map_err(|e| PluginError::invalid_argument(format!("{what} is not UTF-8: {e}")))
}

/// The registering party's context: dropped with its own function once the
/// last user (kernel, shape callback, an executable holding the op) is gone.
struct ForeignCtx {
    ctx: *mut c_void,
    drop: Option<unsafe extern "C" fn(*mut c_void)>,
}

// SAFETY: the registering party promises its kernel, shape callback and context may be used from any thread (docs/ABI.md, threading).
unsafe impl Send for ForeignCtx {}
// SAFETY: as for Send: callable from any thread, concurrently.
unsafe impl Sync for ForeignCtx {}

impl Drop for ForeignCtx {
    fn drop(&mut self) {
        if let Some(d) = self.drop.take() {
            // SAFETY: the registering party's drop, called once with the context it gave.
            unsafe { d(self.ctx) };
        }
    }
}

/// Borrowed descriptors of kernel inputs, alive with the views.
fn input_raws<'a>(inputs: &[TensorView<'a>]) -> Vec<RawView<'a>> {
    inputs
        .iter()
        .map(|t| RawView::of(t.dtype, t.shape, t.data, ownership::BORROWED))
        .collect()
}

fn owned_kernel(kernel: RlxCustomKernelFn, ctx: Arc<ForeignCtx>, n_outputs: usize) -> OwnedKernel {
    Arc::new(move |inputs: &[TensorView], _attrs: &[u8]| {
        let views = input_raws(inputs);
        let raws: Vec<RlxTensor> = views.iter().map(|v| v.raw).collect();
        let mut slots = vec![RlxTensor::empty(); n_outputs];
        // SAFETY: the descriptors in `raws` point into the inputs, alive for the call; `slots` has room for n_outputs tensors.
        let st = unsafe {
            kernel(
                ctx.ctx,
                raws.as_ptr(),
                raws.len(),
                slots.as_mut_ptr(),
                slots.len(),
            )
        };
        // SAFETY: a kernel's error status is made with this plugin's status_new (the ABI's rule).
        unsafe { take_status(st) }?;
        slots
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                // SAFETY: on success the kernel wrote an OWNED tensor into every slot.
                unsafe { HostTensor::take_raw(s) }
                    .map_err(|e| e.context(format!("kernel output {i}")))
            })
            .collect()
    })
}

fn into_kernel(kernel: RlxCustomKernelIntoFn, ctx: Arc<ForeignCtx>) -> CustomKernel {
    Arc::new(
        move |inputs: &[TensorView], outputs: &mut [TensorViewMut], attrs: &[u8]| {
            let ins = input_raws(inputs);
            let in_raws: Vec<RlxTensor> = ins.iter().map(|v| v.raw).collect();
            let outs: Vec<RawView> = outputs
                .iter_mut()
                .map(|t| RawView::of_mut(t.dtype, t.shape, t.data, ownership::BORROWED))
                .collect();
            let out_raws: Vec<RlxTensor> = outs.iter().map(|v| v.raw).collect();
            // SAFETY: every descriptor points into memory alive for the call; the outputs' memory is writable (of_mut).
            let st = unsafe {
                kernel(
                    ctx.ctx,
                    attrs.as_ptr(),
                    attrs.len(),
                    in_raws.as_ptr(),
                    in_raws.len(),
                    out_raws.as_ptr(),
                    out_raws.len(),
                )
            };
            // SAFETY: a kernel's error status is made with this plugin's status_new.
            unsafe { take_status(st) }
        },
    )
}

fn shape_callback(f: RlxCustomShapeFn, ctx: Arc<ForeignCtx>) -> ShapeFn {
    Arc::new(move |inputs: &[TensorType], attrs: &[u8]| {
        let infos: Vec<RlxValueInfo> = inputs.iter().map(TensorType::value_info).collect();
        let ptrs: Vec<*const RlxValueInfo> = infos.iter().map(|i| i as *const _).collect();
        let mut out = RlxShapeOut {
            struct_size: RlxShapeOut::STRUCT_SIZE,
            dtype: crate::tensor::DType::F32.to_dl(),
            ndim: -1,
            dims: [0; CUSTOM_MAX_NDIM],
        };
        // SAFETY: the records and the shapes they point at live for the call; `out` is writable.
        let st = unsafe {
            f(
                ctx.ctx,
                attrs.as_ptr(),
                attrs.len(),
                ptrs.as_ptr(),
                ptrs.len(),
                &mut out,
            )
        };
        // SAFETY: the callback's error status is made with this plugin's status_new.
        unsafe { take_status(st) }?;
        TensorType::from_shape_out(&out).map_err(|e| e.context("the shape callback's answer"))
    })
}

/// Read a descriptor into an op.
unsafe fn read_desc(d: &RlxCustomOpDesc) -> PluginResult<CustomOp> {
    // Own the context first, so it is dropped on any error below.
    let ctx = Arc::new(ForeignCtx {
        ctx: d.kernel_ctx,
        drop: d.kernel_ctx_drop,
    });
    let name = str_arg(d.name, "custom op name")?.to_string();
    let description = str_arg(d.description, "custom op description")?.to_string();
    let composite = str_arg(d.composite, "custom op composite body")?;
    let imp = if !composite.is_empty() {
        CustomImpl::Composite(composite.into())
    } else if let Some(k) = d.kernel_into {
        CustomImpl::Kernel(into_kernel(k, ctx.clone()))
    } else if let Some(k) = d.kernel {
        CustomImpl::Owned(owned_kernel(k, ctx.clone(), d.n_outputs as usize))
    } else {
        return Err(PluginError::invalid_argument(format!(
            "custom op {name:?} has no kernel, kernel_into or composite body"
        )));
    };
    let shape = match d.shape_rule {
        shape_rule::NONE if matches!(imp, CustomImpl::Composite(_)) => ShapeRule::Body,
        shape_rule::NONE => ShapeRule::None,
        shape_rule::SAME_AS_INPUT => ShapeRule::SameAsInput(d.shape_input),
        shape_rule::BROADCAST => ShapeRule::Broadcast,
        shape_rule::CALLBACK => ShapeRule::Callback(shape_callback(
            d.shape_fn.ok_or_else(|| {
                PluginError::invalid_argument(format!(
                    "custom op {name:?}: shape rule CALLBACK needs shape_fn"
                ))
            })?,
            ctx.clone(),
        )),
        shape_rule::BODY if matches!(imp, CustomImpl::Composite(_)) => ShapeRule::Body,
        shape_rule::BODY => {
            return Err(PluginError::invalid_argument(format!(
                "custom op {name:?}: shape rule BODY is for composite ops"
            )))
        }
        other => {
            return Err(PluginError::invalid_argument(format!(
                "custom op {name:?}: unknown shape rule {other}"
            )))
        }
    };
    Ok(
        CustomOp::new(name, description, d.n_inputs, Origin::Host, imp)
            .with_outputs(d.n_outputs)
            .with_shape(shape)
            // The context lives as long as the op, whatever uses it.
            .with_owner(ctx),
    )
}

unsafe extern "C" fn custom_register(desc: *const RlxCustomOpDesc) -> *mut RlxStatus {
    guard(|| {
        let d = read_arg(desc, "desc")?;
        let op = read_desc(&d)?;
        loaded()?.registry.register(op)
    })
}

unsafe extern "C" fn custom_unregister(name: RlxStr) -> *mut RlxStatus {
    guard(|| {
        loaded()?
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
    let v = read_arg(v, "visitor")?;
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
    let (shape_rule, shape_input) = i.shape_rule.to_raw();
    let raw = RlxCustomOpInfo {
        struct_size: RlxCustomOpInfo::STRUCT_SIZE,
        name: RlxStr::from_str(&i.name),
        description: RlxStr::from_str(&i.description),
        n_inputs: i.n_inputs,
        n_outputs: i.n_outputs,
        origin: i.origin.to_raw(),
        reserved0: 0,
        kind: i.kind.to_raw(),
        shape_rule,
        shape_input,
        reserved1: 0,
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
        let info = loaded()?
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
        for info in loaded()?.registry.list() {
            visit_info(visit, ctx, &info);
        }
        Ok(())
    })
}

unsafe fn execute_with(
    name: RlxStr,
    attrs: &[u8],
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> PluginResult<()> {
    let name = str_arg(name, "custom op name")?;
    let ins = copy_inputs(inputs, n_inputs)?;
    let outs = loaded()?.registry.execute(name, &ins, attrs)?;
    if outs.len() != n_outputs {
        return Err(PluginError::invalid_argument(format!(
            "custom op {name:?} has {} outputs but the caller passed {n_outputs} slots",
            outs.len()
        )));
    }
    write_outputs(outs, outputs, n_outputs).map(|_| ())
}

unsafe extern "C" fn custom_execute(
    name: RlxStr,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    guard(|| execute_with(name, &[], inputs, n_inputs, outputs, n_outputs))
}

unsafe extern "C" fn custom_execute_attrs(
    name: RlxStr,
    attrs: *const u8,
    attrs_len: usize,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    guard(|| {
        let attrs = slice_or_empty(attrs, attrs_len, "attrs")?;
        execute_with(name, attrs, inputs, n_inputs, outputs, n_outputs)
    })
}

unsafe extern "C" fn custom_infer_shape(
    name: RlxStr,
    attrs: *const u8,
    attrs_len: usize,
    inputs: *const *const RlxValueInfo,
    n_inputs: usize,
    out: *mut RlxShapeOut,
) -> *mut RlxStatus {
    guard(|| {
        let name = str_arg(name, "custom op name")?;
        let attrs = slice_or_empty(attrs, attrs_len, "attrs")?;
        let out = non_null_mut(out, "out")?;
        let types = slice_or_empty(inputs, n_inputs, "inputs")?
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let v = read_arg(*p, "input")?;
                TensorType::from_value_info(&v).map_err(|e| e.context(format!("input {i}")))
            })
            .collect::<PluginResult<Vec<_>>>()?;
        let t = loaded()?.registry.infer_shape(name, &types, attrs)?;
        write_out(out, t.to_shape_out()?);
        Ok(())
    })
}
