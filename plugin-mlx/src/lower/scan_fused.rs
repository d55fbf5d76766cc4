//! A Scan whose body is elementwise float32 arithmetic over the carry's
//! shape, run on the CPU as one shim kernel (`scan_elementwise_cpu`)
//! instead of its body built once per step.
//!
//! Why: every step of a built body is several MLX ops, each a task on
//! MLX's stream thread, so a 1,000-step scan of `tanh(c * w + x_t)` took 4
//! to 20 ms against rlx-runtime's CPU backend's 0.3 ms; its arithmetic is
//! microseconds. Taken only where every value of the body is float32 of the
//! carry's exact shape (no broadcasting inside the body) and every node is
//! one of the ops below, computed as the existing lowerings compute them
//! (rlx's saturating exp under sigmoid, silu and exp; ReLU with NaN to 0);
//! anything else is built step by step as before.

use super::{LResult, A};
use crate::graph_text::leaves;
use crate::lower::I32;
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, Op};
use rlx_mlx_shim::{kernels, Array, ArrayList};

// The opcodes of shim/src/scan_kernel.cc.
fn opcode(op: &Op) -> Option<i32> {
    Some(match op {
        Op::Binary(BinaryOp::Add) => 0,
        Op::Binary(BinaryOp::Sub) => 1,
        Op::Binary(BinaryOp::Mul) => 2,
        Op::Binary(BinaryOp::Div) => 3,
        Op::Activation(Activation::Tanh) => 10,
        Op::Activation(Activation::Sigmoid) => 11,
        Op::Activation(Activation::Silu) => 12,
        Op::Activation(Activation::Exp) => 13,
        Op::Activation(Activation::Relu) => 14,
        Op::Activation(Activation::Neg) => 15,
        _ => return None,
    })
}

/// The body as the kernel's program: `(code, registers, result register)`,
/// or None when the kernel cannot run it. `dims` is the carry's shape;
/// registers 0.. are the body's inputs in order (carry, broadcast operands,
/// xs rows), then one per computed node.
fn program(body: &Graph, dims: &[usize]) -> Option<(Vec<i32>, usize, usize)> {
    let (ins, params) = leaves(body);
    if !params.is_empty() || body.outputs.len() != 1 {
        return None;
    }
    let fits = |id: rlx_ir::NodeId| {
        let s = body.shape(id);
        s.dtype() == DType::F32
            && s.dims().len() == dims.len()
            && s.dims()
                .iter()
                .zip(dims)
                .all(|(d, &w)| *d == rlx_ir::Dim::Static(w))
    };
    let mut reg = vec![usize::MAX; body.len()];
    for (i, (_, id)) in ins.iter().enumerate() {
        if !fits(*id) {
            return None;
        }
        reg[id.0 as usize] = i;
    }
    let mut next = ins.len();
    let mut code = Vec::new();
    for n in body.nodes() {
        if matches!(n.op, Op::Input { .. }) {
            continue;
        }
        let op = opcode(&n.op)?;
        let binary = op < 10;
        if !fits(n.id) || n.inputs.len() != if binary { 2 } else { 1 } {
            return None;
        }
        let src: Vec<usize> = n.inputs.iter().map(|i| reg[i.0 as usize]).collect();
        if src.contains(&usize::MAX) || n.inputs.iter().any(|&i| !fits(i)) {
            return None;
        }
        reg[n.id.0 as usize] = next;
        code.extend([
            op,
            next.i32().ok()?,
            src[0].i32().ok()?,
            match src.get(1) {
                Some(&r) => r.i32().ok()?,
                None => -1,
            },
        ]);
        next += 1;
    }
    let result = reg[body.outputs[0].0 as usize];
    (result != usize::MAX).then_some((code, next, result))
}

/// The scan as one kernel, when the body and operands allow it and this
/// thread builds for the CPU; None otherwise (the caller builds the steps).
/// `rows`: the steps whose carry the output keeps, or empty for the final
/// carry alone.
pub(crate) fn try_scan(
    body: &Graph,
    init: &Array,
    bcast: &[&Array],
    xs: &[&Array],
    len: usize,
    rows: &[i64],
) -> LResult<Option<A>> {
    let operands: Vec<&Array> = std::iter::once(init)
        .chain(bcast.iter().copied())
        .chain(xs.iter().copied())
        .collect();
    if len == 0 || !super::cpu_f32(&operands) {
        return Ok(None);
    }
    let dims: Vec<usize> = init.shape().iter().map(|&d| d as usize).collect();
    let Some((code, n_regs, result)) = program(body, &dims) else {
        return Ok(None);
    };
    Ok(Some(kernels::scan_elementwise_cpu(
        &ArrayList::from_arrays(operands),
        bcast.len(),
        &code,
        n_regs,
        result,
        len,
        rows,
    )?))
}
