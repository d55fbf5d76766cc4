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
//!   data's, never a fixed unroll. `mx::compile` cannot trace a loop whose
//!   trip count depends on values, so in compiled mode a graph holding a
//!   While runs lazily.
//! - **Scan** is unrolled into the MLX graph: `length` steps of the body,
//!   per-step slices of the `xs`, the trajectory stacked (or the
//!   checkpoint rows kept). The compile-time check builds one step.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::executable::{evaluate, Eval};
use crate::graph_check::leaves;
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
    evaluate(body, cx.rng, cx.custom, &leaf, cx.how)
        .map_err(|e| format!("in the {what}: {}", e.message).into())
}

fn if_(cx: &Ctx, a: &[&Array]) -> LResult {
    let Op::If {
        then_branch,
        else_branch,
    } = &cx.node.op
    else {
        return Err("not an If".into());
    };
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
    let Op::While {
        cond,
        body,
        max_iterations,
    } = &cx.node.op
    else {
        return Err("not a While".into());
    };
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
    let mut steps = 0usize;
    loop {
        if max_iterations.is_some_and(|m| steps >= m) {
            break;
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

/// Row `t` of `xs` along axis 0.
fn row(xs: &Array, t: usize) -> LResult {
    let shape = xs.shape();
    let mut start = vec![0i32; shape.len()];
    let mut stop = shape.clone();
    start[0] = t as i32;
    stop[0] = t as i32 + 1;
    let strides = vec![1i32; shape.len()];
    let s = ops::slice(xs, &start, &stop, &strides)?;
    Ok(ops::squeeze(&s, &[0])?)
}

fn scan(cx: &Ctx, a: &[&Array]) -> LResult {
    let Op::Scan {
        body,
        length,
        save_trajectory,
        num_bcast,
        num_xs,
        num_checkpoints,
    } = &cx.node.op
    else {
        return Err("not a Scan".into());
    };
    let (nb, nx, len) = (*num_bcast as usize, *num_xs as usize, *length as usize);
    arity(a, 1 + nb + nx, "Scan")?;
    let bcast = &a[1..1 + nb];
    let xs = &a[1 + nb..];
    for (i, x) in xs.iter().enumerate() {
        if x.shape().first().copied() != Some(len as i32) {
            return Err(format!(
                "Scan xs {i} has shape {:?}; its leading axis must be the length {len}",
                x.shape()
            )
            .into());
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
    let k = *num_checkpoints as usize;
    let kept: Vec<&Array> = if k == 0 || k >= len {
        trajectory.iter().map(|x| &**x).collect()
    } else {
        (0..k).map(|t| &*trajectory[t * len / k]).collect()
    };
    Ok(ops::stack(&ArrayList::from_arrays(kept), 0)?)
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
    ]
}
