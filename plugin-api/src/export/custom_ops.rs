//! Header §8: the custom-op registry behind `RlxCustomOpApi`, and kernels
//! registered through it by another party.

use super::args::{copy_inputs, read_arg, write_outputs};
use super::entry::state;
use super::status::{guard, take_status};
use crate::custom_ops::{CustomKernel, CustomOpInfo, Origin};
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::sized::AbiStruct;
use crate::strings::RlxStr;
use crate::tables::*;
use crate::tensor::{HostTensor, RlxTensor};
use std::ffi::c_void;
use std::sync::Arc;

pub(super) static CUSTOM_OP_API: RlxCustomOpApi = RlxCustomOpApi {
    struct_size: RlxCustomOpApi::STRUCT_SIZE,
    register_op: Some(custom_register),
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

// SAFETY: the registering party promises its kernel and context may be used from any thread (docs/ABI.md, threading).
unsafe impl Send for ForeignKernel {}
// SAFETY: as for Send: the kernel is callable from any thread, concurrently.
unsafe impl Sync for ForeignKernel {}

impl Drop for ForeignKernel {
    fn drop(&mut self) {
        if let Some(d) = self.ctx_drop {
            // SAFETY: the registering party's drop, called once with the context it gave.
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
        // SAFETY: the descriptors in `raws` point into `borrowed`, alive for the call; `slots` has room for n_outputs tensors.
        let st = unsafe {
            (self.kernel)(
                self.ctx,
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
    }
}

unsafe extern "C" fn custom_register(desc: *const RlxCustomOpDesc) -> *mut RlxStatus {
    guard(|| {
        let d = read_arg(desc, "desc")?;
        // Own the context first, so it is dropped on any error below.
        struct CtxGuard(*mut c_void, Option<unsafe extern "C" fn(*mut c_void)>);
        impl Drop for CtxGuard {
            fn drop(&mut self) {
                if let Some(d) = self.1.take() {
                    // SAFETY: the caller's drop for its own context, called once (take()).
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
    let raw = RlxCustomOpInfo {
        struct_size: RlxCustomOpInfo::STRUCT_SIZE,
        name: RlxStr::from_str(&i.name),
        description: RlxStr::from_str(&i.description),
        n_inputs: i.n_inputs,
        n_outputs: i.n_outputs,
        origin: i.origin.to_raw(),
        reserved0: 0,
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
