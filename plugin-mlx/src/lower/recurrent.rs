//! Lstm, Gru, Rnn (PyTorch semantics; rlx-ir 0.2.19 `src/op.rs`): per layer
//! and direction, one GEMM projects the whole sequence's inputs
//! (`[B·S, in] @ W_ihᵀ`), then the recurrence is unrolled over the sequence
//! in the MLX graph (one `[B, H] @ W_hhᵀ` per step and the gate math), so
//! everything stays one lazy graph and fuses under `mx::compile`.
//!
//! Weights are packed as rlx-cpu reads them, whatever shape the tensors
//! are declared with: `(layer, direction)` blocks, layer-major, each
//! `[G·H, in_l]` for `w_ih` (`in_l` = input for layer 0, else `D·H`),
//! `[G·H, H]` for `w_hh`, `[G·H]` for the biases, `G` = 4 (Lstm), 3 (Gru),
//! 1 (Rnn); `h0`/`c0` are `[L·D, B, H]`. With `carry`, the initial states
//! are read from `h0`/`c0` (else zeros) and the final ones written back
//! into them when they are params, as rlx-cpu writes them into its arena.
//!
//! **fp16 compute** (`RLX_MLX_RNN_F16`, mirroring rlx-runtime's in-tree MLX
//! backend switch of the same name): when the host's setting is on, an f32
//! recurrence is computed in float16: `x`, the weights, the biases and the
//! `h`/`c` states are cast to f16 for the input projection, the per-step
//! `h @ W_hhᵀ` products (MLX accumulates half-precision matmuls in f32)
//! and the gate math; the output (and, with `carry`, the final states) are
//! cast back, so inputs and outputs stay f32 at the boundary and results
//! differ from f32 by fp16 rounding. The switch is read at lowering time
//! through the host (`rlx_plugin_api::setting_flag`), so the
//! host's in-process `rlx_ir::env::set` reaches it; an older host's switch
//! is read from the process environment.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::lower::I32;
use rlx_mlx_shim::{ops, Array, ArrayList, DType as MxDType};

/// The host setting that opts f32 recurrences into fp16 compute.
pub const F16_SWITCH: &str = "RLX_MLX_RNN_F16";

/// The dtype the recurrence computes in for inputs of `io`: f16 when `io`
/// is f32 and the host's [`F16_SWITCH`] is on, else `io` itself.
fn compute_dtype(io: MxDType) -> MxDType {
    if io == MxDType::F32 && rlx_plugin_api::setting_flag(F16_SWITCH) {
        MxDType::F16
    } else {
        io
    }
}

/// `x` in `dt` (a cast only when its dtype differs).
fn cast(x: &Array, dt: MxDType) -> LResult {
    if x.dtype() == dt {
        Ok(x.clone_handle())
    } else {
        Ok(ops::astype(x, dt)?)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Lstm,
    Gru,
    Rnn { relu: bool },
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn { .. } => 1,
        }
    }
}

/// Elements `[off, off + n)` of a flattened array, shaped `dims`.
fn block(flat: &Array, off: usize, dims: &[i32], what: &str) -> LResult {
    let n: usize = dims.iter().map(|d| *d as usize).product();
    let have = flat.size();
    if off + n > have {
        return Err(format!(
            "{what} holds {have} values; the packed layout needs {} (block at {off} of {n})",
            off + n
        )
        .into());
    }
    let s = ops::slice(flat, &[off.i32()?], &[(off + n).i32()?], &[1])?;
    Ok(ops::reshape(&s, dims)?)
}

/// Columns `[k·H, (k+1)·H)` of `[B, G·H]`.
fn gate(z: &Array, k: usize, h: usize) -> LResult {
    let b = z.shape()[0];
    Ok(ops::slice(
        z,
        &[0, (k * h).i32()?],
        &[b, ((k + 1) * h).i32()?],
        &[1, 1],
    )?)
}

/// Step `t` of `[B, S, F]` as `[B, F]`.
fn step(x: &Array, t: usize) -> LResult {
    let s = x.shape();
    let r = ops::slice(
        x,
        &[0, t.i32()?, 0],
        &[s[0], t.i32()? + 1, s[2]],
        &[1, 1, 1],
    )?;
    Ok(ops::squeeze(&r, &[1])?)
}

struct Dims {
    layers: usize,
    dirs: usize,
    hidden: usize,
    batch: usize,
    seq: usize,
    input: usize,
}

fn recurrent(
    cx: &Ctx,
    a: &[&Array],
    cell: Cell,
    hidden: usize,
    layers: usize,
    bi: bool,
    carry: bool,
) -> LResult {
    let n_w = if cell == Cell::Gru { 5 } else { 4 };
    let n_state = match (carry, cell) {
        (false, _) => 0,
        (true, Cell::Lstm) => 2,
        (true, _) => 1,
    };
    arity(a, n_w + n_state, &format!("{:?}", cx.node.op.kind()))?;
    let xd = cx.in_dims(0);
    if xd.len() != 3 {
        return Err(format!("x must be [batch, seq, input], got {xd:?}").into());
    }
    let d = Dims {
        layers,
        dirs: if bi { 2 } else { 1 },
        hidden,
        batch: xd[0] as usize,
        seq: xd[1] as usize,
        input: xd[2] as usize,
    };
    if d.layers == 0 || d.hidden == 0 {
        return Err("num_layers and hidden_size must be at least 1".into());
    }
    let g = cell.gates();
    // The recurrent weights hold every layer's and direction's
    // [gates * hidden, hidden] block: the attributes must fit them (the
    // offsets below are products of them, which could otherwise overflow).
    let w_hh_len = usize::try_from(super::numel(&cx.in_dims(2))).unwrap_or(0);
    let need = [d.layers, d.dirs, g, d.hidden, d.hidden]
        .iter()
        .try_fold(1usize, |n, x| n.checked_mul(*x));
    if need.is_none_or(|n| n > w_hh_len) {
        return Err(format!(
            "num_layers {} and hidden_size {} need more recurrent weights than w_hh's {w_hh_len} values",
            d.layers, d.hidden
        )
        .into());
    }
    // Read once per lowering: every step, layer and direction of this
    // node computes in the same dtype.
    let io_dt = a[0].dtype();
    let dt = compute_dtype(io_dt);
    let half = dt != io_dt;
    // In fp16 compute every operand is cast; otherwise none is (MLX's
    // promotion rules apply, as without the switch).
    let compute = |x: &Array| -> LResult {
        if half {
            cast(x, dt)
        } else {
            Ok(x.clone_handle())
        }
    };
    let flat = |x: &Array| -> LResult { compute(&*ops::reshape(x, &[-1])?) };
    let w_ih = flat(a[1])?;
    let w_hh = flat(a[2])?;
    let (b_ih, b_hh) = if cell == Cell::Gru {
        (flat(a[3])?, Some(flat(a[4])?))
    } else {
        (flat(a[3])?, None)
    };
    let h0 = if carry { Some(flat(a[n_w])?) } else { None };
    let c0 = if carry && cell == Cell::Lstm {
        Some(flat(a[n_w + 1])?)
    } else {
        None
    };
    let (h, bsz) = (d.hidden.i32()?, d.batch.i32()?);
    let gh = (g * d.hidden).i32()?;
    let zeros = || rlx_mlx_shim::array::full(&[bsz, h], 0.0, dt);
    let mut layer_in: A = compute(a[0])?;
    let mut in_l = d.input;
    let mut wih_off = 0usize;
    let mut h_final: Vec<A> = Vec::new();
    let mut c_final: Vec<A> = Vec::new();
    for l in 0..d.layers {
        let mut outs: Vec<A> = Vec::new();
        for dir in 0..d.dirs {
            let ld = l * d.dirs + dir;
            let wih = block(
                &w_ih,
                wih_off + dir * g * d.hidden * in_l,
                &[gh, in_l.i32()?],
                "w_ih",
            )?;
            let whh = block(&w_hh, ld * g * d.hidden * d.hidden, &[gh, h], "w_hh")?;
            let bih = block(&b_ih, ld * g * d.hidden, &[gh], "bias")?;
            let bhh = match &b_hh {
                Some(b) => Some(block(b, ld * g * d.hidden, &[gh], "b_hh")?),
                None => None,
            };
            let whh_t = ops::transpose(&whh, &[1, 0])?;
            // The sequence's input projection in one GEMM: [B, S, G·H].
            let rows = (d.batch as u64 * d.seq as u64).i32()?;
            let x2 = ops::reshape(&layer_in, &[rows, in_l.i32()?])?;
            let zx = ops::matmul(&x2, &*ops::transpose(&wih, &[1, 0])?)?;
            let zx = ops::add(&zx, &bih)?;
            let zx = ops::reshape(&zx, &[bsz, d.seq.i32()?, gh])?;
            let state = |s: &Option<A>| -> LResult {
                match s {
                    Some(s) => block(s, ld * d.batch * d.hidden, &[bsz, h], "initial state"),
                    None => Ok(zeros()?),
                }
            };
            let mut hs = state(&h0)?;
            let mut cs = state(&c0)?;
            let mut steps: Vec<Option<A>> = (0..d.seq).map(|_| None).collect();
            for k in 0..d.seq {
                let t = if dir == 0 { k } else { d.seq - 1 - k };
                let zt = step(&zx, t)?;
                let zh = ops::matmul(&hs, &whh_t)?;
                match cell {
                    Cell::Lstm => {
                        let z = ops::add(&zt, &zh)?;
                        let i = ops::sigmoid(&*gate(&z, 0, d.hidden)?)?;
                        let f = ops::sigmoid(&*gate(&z, 1, d.hidden)?)?;
                        let gg = ops::tanh(&*gate(&z, 2, d.hidden)?)?;
                        let o = ops::sigmoid(&*gate(&z, 3, d.hidden)?)?;
                        cs = ops::add(&*ops::multiply(&f, &cs)?, &*ops::multiply(&i, &gg)?)?;
                        hs = ops::multiply(&o, &*ops::tanh(&cs)?)?;
                    }
                    Cell::Gru => {
                        let zh = ops::add(&zh, bhh.as_ref().expect("gru biases"))?;
                        let r = ops::sigmoid(&*ops::add(
                            &*gate(&zt, 0, d.hidden)?,
                            &*gate(&zh, 0, d.hidden)?,
                        )?)?;
                        let z = ops::sigmoid(&*ops::add(
                            &*gate(&zt, 1, d.hidden)?,
                            &*gate(&zh, 1, d.hidden)?,
                        )?)?;
                        let n = ops::tanh(&*ops::add(
                            &*gate(&zt, 2, d.hidden)?,
                            &*ops::multiply(&r, &*gate(&zh, 2, d.hidden)?)?,
                        )?)?;
                        // h' = (1 - z) n + z h = n + z (h - n)
                        hs = ops::add(&n, &*ops::multiply(&z, &*ops::subtract(&hs, &n)?)?)?;
                    }
                    Cell::Rnn { relu } => {
                        let z = ops::add(&zt, &zh)?;
                        hs = if relu {
                            ops::maximum(&z, &*rlx_mlx_shim::array::full(&[], 0.0, z.dtype())?)?
                        } else {
                            ops::tanh(&z)?
                        };
                    }
                }
                steps[t] = Some(hs.clone_handle());
            }
            let seq: Vec<A> = steps
                .into_iter()
                .map(|s| s.expect("every step ran"))
                .collect();
            outs.push(ops::stack(
                &ArrayList::from_arrays(seq.iter().map(|s| &**s)),
                1,
            )?);
            h_final.push(hs);
            c_final.push(cs);
        }
        wih_off += d.dirs * g * d.hidden * in_l;
        layer_in = if outs.len() == 1 {
            outs.swap_remove(0)
        } else {
            ops::concatenate(&ArrayList::from_arrays(outs.iter().map(|o| &**o)), 2)?
        };
        in_l = d.dirs * d.hidden;
    }
    if carry {
        // The final states (in fp16 compute, back in their params' dtype).
        let stacked = |v: &[A], like: &Array| -> LResult {
            let s = ops::stack(&ArrayList::from_arrays(v.iter().map(|x| &**x)), 0)?;
            if half {
                cast(&s, like.dtype())
            } else {
                Ok(s)
            }
        };
        cx.writes
            .record(cx.graph, cx.input(n_w), stacked(&h_final, a[n_w])?);
        if cell == Cell::Lstm {
            cx.writes
                .record(cx.graph, cx.input(n_w + 1), stacked(&c_final, a[n_w + 1])?);
        }
    }
    if half {
        cast(&layer_in, io_dt)
    } else {
        Ok(layer_in)
    }
}

fn lstm(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        Lstm {
            hidden_size,
            num_layers,
            bidirectional,
            carry,
        }
    );
    recurrent(
        cx,
        a,
        Cell::Lstm,
        *hidden_size,
        *num_layers,
        *bidirectional,
        *carry,
    )
}

fn gru(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        Gru {
            hidden_size,
            num_layers,
            bidirectional,
            carry,
        }
    );
    recurrent(
        cx,
        a,
        Cell::Gru,
        *hidden_size,
        *num_layers,
        *bidirectional,
        *carry,
    )
}

fn rnn(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        Rnn {
            hidden_size,
            num_layers,
            bidirectional,
            carry,
            relu,
        }
    );
    recurrent(
        cx,
        a,
        Cell::Rnn { relu: *relu },
        *hidden_size,
        *num_layers,
        *bidirectional,
        *carry,
    )
}

pub fn entries() -> Vec<Lowering> {
    const NOTE: &str = "one input-projection GEMM per layer and direction, then the recurrence unrolled in the MLX graph; carry reads h0/c0 and writes the final states back into them when they are params; the host setting RLX_MLX_RNN_F16 computes an f32 recurrence in fp16 (f32 in and out)";
    vec![
        crate::row!(Lstm, crate::dtype::FLOATS, Composite, NOTE, lstm),
        crate::row!(Gru, crate::dtype::FLOATS, Composite, NOTE, gru),
        crate::row!(Rnn, crate::dtype::FLOATS, Composite, NOTE, rnn),
    ]
}
