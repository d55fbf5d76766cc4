//! A kernel (the host's, registered through the ABI, or any `CustomKernel`)
//! as a node of the MLX graph: an MLX primitive on the CPU stream whose
//! evaluation calls the kernel with the inputs read in place and the output
//! MLX allocated (`rlx_mlx_shim::host_kernel`), on the calling thread when
//! the plugin evaluates the graph itself, else on MLX's CPU stream thread.
//! A kernel that returns its output (an `OwnedKernel`) has it copied into
//! MLX's buffer.

use super::custom_scope::Failures;
use super::{Ctx, LResult};
use crate::dtype::ir_to_abi;
use crate::graph_text::describe;
use rlx_mlx_shim::host_kernel::{host_kernel_node, HostCall};
use rlx_mlx_shim::Array;
use rlx_plugin_api::{
    CustomKernel, DType, OwnedKernel, PluginError, PluginResult, StatusCode, TensorView,
    TensorViewMut,
};
use std::sync::{Arc, OnceLock};

/// The cores a host kernel of the plugin's own may split its work over.
/// Asked once: `available_parallelism` reads the process's cgroup files
/// on Linux each time, which was a tenth of a 150 µs pocketfft run.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |t| t.get()))
}

pub enum Call {
    Into(CustomKernel),
    Owned(OwnedKernel),
}

/// A `(dtype, shape)` the kernel's buffers are read as.
struct Buf {
    dtype: DType,
    shape: Vec<usize>,
}

impl Buf {
    fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size_bytes()
    }
}

fn buf(dt: rlx_ir::DType, dims: Vec<i32>) -> LResult<Buf> {
    Ok(Buf {
        dtype: ir_to_abi(dt).ok_or_else(|| format!("no ABI dtype for {dt:?}"))?,
        shape: dims.iter().map(|d| *d as usize).collect(),
    })
}

/// # Safety
/// `(addr, len)` is readable (or `len` is 0) while the view lives.
unsafe fn bytes<'a>(addr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
    }
}

pub fn node(cx: &Ctx, args: &[&Array], call: Call, attrs: &[u8], name: &str) -> LResult {
    let ins: Vec<Buf> = (0..args.len())
        .map(|i| buf(cx.in_dtype(i), cx.in_dims(i)))
        .collect::<LResult<_>>()?;
    let out = buf(cx.out_ir_dtype(), cx.out_dims())?;
    let what = describe(cx.graph, cx.node);
    let failures: Arc<Failures> = cx.custom.failures().clone();
    let attrs = attrs.to_vec();
    let op = name.to_string();
    let run = move |data: &[(usize, usize)], (dst, dst_len): (usize, usize)| {
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> PluginResult<()> {
                if data.len() != ins.len() || dst_len != out.bytes() {
                    return Err(PluginError::internal(
                        "the kernel's buffers do not match the node",
                    ));
                }
                let views: Vec<TensorView> = data
                    .iter()
                    .zip(&ins)
                    .map(|((addr, len), b)| TensorView {
                        dtype: b.dtype,
                        shape: &b.shape,
                        // SAFETY: MLX's input buffer, alive until the task finished.
                        data: unsafe { bytes(*addr, *len) },
                    })
                    .collect();
                let dst: &mut [u8] = if dst_len == 0 {
                    &mut []
                } else {
                    // SAFETY: the output buffer MLX allocated for this node, written only here.
                    unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, dst_len) }
                };
                match &call {
                    Call::Into(k) => {
                        let mut outs = [TensorViewMut {
                            dtype: out.dtype,
                            shape: &out.shape,
                            data: dst,
                        }];
                        k(&views, &mut outs, &attrs)
                    }
                    Call::Owned(k) => {
                        let got = k(&views, &attrs)?;
                        match got.as_slice() {
                            [t] if t.dtype == out.dtype && t.shape == out.shape => {
                                dst.copy_from_slice(&t.data);
                                Ok(())
                            }
                            [t] => Err(PluginError::invalid_argument(format!(
                                "the kernel returned {}{:?}, the node is {}{:?}",
                                t.dtype, t.shape, out.dtype, out.shape
                            ))),
                            many => Err(PluginError::invalid_argument(format!(
                                "the kernel returned {} outputs, the node has one",
                                many.len()
                            ))),
                        }
                    }
                }
            }));
        let failure = match result {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e,
            Err(p) => PluginError::new(
                StatusCode::Panic,
                format!(
                    "the kernel panicked: {}",
                    rlx_plugin_api::error::panic_message(&*p)
                ),
            ),
        };
        failures.record(kernel_error(&what, &op, failure));
    };
    Ok(host_kernel_node(
        args,
        HostCall::new(run),
        &cx.out_dims(),
        cx.out_dtype(),
    )?)
}

/// A kernel's error as the run reports it.
pub fn kernel_error(what: &str, op: &str, e: PluginError) -> PluginError {
    PluginError::new(
        e.code,
        format!("{what}: custom op {op:?} failed: {}", e.message),
    )
}
