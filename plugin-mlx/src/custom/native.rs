//! The plugin's own custom ops: MLX functions rlx-ir has no op for. Each is
//! an ordinary MLX graph node, so it stays inside the lazy graph and
//! `mx::compile`. Registered in the plugin's registry at `init` (origin
//! plugin, kind native).

use crate::lower::{axis, Ctx, LResult};
use rlx_mlx_shim::{ops, Array};
use rlx_plugin_api::{
    CustomImpl, CustomOp, CustomOpRegistry, Origin, PluginError, PluginResult, ShapeRule,
    TensorType,
};
use std::sync::Arc;

type NativeFn = fn(&Ctx, &[&Array], &[u8]) -> LResult;

/// One native op.
pub struct NativeOp {
    pub name: &'static str,
    pub description: &'static str,
    pub n_inputs: u32,
    shape: fn() -> ShapeRule,
    lower: NativeFn,
}

/// `mlx.logcumsumexp`'s attributes: empty (axis -1, forward, inclusive),
/// 4 bytes (axis, i32 little-endian) or 6 (axis, reverse, inclusive).
fn scan_attrs(attrs: &[u8]) -> LResult<(i64, bool, bool)> {
    let axis = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64;
    match attrs.len() {
        0 => Ok((-1, false, true)),
        4 => Ok((axis(attrs), false, true)),
        6 => Ok((axis(attrs), attrs[4] != 0, attrs[5] != 0)),
        n => Err(format!(
            "mlx.logcumsumexp takes 0, 4 or 6 attribute bytes (axis i32 LE, reverse u8, inclusive u8), got {n}"
        )
        .into()),
    }
}

fn no_attrs(name: &str, attrs: &[u8]) -> LResult<()> {
    if attrs.is_empty() {
        Ok(())
    } else {
        Err(format!("{name} takes no attributes, got {} bytes", attrs.len()).into())
    }
}

fn logcumsumexp(cx: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    let (ax, reverse, inclusive) = scan_attrs(attrs)?;
    let ax = axis(ax, cx.in_dims(0).len())?;
    Ok(ops::logcumsumexp(a[0], ax, reverse, inclusive)?)
}

fn erfinv(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    no_attrs("mlx.erfinv", attrs)?;
    Ok(ops::erfinv(a[0])?)
}

fn logaddexp(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    no_attrs("mlx.logaddexp", attrs)?;
    Ok(ops::logaddexp(a[0], a[1])?)
}

fn kron(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    no_attrs("mlx.kron", attrs)?;
    Ok(ops::kron(a[0], a[1])?)
}

/// NumPy's kron: ranks padded with leading 1s, sizes multiplied.
fn kron_shape(ins: &[TensorType], _attrs: &[u8]) -> PluginResult<TensorType> {
    let (a, b) = (&ins[0], &ins[1]);
    let rank = a.shape.len().max(b.shape.len());
    let pad = |s: &[i64]| {
        let mut v = vec![1i64; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(&a.shape), pad(&b.shape));
    let shape = pa
        .iter()
        .zip(&pb)
        .map(|(x, y)| if *x < 0 || *y < 0 { -1 } else { x * y })
        .collect();
    if a.dtype != b.dtype {
        return Err(PluginError::invalid_argument(format!(
            "mlx.kron takes two inputs of one dtype, got {} and {}",
            a.dtype, b.dtype
        )));
    }
    Ok(TensorType {
        dtype: a.dtype,
        shape,
    })
}

pub fn table() -> &'static [NativeOp] {
    use super::collectives as c;
    const T: &[NativeOp] = &[
        NativeOp {
            name: "mlx.all_gather",
            description: "every rank's array concatenated along axis 0 in rank order, over the \
                          process's MLX group (mx::distributed::all_gather); attrs: the group \
                          size, i32 LE",
            n_inputs: 1,
            shape: || ShapeRule::Callback(Arc::new(c::gather_shape)),
            lower: c::all_gather,
        },
        NativeOp {
            name: "mlx.all_max",
            description: "elementwise max over the process's MLX group (mx::distributed::all_max)",
            n_inputs: 1,
            shape: || ShapeRule::SameAsInput(0),
            lower: c::all_max,
        },
        NativeOp {
            name: "mlx.all_min",
            description: "elementwise min over the process's MLX group (mx::distributed::all_min)",
            n_inputs: 1,
            shape: || ShapeRule::SameAsInput(0),
            lower: c::all_min,
        },
        NativeOp {
            name: "mlx.all_sum",
            description: "sum over the process's MLX group, on every rank (mx::distributed::all_sum)",
            n_inputs: 1,
            shape: || ShapeRule::SameAsInput(0),
            lower: c::all_sum,
        },
        NativeOp {
            name: "mlx.erfinv",
            description: "inverse error function, elementwise (mx::erfinv)",
            n_inputs: 1,
            shape: || ShapeRule::SameAsInput(0),
            lower: erfinv,
        },
        NativeOp {
            name: "mlx.grad_sum",
            description: "the identity, whose gradient is the sum over the process's MLX group \
                          (the host's autodiff rule): a data-parallel replica reads its params \
                          through it to have its gradients all-reduced inside the step",
            n_inputs: 1,
            shape: || ShapeRule::SameAsInput(0),
            lower: c::grad_sum,
        },
        NativeOp {
            name: "mlx.kron",
            description: "Kronecker product of two arrays (mx::kron)",
            n_inputs: 2,
            shape: || ShapeRule::Callback(Arc::new(kron_shape)),
            lower: kron,
        },
        NativeOp {
            name: "mlx.logaddexp",
            description: "log(exp(a) + exp(b)), broadcasting, without overflow (mx::logaddexp)",
            n_inputs: 2,
            shape: || ShapeRule::Broadcast,
            lower: logaddexp,
        },
        NativeOp {
            name: "mlx.logcumsumexp",
            description: "log of the cumulative sum of exp along an axis (mx::logcumsumexp); \
                          attrs: none (axis -1), or axis as i32 LE, then reverse and inclusive bytes",
            n_inputs: 1,
            shape: || ShapeRule::SameAsInput(0),
            lower: logcumsumexp,
        },
        NativeOp {
            name: "mlx.sum_scatter",
            description: "sum over the process's MLX group, axis 0 split between the ranks \
                          (mx::distributed::sum_scatter; on the ring backend, the sum then this \
                          rank's rows); attrs: the group size, i32 LE",
            n_inputs: 1,
            shape: || ShapeRule::Callback(Arc::new(c::scatter_shape)),
            lower: c::sum_scatter,
        },
    ];
    T
}

/// Register every native op.
pub fn register_all(registry: &CustomOpRegistry) -> PluginResult<()> {
    for n in table() {
        if registry.get(n.name).is_some() {
            continue;
        }
        registry.register(
            CustomOp::new(
                n.name,
                n.description,
                n.n_inputs,
                Origin::Plugin,
                CustomImpl::Native,
            )
            .with_shape((n.shape)()),
        )?;
    }
    Ok(())
}

pub fn lower(name: &str, cx: &Ctx, args: &[&Array], attrs: &[u8]) -> LResult {
    let op = table()
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| format!("{name:?} is not one of this plugin's native ops"))?;
    (op.lower)(cx, args, attrs)
}
