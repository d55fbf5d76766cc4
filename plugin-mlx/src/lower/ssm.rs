//! State-space recurrences: SelectiveScan (Mamba) and GatedDeltaNet
//! (rlx-ir 0.2.19 `src/op.rs`). Both carry a state along the sequence; each
//! step is a handful of batched MLX ops over every batch row and channel or
//! head at once, unrolled over the sequence in the MLX graph.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::lower::I32;
use rlx_mlx_shim::{ops, Array, ArrayList};

/// Step `t` of `x` along axis 1, the axis removed.
fn at(x: &Array, t: usize) -> LResult {
    let s = x.shape();
    let mut start = vec![0i32; s.len()];
    let mut stop = s.clone();
    start[1] = t.i32()?;
    stop[1] = t.i32()? + 1;
    let r = ops::slice(x, &start, &stop, &vec![1; s.len()])?;
    Ok(ops::squeeze(&r, &[1])?)
}

fn stack1(v: &[A]) -> LResult {
    Ok(ops::stack(
        &ArrayList::from_arrays(v.iter().map(|x| &**x)),
        1,
    )?)
}

/// h[t] = exp(Δ[t] A) h[t-1] + Δ[t] B[t] x[t];  y[t] = Σ_n C[t] h[t], per
/// channel; the state starts at zero for every batch row.
fn selective_scan(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, SelectiveScan { state_size });
    arity(a, 5, "SelectiveScan")?;
    let xd = cx.in_dims(0);
    let ad = cx.in_dims(2);
    if xd.len() != 3 || ad.len() != 2 || ad[1] as usize != *state_size || ad[0] != xd[2] {
        return Err(format!(
            "SelectiveScan takes x [b, s, h] and a [h, n = state_size {state_size}]; got x {xd:?}, a {ad:?}"
        )
        .into());
    }
    let (b, s, h, n) = (xd[0], xd[1] as usize, xd[2], ad[1]);
    let (x, delta, am, bm, cm) = (a[0], a[1], a[2], a[3], a[4]);
    let mut state = rlx_mlx_shim::array::full(&[b, h, n], 0.0, x.dtype())?;
    let mut ys = Vec::with_capacity(s);
    for t in 0..s {
        let d = ops::expand_dims(&*at(delta, t)?, &[2])?; // [b, h, 1]
        let da = ops::exp(&*ops::multiply(&d, am)?)?; // [b, h, n]
        let xt = ops::expand_dims(&*at(x, t)?, &[2])?; // [b, h, 1]
        let bt = ops::expand_dims(&*at(bm, t)?, &[1])?; // [b, 1, n]
        let ct = ops::expand_dims(&*at(cm, t)?, &[1])?; // [b, 1, n]
        let inp = ops::multiply(&*ops::multiply(&d, &xt)?, &bt)?;
        state = ops::add(&*ops::multiply(&da, &state)?, &inp)?;
        ys.push(ops::sum(&*ops::multiply(&state, &ct)?, &[2], false)?);
    }
    stack1(&ys)
}

/// Per token and head, with S[i, j] (key i, value j):
/// S *= exp(g);  sk = Sᵀk;  d = (v - sk) β;  S += k dᵀ;  o = Sᵀq / √n.
fn gated_delta_net(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        GatedDeltaNet {
            state_size,
            carry_state,
            gate_per_channel,
        }
    );
    arity(a, if *carry_state { 6 } else { 5 }, "GatedDeltaNet")?;
    let qd = cx.in_dims(0);
    if qd.len() != 4 || qd[3] as usize != *state_size {
        return Err(format!(
            "GatedDeltaNet takes q [b, s, h, n = state_size {state_size}], got {qd:?}"
        )
        .into());
    }
    let (b, s, h, n) = (qd[0], qd[1] as usize, qd[2], qd[3]);
    let (q, k, v, g, beta) = (a[0], a[1], a[2], a[3], a[4]);
    let mut st: A = if *carry_state {
        ops::reshape(a[5], &[b, h, n, n])?
    } else {
        rlx_mlx_shim::array::full(&[b, h, n, n], 0.0, q.dtype())?
    };
    let scale = rlx_mlx_shim::array::full(&[], 1.0 / (n as f64).sqrt(), q.dtype())?;
    let mut outs = Vec::with_capacity(s);
    for t in 0..s {
        let gt = ops::exp(&*at(g, t)?)?;
        // Per-head gate [b, h] scales the whole matrix; per-channel [b, h, n]
        // scales each key row.
        let decay = if *gate_per_channel {
            ops::expand_dims(&gt, &[3])?
        } else {
            ops::expand_dims(&gt, &[2, 3])?
        };
        st = ops::multiply(&st, &decay)?;
        let kt = at(k, t)?; // [b, h, n]
        let krow = ops::expand_dims(&kt, &[2])?; // [b, h, 1, n]
        let sk = ops::squeeze(&*ops::matmul(&krow, &st)?, &[2])?; // [b, h, n]
        let bt = ops::expand_dims(&*at(beta, t)?, &[2])?; // [b, h, 1]
        let d = ops::multiply(&*ops::subtract(&*at(v, t)?, &sk)?, &bt)?;
        let outer = ops::multiply(
            &*ops::expand_dims(&kt, &[3])?,
            &*ops::expand_dims(&d, &[2])?,
        )?;
        st = ops::add(&st, &outer)?;
        let qrow = ops::expand_dims(&*at(q, t)?, &[2])?;
        let o = ops::squeeze(&*ops::matmul(&qrow, &st)?, &[2])?;
        outs.push(ops::multiply(&o, &scale)?);
    }
    if *carry_state {
        let dims = cx.in_dims(5);
        cx.writes
            .record(cx.graph, cx.input(5), ops::reshape(&st, &dims)?);
    }
    stack1(&outs)
}

pub fn entries() -> Vec<Lowering> {
    vec![
        crate::row!(
            SelectiveScan,
            crate::dtype::FLOATS,
            Composite,
            "the state [b, h, n] carried through the sequence, each step batched MLX ops (exp(ΔA)·h + ΔBx, Σ C·h), unrolled in the graph",
            selective_scan
        ),
        crate::row!(
            GatedDeltaNet,
            crate::dtype::FLOATS,
            Composite,
            "the state [b, h, n, n] carried through the sequence, each step batched matmuls (Sᵀk, k dᵀ, Sᵀq/√n), unrolled in the graph; carry_state reads the initial state and writes the final one back when it is a param",
            gated_delta_net
        ),
    ]
}
