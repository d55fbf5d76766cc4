//! `Op::DoubleSingle` (rlx-ir 0.2.19 `src/double_single.rs`): f64 values
//! emulated as unevaluated `(hi, lo)` f32 pairs, what rlx-runtime rewrites
//! f64 arithmetic into under `NumberFormat::F64`/`F64x2` off the CPU
//! (rlx-compile `lower_f64`). A df tensor of logical shape `[d0, …, dn]` is
//! an f32 tensor `[d0, …, dn, 2]`; data movement stays on the ordinary f32
//! lowerings and only the arithmetic of [`DfOp`] comes here.
//!
//! One node of the MLX graph on the CPU stream (`lower::host_kernel`),
//! whatever device the rest of the graph runs on: the error-free transforms
//! need IEEE round-to-nearest with no reassociation or contraction, which
//! Rust guarantees and MLX's fused kernels do not. The indexing is rlx-ir's
//! `DfPlan` (planned here, at lowering time, from the node's shapes), the
//! arithmetic `rlxsl::dw::DoubleSingle`, and the loops are rlx-cpu 0.2.19's
//! `thunk/ops/double_single.rs` (`exec_double_single`) in the same operation
//! order (matmul and sum accumulate sequentially with df adds), so the
//! results are bit-identical to the CPU backend's. Output elements are
//! independent, so splitting them across threads changes no bit.

use super::{arity, Ctx, LResult, Lowering};
use crate::lower::host_kernel::{self, Call};
use rlx_ir::double_single::{df_offset, logical_dims, DfOp, DfPlan};
use rlx_mlx_shim::Array;
use rlx_plugin_api::{CustomKernel, DType, PluginError};
use rlxsl::dw::DoubleSingle as Df;
use std::sync::Arc;

pub fn entries() -> Vec<Lowering> {
    vec![crate::row!(
        DoubleSingle,
        &[rlx_ir::DType::F32],
        HostEvaluated,
        "double-single (f64x2) arithmetic over [.., 2] f32 pairs: df add, sub, mul, div, \
         maximum (numpy broadcasting), sqrt, exp, batched matmul, sum and max over axes; \
         rlx-ir's DfPlan indexing and rlxsl::dw's error-free transforms in rlx-cpu's \
         operation order (bit-identical to the CPU backend), one node on MLX's CPU stream",
        double_single
    )]
}

/// The larger of two df values (by `hi`, then `lo`), as rlx-cpu picks.
#[inline]
fn df_max(a: Df, b: Df) -> Df {
    if b.hi > a.hi || (b.hi == a.hi && b.lo > a.lo) {
        b
    } else {
        a
    }
}

#[inline]
fn get(p: &[f32], i: usize) -> Df {
    Df {
        hi: p[2 * i],
        lo: p[2 * i + 1],
    }
}

const ZERO: Df = Df { hi: 0.0, lo: 0.0 };

fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

/// The node's pair shapes, checked: f32, trailing axis 2.
fn pair_dims(cx: &Ctx, op: &DfOp, a: &[&Array]) -> LResult<(Vec<Vec<usize>>, Vec<usize>)> {
    let dims = |d: Vec<i32>| d.into_iter().map(|x| x as usize).collect::<Vec<usize>>();
    let mut ins = Vec::with_capacity(a.len());
    for i in 0..a.len() {
        if cx.in_dtype(i) != rlx_ir::DType::F32 {
            return Err(format!(
                "DoubleSingle {op}: input {i} is {:?}; df pairs are f32",
                cx.in_dtype(i)
            )
            .into());
        }
        let d = dims(cx.in_dims(i));
        if d.last() != Some(&2) {
            return Err(format!(
                "DoubleSingle {op}: input {i} has shape {d:?}; a df tensor ends in a pair axis of 2"
            )
            .into());
        }
        ins.push(d);
    }
    let out = dims(cx.out_dims());
    if out.last() != Some(&2) {
        return Err(format!(
            "DoubleSingle {op}: the output has shape {out:?}; a df tensor ends in a pair axis of 2"
        )
        .into());
    }
    Ok((ins, out))
}

/// What `DfPlan::from_pair_shapes` leaves to the backend: that the plan's
/// output is the node's declared output, and reduction axes in range.
fn check_plan(op: &DfOp, plan: &DfPlan, ins: &[&[usize]], out: &[usize]) -> LResult<()> {
    let fail = |why: String| -> LResult<()> { Err(format!("DoubleSingle {op}: {why}").into()) };
    match plan {
        DfPlan::Elementwise { .. } => Ok(()),
        DfPlan::MatMul { m, n, .. } => {
            if out.len() < 2 || out[out.len() - 2] != *m || out[out.len() - 1] != *n {
                return fail(format!(
                    "{:?} @ {:?} is [.., {m}, {n}], the node declares {out:?}",
                    ins[0], ins[1]
                ));
            }
            Ok(())
        }
        DfPlan::Sum {
            out_len, red_len, ..
        } => {
            let (DfOp::Sum { axes, .. } | DfOp::Max { axes, .. }) = op else {
                return fail("a reduction plan for an elementwise op".into());
            };
            let rank = ins[0].len();
            if let Some(bad) = axes.iter().find(|&&x| x >= rank) {
                return fail(format!(
                    "axis {bad} is out of range for the logical shape {:?}",
                    ins[0]
                ));
            }
            if *out_len != numel(out) {
                return fail(format!(
                    "reducing {:?} over {axes:?} leaves {out_len} elements, the node declares {out:?}",
                    ins[0]
                ));
            }
            if matches!(op, DfOp::Max { .. }) && *red_len == 0 && *out_len > 0 {
                return fail(format!("the max over an empty axis of {:?}", ins[0]));
            }
            Ok(())
        }
    }
}

fn double_single(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, DoubleSingle(op));
    let name = op.to_string();
    arity(a, op.num_inputs(), &format!("DoubleSingle {op}"))?;
    let (ins, out) = pair_dims(cx, op, a)?;
    let in_refs: Vec<&[usize]> = ins.iter().map(|d| d.as_slice()).collect();
    let plan = DfPlan::from_pair_shapes(op, &in_refs, &out)
        .map_err(|e| format!("DoubleSingle {op}: {e}"))?;
    let logical_ins: Vec<&[usize]> = in_refs.iter().map(|d| logical_dims(d)).collect();
    check_plan(op, &plan, &logical_ins, logical_dims(&out))?;
    let k = kernel(op.clone(), plan, numel(&out) / 2);
    host_kernel::node(cx, a, Call::Into(k), &[], &name)
}

fn kernel(op: DfOp, plan: DfPlan, out_len: usize) -> CustomKernel {
    Arc::new(move |ins, outs, _| {
        if ins.iter().any(|v| v.dtype != DType::F32) || outs[0].dtype != DType::F32 {
            return Err(PluginError::internal("the df kernel takes f32 buffers"));
        }
        let xs: Vec<Vec<f32>> = ins
            .iter()
            .map(|v| rlx_plugin_api::convert::f32_from_le(v.data))
            .collect();
        let xa = xs.first().map(Vec::as_slice).unwrap_or(&[]);
        let xb = xs.get(1).map(Vec::as_slice).unwrap_or(&[]);
        if outs[0].data.len() != out_len * 8 {
            return Err(PluginError::internal(
                "the df kernel's output buffer does not match its plan",
            ));
        }
        let mut o = vec![0f32; 2 * out_len];
        run(&op, &plan, xa, xb, &mut o).map_err(PluginError::internal)?;
        for (d, v) in outs[0].data.chunks_exact_mut(4).zip(&o) {
            d.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    })
}

/// Output df elements per thread below which a kernel runs on one thread.
const PAR_GRAIN: usize = 1 << 14;

/// `f(first, chunk)` over `out` (interleaved pairs) in chunks of whole df
/// elements, on several threads when the work (`cost` per element) is large.
fn par_chunks(out: &mut [f32], cost: usize, f: &(dyn Fn(usize, &mut [f32]) + Sync)) {
    let len = out.len() / 2;
    let threads = super::host_kernel::cores().min(16);
    let parts = (len.saturating_mul(cost.max(1)) / PAR_GRAIN)
        .clamp(1, threads)
        .min(len.max(1));
    if parts <= 1 {
        f(0, out);
        return;
    }
    let per = len.div_ceil(parts);
    std::thread::scope(|s| {
        for (c, chunk) in out.chunks_mut(2 * per).enumerate() {
            s.spawn(move || f(c * per, chunk));
        }
    });
}

/// rlx-cpu's `exec_double_single`, over whole buffers: `xa`/`xb` the input
/// pairs (`xb` empty for one-input ops), `o` the output pairs.
fn run(op: &DfOp, plan: &DfPlan, xa: &[f32], xb: &[f32], o: &mut [f32]) -> Result<(), String> {
    // The largest pair index each plan reads, checked once so the loops
    // cannot index past a buffer (a panic) whatever the plan says.
    let need = |buf: &[f32], n: usize, what: &str| -> Result<(), String> {
        if buf.len() < 2 * n {
            Err(format!(
                "{op}: {what} holds {} pairs, the plan reads {n}",
                buf.len() / 2
            ))
        } else {
            Ok(())
        }
    };
    let extent = |dims: &[u32], strides: &[u32], rank: usize| -> usize {
        1 + (0..rank)
            .map(|d| (dims[d].max(1) as usize - 1) * strides[d] as usize)
            .sum::<usize>()
    };
    match plan {
        DfPlan::Elementwise {
            len,
            rank,
            out_dims,
            a_strides,
            b_strides,
        } => {
            let (len, rank) = (*len, *rank);
            if o.len() != 2 * len {
                return Err(format!(
                    "{op}: output of {} pairs, plan of {len}",
                    o.len() / 2
                ));
            }
            if len == 0 {
                return Ok(());
            }
            let f: fn(Df, Df) -> Df = match op {
                DfOp::Add => Df::add,
                DfOp::Sub => Df::sub,
                DfOp::Mul => Df::mul,
                DfOp::Div => Df::div,
                DfOp::Sqrt => |x, _| x.sqrt(),
                DfOp::Exp => |x, _| x.exp(),
                DfOp::Maximum => df_max,
                _ => return Err(format!("an elementwise plan for {op}")),
            };
            let unary = op.num_inputs() == 1;
            need(xa, extent(out_dims, a_strides, rank), "input 0")?;
            if !unary {
                need(xb, extent(out_dims, b_strides, rank), "input 1")?;
            }
            par_chunks(o, 1, &|first, chunk| {
                for (j, p) in chunk.chunks_exact_mut(2).enumerate() {
                    let i = first + j;
                    let x = get(xa, df_offset(i, rank, out_dims, a_strides));
                    let y = if unary {
                        ZERO
                    } else {
                        get(xb, df_offset(i, rank, out_dims, b_strides))
                    };
                    let v = f(x, y);
                    p[0] = v.hi;
                    p[1] = v.lo;
                }
            });
        }
        DfPlan::MatMul {
            batch,
            m,
            k,
            n,
            a_batch,
            b_batch,
        } => {
            let (batch, m, k, n, a_batch, b_batch) = (*batch, *m, *k, *n, *a_batch, *b_batch);
            if o.len() != 2 * batch * m * n {
                return Err(format!(
                    "{op}: output of {} pairs, plan of {batch}x{m}x{n}",
                    o.len() / 2
                ));
            }
            if o.is_empty() {
                return Ok(());
            }
            if k > 0 {
                need(xa, (batch - 1) * a_batch + m * k, "input 0")?;
                need(xb, (batch - 1) * b_batch + k * n, "input 1")?;
            }
            par_chunks(o, k, &|first, chunk| {
                for (j, p) in chunk.chunks_exact_mut(2).enumerate() {
                    let idx = first + j;
                    let (r, jj) = (idx / n, idx % n);
                    let (bi, i) = (r / m, r % m);
                    let a0 = bi * a_batch + i * k;
                    let b0 = bi * b_batch;
                    let mut acc = ZERO;
                    for kk in 0..k {
                        acc = acc.add(get(xa, a0 + kk).mul(get(xb, b0 + kk * n + jj)));
                    }
                    p[0] = acc.hi;
                    p[1] = acc.lo;
                }
            });
        }
        DfPlan::Sum {
            out_len,
            red_len,
            kept_rank,
            kept_dims,
            kept_strides,
            red_rank,
            red_dims,
            red_strides,
        } => {
            let (out_len, red_len, kept_rank, red_rank) =
                (*out_len, *red_len, *kept_rank, *red_rank);
            if o.len() != 2 * out_len {
                return Err(format!(
                    "{op}: output of {} pairs, plan of {out_len}",
                    o.len() / 2
                ));
            }
            if out_len == 0 {
                return Ok(());
            }
            let max = matches!(op, DfOp::Max { .. });
            if red_len == 0 {
                if max {
                    return Err(format!("{op}: the max over an empty axis"));
                }
                o.fill(0.0);
                return Ok(());
            }
            need(
                xa,
                extent(kept_dims, kept_strides, kept_rank)
                    + extent(red_dims, red_strides, red_rank)
                    - 1,
                "input 0",
            )?;
            par_chunks(o, red_len, &|first, chunk| {
                for (j, p) in chunk.chunks_exact_mut(2).enumerate() {
                    let base = df_offset(first + j, kept_rank, kept_dims, kept_strides);
                    let at =
                        |r: usize| get(xa, base + df_offset(r, red_rank, red_dims, red_strides));
                    let mut acc = if max { at(0) } else { ZERO };
                    for r in usize::from(max)..red_len {
                        let x = at(r);
                        acc = if max { df_max(acc, x) } else { acc.add(x) };
                    }
                    p[0] = acc.hi;
                    p[1] = acc.lo;
                }
            });
        }
    }
    Ok(())
}
