//! `Op::RoundToFormat`: rounding float32 values to a float format emulated
//! on f32 (rlx-runtime's `NumberFormat::Float` and `Mixed` insert it), with
//! its scaling: none, one power-of-two scale per tensor (read from the
//! second input, the tensor's largest magnitude), or one scale per block of
//! the last axis (power-of-two, or NVFP4's fine E4M3 scales).
//!
//! One node on MLX's CPU stream (`lower::host_kernel`): the rounding is
//! rlx-ir's `FloatFormat` (`round_scaled`, `pow2_scale`, `block_scale`,
//! `fine_scale`, `round_fine`), which rlx-ir calls the reference for every
//! backend, in rlx-cpu 0.2.19's loops (`thunk/ops/quant.rs`,
//! `exec_round_to_format`), so results are bit-identical to the CPU
//! backend's. Without it the node ran on the CPU backend, splitting every
//! graph of such a number format at each rounding.

use super::{Ctx, LResult, Lowering};
use crate::lower::host_kernel::{self, Call};
use rlx_ir::number_format::{fine_reciprocal, FloatFormat, FormatScaling};
use rlx_mlx_shim::Array;
use rlx_plugin_api::{CustomKernel, DType, PluginError};
use std::sync::Arc;

pub fn entries() -> Vec<Lowering> {
    vec![crate::row!(
        RoundToFormat,
        &[rlx_ir::DType::F32],
        HostEvaluated,
        "round to a float format emulated on f32 (rlx-ir's FloatFormat, the reference for \
         every backend): no scaling, per tensor (the amax input), per block of the last axis \
         (power-of-two or fine E4M3 scales); rlx-cpu's loops, one node on MLX's CPU stream",
        round_to_format
    )]
}

fn round_to_format(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, RoundToFormat { format, scaling });
    let want = if matches!(scaling, FormatScaling::PerTensor) {
        2
    } else {
        1
    };
    super::arity(a, want, "RoundToFormat")?;
    if (0..a.len()).any(|i| cx.in_dtype(i) != rlx_ir::DType::F32) {
        return Err("RoundToFormat on values other than f32 is not lowered".into());
    }
    let last_dim = cx.in_dims(0).last().map_or(1, |&d| d.max(1) as usize);
    let k = kernel(*format, *scaling, last_dim);
    host_kernel::node(cx, a, Call::Into(k), &[], "RoundToFormat")
}

fn kernel(fmt: FloatFormat, scaling: FormatScaling, last_dim: usize) -> CustomKernel {
    Arc::new(move |ins, outs, _| {
        if ins.iter().any(|v| v.dtype != DType::F32) || outs[0].dtype != DType::F32 {
            return Err(PluginError::internal("RoundToFormat takes f32 buffers"));
        }
        let xs = rlx_plugin_api::convert::f32_from_le(ins[0].data);
        if outs[0].data.len() != xs.len() * 4 {
            return Err(PluginError::internal("RoundToFormat: output size"));
        }
        let amax = ins
            .get(1)
            .map(|v| rlx_plugin_api::convert::f32_from_le(v.data));
        let o = round(fmt, scaling, &xs, amax.as_deref(), last_dim);
        for (d, v) in outs[0].data.chunks_exact_mut(4).zip(&o) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    })
}

/// rlx-cpu's `exec_round_to_format`, element for element.
fn round(
    fmt: FloatFormat,
    scaling: FormatScaling,
    xs: &[f32],
    amax: Option<&[f32]>,
    last_dim: usize,
) -> Vec<f32> {
    let mut out = vec![0f32; xs.len()];
    let blocks = |n: u32, out: &mut [f32], each: &dyn Fn(&[f32], &mut [f32])| {
        for (row, orow) in xs.chunks(last_dim).zip(out.chunks_mut(last_dim)) {
            for (b, ob) in row
                .chunks(n.max(1) as usize)
                .zip(orow.chunks_mut(n.max(1) as usize))
            {
                each(b, ob);
            }
        }
    };
    match scaling {
        FormatScaling::None | FormatScaling::PerTensor => {
            let scale = match (scaling, amax.and_then(|a| a.first())) {
                (FormatScaling::PerTensor, Some(&a)) => fmt.pow2_scale(a),
                _ => 1.0,
            };
            for (o, x) in out.iter_mut().zip(xs) {
                *o = fmt.round_scaled(*x, scale);
            }
        }
        FormatScaling::FineBlock(n) => blocks(n, &mut out, &|b, ob| {
            let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
            let s = fmt.fine_scale(amax);
            let rcp = fine_reciprocal(s);
            for (o, x) in ob.iter_mut().zip(b) {
                *o = fmt.round_fine(*x, s, rcp);
            }
        }),
        FormatScaling::Block(n) => blocks(n, &mut out, &|b, ob| {
            let s = fmt.block_scale(b);
            for (o, x) in ob.iter_mut().zip(b) {
                *o = fmt.round_scaled(*x, s);
            }
        }),
    }
    out
}
