//! Control flow: If, While, Scan. Their bodies are graphs inside the op,
//! bound by the body's `Input` nodes in node order, and built with the
//! same lowering table as the graph around them.
//!
//! - **If** builds both branches and selects with `mx::where` on the
//!   predicate: no host synchronisation, so it stays inside the lazy graph
//!   and `mx::compile` (the untaken branch's work is spent).
//! - **While** is a loop on the host: `cond` is evaluated each iteration
//!   (one MLX evaluation per iteration) and `body` built on the carried
//!   values, up to `max_iterations` when it has one; the trip count is the
//!   data's, never a fixed unroll. A loop still running after
//!   `RLX_MLX_WHILE_LIMIT` iterations (default 1,000,000) fails the run
//!   instead of hanging the host. `mx::compile` cannot trace a loop whose
//!   trip count depends on values, so in compiled mode a graph holding a
//!   While runs lazily.
//! - **Scan** is unrolled into the MLX graph: `length` steps of the body,
//!   per-step slices of the `xs`, the trajectory stacked (or the
//!   checkpoint rows kept). The compile-time check builds one step.

use super::Eval;
use super::{arity, Ctx, LResult, Lowering, A};
use crate::graph_text::leaves;
use crate::lower::I32;
use rlx_ir::{Graph, NodeId, Op};
use rlx_mlx_shim::{array, ops, Array, ArrayList};
use rlx_plugin_api::{PluginError, PluginResult};

/// Does the graph hold a loop that runs on the host (a While)?
pub fn has_host_loop(g: &Graph) -> bool {
    g.nodes().iter().any(|n| match &n.op {
        Op::While { .. } => true,
        Op::If {
            then_branch,
            else_branch,
        } => has_host_loop(then_branch) || has_host_loop(else_branch),
        Op::Scan { body, .. } => has_host_loop(body),
        _ => false,
    })
}

/// Build `body` on `args`, bound to its inputs in node order.
fn call(cx: &Ctx, body: &Graph, args: &[&Array], what: &str) -> LResult<Vec<A>> {
    let (ins, params) = leaves(body);
    if !params.is_empty() {
        return Err(format!("the {what} reads a param; it may read only its inputs").into());
    }
    if ins.len() != args.len() {
        return Err(format!(
            "the {what} takes {} inputs, the op gives it {}",
            ins.len(),
            args.len()
        )
        .into());
    }
    let bound: Vec<(NodeId, &Array)> = ins
        .iter()
        .map(|(_, id)| *id)
        .zip(args.iter().copied())
        .collect();
    let leaf = |id: NodeId| -> PluginResult<A> {
        bound
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, a)| a.clone_handle())
            .ok_or_else(|| PluginError::internal(format!("{id} is not an input of the body")))
    };
    cx.evaluate(body, &leaf)
        .map_err(|e| format!("in the {what}: {}", e.message).into())
}

fn if_(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        If {
            then_branch,
            else_branch,
        }
    );
    if a.is_empty() {
        return Err("If takes a predicate".into());
    }
    let caps = &a[1..];
    let mut t = call(cx, then_branch, caps, "then branch")?;
    let mut e = call(cx, else_branch, caps, "else branch")?;
    if t.is_empty() || e.is_empty() {
        return Err("If's branches must have an output".into());
    }
    let (t, e) = (t.remove(0), e.remove(0));
    let pred = ops::astype(a[0], rlx_mlx_shim::DType::Bool)?;
    // The predicate is a scalar (or one element): select whole branches.
    let pred = ops::reshape(&pred, &[])?;
    Ok(ops::where_(&pred, &t, &e)?)
}

fn while_(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        While {
            cond,
            body,
            max_iterations,
        }
    );
    if a.is_empty() {
        return Err("While takes at least one carried value".into());
    }
    let mut carried: Vec<A> = a.iter().map(|x| x.clone_handle()).collect();
    if cx.how == Eval::Check {
        // Build each half once, to check it lowers; compute nothing.
        let args: Vec<&Array> = carried.iter().map(|x| &**x).collect();
        let c = call(cx, cond, &args, "While cond")?;
        if c.len() != 1 {
            return Err(format!("While's cond has {} outputs, one expected", c.len()).into());
        }
        let next = call(cx, body, &args, "While body")?;
        if next.len() != carried.len() {
            return Err(format!(
                "While's body gives {} values for {} carried",
                next.len(),
                carried.len()
            )
            .into());
        }
        return Ok(carried.swap_remove(0));
    }
    let limit = while_limit()?;
    let mut steps = 0usize;
    loop {
        if max_iterations.is_some_and(|m| steps >= m) {
            break;
        }
        if steps >= limit {
            return Err(format!(
                "While ran {limit} iterations and its condition is still true: a loop that \
                 does not end is an error here, not a hang (set max_iterations, or raise the \
                 limit with {WHILE_LIMIT_VAR})"
            )
            .into());
        }
        let args: Vec<&Array> = carried.iter().map(|x| &**x).collect();
        let c = call(cx, cond, &args, "While cond")?;
        let go = c
            .first()
            .ok_or("While's cond has no output")?
            .item_f64()
            .map_err(|e| format!("While cond: {e}"))?;
        if go == 0.0 {
            break;
        }
        let next = call(cx, body, &args, "While body")?;
        if next.len() != carried.len() {
            return Err(format!(
                "While's body gives {} values for {} carried",
                next.len(),
                carried.len()
            )
            .into());
        }
        // Evaluate the carried values each iteration, so the graph does
        // not grow with the trip count.
        let list = ArrayList::from_arrays(next.iter().map(|x| &**x));
        array::eval_list(&list).map_err(|e| format!("While body: {e}"))?;
        carried = next;
        steps += 1;
    }
    Ok(carried.swap_remove(0))
}

/// The environment variable that bounds a While's trip count.
pub const WHILE_LIMIT_VAR: &str = "RLX_MLX_WHILE_LIMIT";

/// The most iterations a While may run (`RLX_MLX_WHILE_LIMIT`, default one
/// million), so that a condition that never turns false fails the run
/// instead of hanging the host.
fn while_limit() -> LResult<usize> {
    match std::env::var(WHILE_LIMIT_VAR) {
        Err(_) => Ok(1_000_000),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("{WHILE_LIMIT_VAR}={v:?} is not a number of iterations").into()),
    }
}

/// Row `t` of `xs` along axis 0.
fn row(xs: &Array, t: usize) -> LResult {
    let shape = xs.shape();
    let mut start = vec![0i32; shape.len()];
    let mut stop = shape.clone();
    start[0] = t.i32()?;
    stop[0] = t.i32()? + 1;
    let strides = vec![1i32; shape.len()];
    let s = ops::slice(xs, &start, &stop, &strides)?;
    Ok(ops::squeeze(&s, &[0])?)
}

fn scan(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        Scan {
            body,
            length,
            save_trajectory,
            num_bcast,
            num_xs,
            num_checkpoints,
        }
    );
    let (nb, nx, len) = (*num_bcast as usize, *num_xs as usize, *length as usize);
    arity(a, 1 + nb + nx, "Scan")?;
    let bcast = &a[1..1 + nb];
    let xs = &a[1 + nb..];
    for (i, x) in xs.iter().enumerate() {
        if x.shape().first().copied() != Some(len.i32()?) {
            return Err(format!(
                "Scan xs {i} has shape {:?}; its leading axis must be the length {len}",
                x.shape()
            )
            .into());
        }
    }
    if cx.how != Eval::Check {
        let ck = Checkpoints::new(len, *num_checkpoints as usize);
        let rows: Vec<i64> = if *save_trajectory {
            (0..ck.rows).map(|k| ck.step(k) as i64).collect()
        } else {
            Vec::new()
        };
        if let Some(y) = super::scan_fused::try_scan(body, a[0], bcast, xs, len, &rows)? {
            return Ok(y);
        }
    }
    let steps = if cx.how == Eval::Check {
        len.min(1)
    } else {
        len
    };
    let mut carry = a[0].clone_handle();
    let mut trajectory: Vec<A> = Vec::new();
    for t in 0..steps {
        let rows: Vec<A> = xs.iter().map(|x| row(x, t)).collect::<LResult<_>>()?;
        let mut args: Vec<&Array> = vec![&carry];
        args.extend(bcast.iter().copied());
        args.extend(rows.iter().map(|r| &**r));
        let mut out = call(cx, body, &args, "Scan body")?;
        if out.len() != 1 {
            return Err(format!("Scan's body has {} outputs, one expected", out.len()).into());
        }
        carry = out.remove(0);
        if *save_trajectory {
            trajectory.push(carry.clone_handle());
        }
    }
    if !save_trajectory {
        return Ok(carry);
    }
    if cx.how == Eval::Check {
        // One step built: the declared trajectory shape, as zeros.
        return Ok(rlx_mlx_shim::array::full(
            &cx.out_dims(),
            0.0,
            cx.out_dtype(),
        )?);
    }
    if len == 0 {
        return Err("a Scan of length 0 has no trajectory".into());
    }
    let ck = Checkpoints::new(len, *num_checkpoints as usize);
    let kept: Vec<&Array> = (0..ck.rows).map(|k| &*trajectory[ck.step(k)]).collect();
    Ok(ops::stack(&ArrayList::from_arrays(kept), 0)?)
}

/// Which steps a checkpointed trajectory keeps. Row `k` is the carry after
/// step `step(k)` (0-based): `ceil((k + 1) L / K) - 1`, so the last row is
/// the final carry. This is rlx-cpu's and rlx-autodiff's rule (the forward
/// and its ScanBackward agree on it); rlx-ir's doc comment on
/// `num_checkpoints` says `floor(k L / K)`, which neither implements.
struct Checkpoints {
    len: usize,
    rows: usize,
}

impl Checkpoints {
    fn new(len: usize, k: usize) -> Checkpoints {
        Checkpoints {
            len,
            rows: if k == 0 || k >= len { len } else { k },
        }
    }
    fn partial(&self) -> bool {
        self.rows != self.len
    }
    fn step(&self, k: usize) -> usize {
        if !self.partial() {
            k
        } else {
            ((k + 1) * self.len)
                .div_ceil(self.rows)
                .saturating_sub(1)
                .min(self.len - 1)
        }
    }
}

/// The inputs of a scan body's VJP: the carry, the per-step xs, in node
/// order, and the one named `d_output`.
fn vjp_inputs(g: &Graph) -> LResult<(NodeId, Vec<NodeId>, NodeId)> {
    let (ins, _) = leaves(g);
    let d = ins
        .iter()
        .find(|(n, _)| n == "d_output")
        .map(|(_, id)| *id)
        .ok_or("the body VJP has no input named \"d_output\"")?;
    let rest: Vec<NodeId> = ins
        .iter()
        .filter(|(_, id)| *id != d)
        .map(|(_, id)| *id)
        .collect();
    let (carry, xs) = rest
        .split_first()
        .ok_or("the body VJP has no carry input")?;
    Ok((*carry, xs.to_vec(), d))
}

/// Build `g` with inputs bound by node id.
fn call_bound(cx: &Ctx, g: &Graph, bound: &[(NodeId, &Array)], what: &str) -> LResult<Vec<A>> {
    let leaf = |id: NodeId| -> PluginResult<A> {
        bound
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, a)| a.clone_handle())
            .ok_or_else(|| PluginError::internal(format!("{id} of the {what} is not bound")))
    };
    cx.evaluate(g, &leaf)
        .map_err(|e| format!("in the {what}: {}", e.message).into())
}

/// ScanBackward and ScanBackwardXs: walk `t = L-1 .. 0` through the body's
/// VJP, threading the carry's cotangent back; returns it and, when asked,
/// the per-step cotangent of xs `xs_idx`.
#[allow(clippy::too_many_arguments)]
fn scan_backward_walk(
    cx: &Ctx,
    a: &[&Array],
    body_vjp: &Graph,
    forward_body: Option<&Graph>,
    length: u32,
    save_trajectory: bool,
    num_xs: u32,
    num_checkpoints: u32,
    xs_idx: Option<usize>,
) -> LResult<(A, Vec<A>)> {
    let nx = num_xs as usize;
    arity(a, 3 + nx, "ScanBackward")?;
    let (init, traj, upstream, xs) = (a[0], a[1], a[2], &a[3..]);
    let len = length as usize;
    let ck = Checkpoints::new(len, num_checkpoints as usize);
    let (v_carry, v_xs, v_d) = vjp_inputs(body_vjp)?;
    if v_xs.len() != nx {
        return Err(format!("the body VJP takes {} xs, the op has {nx}", v_xs.len()).into());
    }
    if let Some(i) = xs_idx {
        if i >= nx || body_vjp.outputs.len() < 2 + i {
            return Err(format!("xs_idx {i} has no gradient output in the body VJP").into());
        }
    }
    let fwd = if ck.partial() {
        let f =
            forward_body.ok_or("ScanBackward with num_checkpoints < length needs forward_body")?;
        let (ins, _) = leaves(f);
        if ins.len() != 1 + nx {
            return Err(
                format!("forward_body takes {} inputs, 1 + {nx} expected", ins.len()).into(),
            );
        }
        Some((f, ins.iter().map(|(_, id)| *id).collect::<Vec<_>>()))
    } else {
        None
    };
    let steps = if cx.how == Eval::Check {
        len.min(1)
    } else {
        len
    };
    let zero = rlx_mlx_shim::array::full(&init.shape(), 0.0, init.dtype())?;
    let mut dcarry: A = if save_trajectory {
        zero
    } else {
        upstream.clone_handle()
    };
    let mut dx: Vec<Option<A>> = (0..len).map(|_| None).collect();
    let mut process = |t: usize, carry_t: &Array, dcarry: &mut A| -> LResult<()> {
        let mut d_out = dcarry.clone_handle();
        if save_trajectory {
            let ui = if ck.partial() {
                (0..ck.rows).find(|&k| ck.step(k) == t)
            } else {
                Some(t)
            };
            if let Some(ui) = ui {
                let up = row(upstream, ui)?;
                d_out = ops::add(&d_out, &up)?;
            }
        }
        let rows: Vec<A> = xs.iter().map(|x| row(x, t)).collect::<LResult<_>>()?;
        let mut bound: Vec<(NodeId, &Array)> = vec![(v_carry, carry_t), (v_d, &d_out)];
        bound.extend(v_xs.iter().copied().zip(rows.iter().map(|r| &**r)));
        let mut outs = call_bound(cx, body_vjp, &bound, "body VJP")?;
        if let Some(i) = xs_idx {
            dx[t] = Some(outs.swap_remove(1 + i));
        }
        *dcarry = outs.swap_remove(0);
        Ok(())
    };
    if let Some((f, f_ins)) = &fwd {
        for seg in (0..ck.rows).rev() {
            let end = ck.step(seg);
            let start = if seg == 0 { 0 } else { ck.step(seg - 1) + 1 };
            let mut carry: A = if seg == 0 {
                init.clone_handle()
            } else {
                row(traj, seg - 1)?
            };
            let mut before: Vec<A> = Vec::new();
            for t in start..=end {
                before.push(carry.clone_handle());
                if t < end {
                    let rows: Vec<A> = xs.iter().map(|x| row(x, t)).collect::<LResult<_>>()?;
                    let mut bound: Vec<(NodeId, &Array)> = vec![(f_ins[0], &carry)];
                    bound.extend(f_ins[1..].iter().copied().zip(rows.iter().map(|r| &**r)));
                    carry = call_bound(cx, f, &bound, "forward body")?.swap_remove(0);
                }
            }
            for t in (start..=end).rev() {
                process(t, &before[t - start], &mut dcarry)?;
            }
            if cx.how == Eval::Check {
                break;
            }
        }
    } else {
        for t in (len - steps..len).rev() {
            let carry_t = if t == 0 {
                init.clone_handle()
            } else {
                row(traj, t - 1)?
            };
            process(t, &carry_t, &mut dcarry)?;
        }
    }
    let dx: Vec<A> = dx.into_iter().flatten().collect();
    Ok((dcarry, dx))
}

fn scan_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        ScanBackward {
            body_vjp,
            length,
            save_trajectory,
            num_xs,
            num_checkpoints,
            forward_body,
        }
    );
    let (d, _) = scan_backward_walk(
        cx,
        a,
        body_vjp,
        forward_body.as_deref(),
        *length,
        *save_trajectory,
        *num_xs,
        *num_checkpoints,
        None,
    )?;
    Ok(ops::reshape(&d, &cx.out_dims())?)
}

fn scan_backward_xs(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        ScanBackwardXs {
            body_vjp,
            length,
            save_trajectory,
            num_xs,
            xs_idx,
            num_checkpoints,
            forward_body,
        }
    );
    let (_, dx) = scan_backward_walk(
        cx,
        a,
        body_vjp,
        forward_body.as_deref(),
        *length,
        *save_trajectory,
        *num_xs,
        *num_checkpoints,
        Some(*xs_idx as usize),
    )?;
    if cx.how == Eval::Check || dx.len() != *length as usize {
        // The check built the walk's first step only.
        return Ok(rlx_mlx_shim::array::full(
            &cx.out_dims(),
            0.0,
            cx.out_dtype(),
        )?);
    }
    let rows: Vec<A> = dx
        .iter()
        .map(|r| {
            let mut d = cx.out_dims();
            d.remove(0);
            ops::reshape(r, &d)
        })
        .collect::<Result<_, _>>()?;
    Ok(ops::stack(
        &ArrayList::from_arrays(rows.iter().map(|r| &**r)),
        0,
    )?)
}

pub fn entries() -> Vec<Lowering> {
    vec![
        crate::row!(
            If,
            crate::dtype::ALL,
            Composite,
            "both branches built on the captures, mx::where on the predicate (no host sync; stays in the lazy graph and mx::compile)",
            if_
        ),
        crate::row!(
            While,
            crate::dtype::ALL,
            HostEvaluated,
            "a host loop: cond evaluated each iteration, body built on the carried values (evaluated each step), up to max_iterations; the trip count is the data's; in compiled mode a graph with a While runs lazily",
            while_
        ),
        crate::row!(
            Scan,
            crate::dtype::ALL,
            Composite,
            "unrolled into the MLX graph: length steps of the body on per-step xs rows, trajectory stacked (checkpoint rows kept)",
            scan
        ),
        crate::row!(
            ScanBackward,
            crate::dtype::FLOATS,
            Composite,
            "the body VJP unrolled from t = L-1 to 0 on the saved trajectory (segments recomputed with forward_body between checkpoints)",
            scan_backward
        ),
        crate::row!(
            ScanBackwardXs,
            crate::dtype::FLOATS,
            Composite,
            "as ScanBackward, stacking the body VJP's xs_idx gradient per step",
            scan_backward_xs
        ),
    ]
}
