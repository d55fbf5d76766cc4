//! Custom ops on the host side.
//!
//! - [`register_plugin_ops`]: every op in a loaded plugin's registry
//!   becomes an rlx-ir op ([`rlx_ir::OpExtension`], its shape answered by
//!   the plugin), so `Graph::custom_op("mlx.logaddexp", …)` works in a host
//!   program. A name rlx-ir already knows is reported, never replaced.
//! - [`register_host_op`]: a host kernel or composite registered with the
//!   plugin and with rlx-ir in one call, and (for kernels) with rlx-cpu's
//!   kernel registry, so the CPU backend runs the same graph as the
//!   reference.

use crate::abi_names::{abi_dtype, ir_dtype};
use rlx_cpu::op_registry::{CpuKernel, CpuTensorMut, CpuTensorRef};
use rlx_ir::{Dim, OpExtension, Shape};
use rlx_plugin_api::{
    CustomImpl, CustomKernel, CustomOp, CustomOpInfo, DType, PluginError, PluginResult, StatusCode,
    TensorType, TensorView, TensorViewMut,
};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

/// A plugin's op as rlx-ir sees it.
struct PluginOp {
    plugin: Arc<LoadedPlugin>,
    info: CustomOpInfo,
}

/// An rlx-ir shape as the ABI's type (dynamic sizes as -1).
pub fn tensor_type(s: &Shape) -> Option<TensorType> {
    Some(TensorType {
        dtype: abi_dtype(s.dtype())?,
        shape: s
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Static(n) => *n as i64,
                Dim::Dynamic(_) => -1,
            })
            .collect(),
    })
}

fn ir_shape(t: &TensorType) -> Shape {
    let dims: Vec<Dim> = t
        .shape
        .iter()
        .enumerate()
        .map(|(i, d)| match usize::try_from(*d) {
            Ok(n) => Dim::Static(n),
            Err(_) => Dim::Dynamic(i as u32),
        })
        .collect();
    Shape::from_dims(&dims, ir_dtype(t.dtype))
}

impl OpExtension for PluginOp {
    fn name(&self) -> &str {
        &self.info.name
    }
    fn num_inputs(&self) -> usize {
        self.info.n_inputs as usize
    }
    /// The plugin's answer. rlx-ir's builder cannot take an error here, so
    /// one panics with the plugin's message (as rlx-ir's own builders do
    /// for shapes that do not fit).
    fn infer_shape(&self, inputs: &[&Shape], attrs: &[u8]) -> Shape {
        let types: Option<Vec<TensorType>> = inputs.iter().map(|s| tensor_type(s)).collect();
        let Some(types) = types else {
            panic!(
                "custom op {:?}: an input's dtype has no ABI equivalent",
                self.info.name
            )
        };
        match self
            .plugin
            .infer_custom_shape(&self.info.name, &types, attrs)
        {
            Ok(t) => ir_shape(&t),
            Err(e) => panic!("custom op {:?}: {}", self.info.name, e.message),
        }
    }
    /// MLX's collectives have gradients (`crate::collective_grads`); the
    /// others none, as rlx-ir's default.
    fn vjp(
        &self,
        node: &rlx_ir::Node,
        ctx: &mut rlx_ir::VjpContext,
    ) -> Vec<(usize, rlx_ir::NodeId)> {
        crate::collective_grads::vjp(&self.info.name, node, ctx).unwrap_or_default()
    }
}

/// Make each op of `plugin`'s registry an rlx-ir op. Returns one message
/// per op not registered: a name rlx-ir already has (never replaced), or
/// one the plugin gives no shape rule for.
pub fn register_plugin_ops(plugin: &Arc<LoadedPlugin>) -> Vec<String> {
    let Ok(ops) = plugin.list_custom_ops() else {
        return Vec::new();
    };
    let mut skipped = Vec::new();
    for info in ops {
        if let Err(e) = register_ir_op(plugin, info) {
            log::warn!("{}", e.message);
            skipped.push(e.message);
        }
    }
    skipped
}

fn register_ir_op(plugin: &Arc<LoadedPlugin>, info: CustomOpInfo) -> PluginResult<()> {
    let name = info.name.clone();
    if let Some(existing) = rlx_ir::lookup_op(&name) {
        // The same plugin's op registered twice (a second backend, a
        // reload) is not a collision.
        if OURS.with_name(&name, plugin) && existing.num_inputs() == info.n_inputs as usize {
            return Ok(());
        }
        return Err(PluginError::new(
            StatusCode::AlreadyExists,
            format!(
                "custom op {name:?} of plugin {}: rlx-ir already has an op of that name; not registered",
                plugin.descriptor().name
            ),
        ));
    }
    rlx_ir::register_op_strict(Arc::new(PluginOp {
        plugin: plugin.clone(),
        info,
    }))
    .map_err(|e| PluginError::new(StatusCode::AlreadyExists, e.to_string()))?;
    OURS.add(&name, plugin);
    Ok(())
}

/// Which names this module registered with rlx-ir, for which plugin.
struct Ours(std::sync::Mutex<Vec<(String, usize)>>);
static OURS: Ours = Ours(std::sync::Mutex::new(Vec::new()));

impl Ours {
    fn add(&self, name: &str, plugin: &Arc<LoadedPlugin>) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        v.push((name.to_string(), Arc::as_ptr(plugin) as usize));
    }
    fn with_name(&self, name: &str, plugin: &Arc<LoadedPlugin>) -> bool {
        let v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        v.iter()
            .any(|(n, p)| n == name && *p == Arc::as_ptr(plugin) as usize)
    }
}

/// Register a host op with `plugin` and rlx-ir (and, for an in-place
/// kernel, with rlx-cpu's kernel registry, so `Session::new(Device::Cpu)`
/// runs it too). A name rlx-ir already has is `ALREADY_EXISTS` and nothing
/// is registered.
pub fn register_host_op(plugin: &Arc<LoadedPlugin>, op: CustomOp) -> PluginResult<()> {
    let name = op.info.name.clone();
    if rlx_ir::is_op_registered(&name) {
        return Err(PluginError::new(
            StatusCode::AlreadyExists,
            format!("custom op {name:?}: rlx-ir already has an op of that name"),
        ));
    }
    let cpu = match &op.imp {
        CustomImpl::Kernel(k) => Some(k.clone()),
        _ => None,
    };
    plugin.register_op(op)?;
    let info = plugin.lookup_custom_op(&name)?;
    register_ir_op(plugin, info)?;
    if let Some(k) = cpu {
        rlx_cpu::op_registry::register_cpu_kernel(cpu_kernel(&name, k));
    }
    Ok(())
}

/// `kernel` as an rlx-cpu kernel named `name` (for `register_cpu_kernel`).
pub fn cpu_kernel(name: &str, kernel: CustomKernel) -> Arc<dyn CpuKernel> {
    Arc::new(CpuAdapter {
        name: name.to_string(),
        kernel,
    })
}

/// A [`CustomKernel`] as rlx-cpu's kernel.
struct CpuAdapter {
    name: String,
    kernel: CustomKernel,
}

/// The bytes of a typed slice.
fn as_bytes<T>(s: &[T]) -> &[u8] {
    // SAFETY: plain numeric element types without padding; the length is the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

fn as_bytes_mut<T>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as for as_bytes; every bit pattern is a valid element of these types.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}

fn ref_bytes<'a>(t: &CpuTensorRef<'a>) -> &'a [u8] {
    match *t {
        CpuTensorRef::F32 { data, .. } => as_bytes(data),
        CpuTensorRef::F64 { data, .. } => as_bytes(data),
        CpuTensorRef::F16 { data, .. } => as_bytes(data),
        CpuTensorRef::BF16 { data, .. } => as_bytes(data),
        CpuTensorRef::I8 { data, .. } => as_bytes(data),
        CpuTensorRef::I16 { data, .. } => as_bytes(data),
        CpuTensorRef::I32 { data, .. } => as_bytes(data),
        CpuTensorRef::I64 { data, .. } => as_bytes(data),
        CpuTensorRef::U8 { data, .. } => as_bytes(data),
        CpuTensorRef::U32 { data, .. } => as_bytes(data),
        CpuTensorRef::Bool { data, .. } => as_bytes(data),
    }
}

fn mut_bytes<'a>(t: CpuTensorMut<'a>) -> &'a mut [u8] {
    match t {
        CpuTensorMut::F32 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::F64 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::F16 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::BF16 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::I8 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::I16 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::I32 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::I64 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::U8 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::U32 { data, .. } => as_bytes_mut(data),
        CpuTensorMut::Bool { data, .. } => as_bytes_mut(data),
    }
}

fn static_dims(s: &Shape) -> Result<Vec<usize>, String> {
    s.dims()
        .iter()
        .map(|d| match d {
            Dim::Static(n) => Ok(*n),
            Dim::Dynamic(_) => Err(format!("{s} has a dynamic size")),
        })
        .collect()
}

impl CpuKernel for CpuAdapter {
    fn name(&self) -> &str {
        &self.name
    }
    fn execute(
        &self,
        inputs: &[CpuTensorRef<'_>],
        output: CpuTensorMut<'_>,
        attrs: &[u8],
    ) -> Result<(), String> {
        let in_shapes: Vec<(DType, Vec<usize>)> = inputs
            .iter()
            .map(|t| {
                Ok((
                    abi_dtype(t.dtype()).ok_or("dtype")?,
                    static_dims(t.shape())?,
                ))
            })
            .collect::<Result<_, String>>()?;
        let views: Vec<TensorView> = inputs
            .iter()
            .zip(&in_shapes)
            .map(|(t, (dt, shape))| TensorView {
                dtype: *dt,
                shape,
                data: ref_bytes(t),
            })
            .collect();
        let out_dt = abi_dtype(output.dtype()).ok_or("dtype")?;
        let out_shape = static_dims(output.shape())?;
        let mut outs = [TensorViewMut {
            dtype: out_dt,
            shape: &out_shape,
            data: mut_bytes(output),
        }];
        (self.kernel)(&views, &mut outs, attrs).map_err(|e| e.message)
    }
}
