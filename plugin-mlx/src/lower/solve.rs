//! Linear solves: DenseSolve, BatchedDenseSolve.
//!
//! rlx-ir's layout: `DenseSolve` takes `A [N, N]` then `b [N]` or `[N, K]`;
//! `BatchedDenseSolve` takes `A [B, N, N]` then `b [B, N]` or `[B, N, K]`.
//! The output has `b`'s shape. Both map to `mx::linalg::solve` (LU with
//! partial pivoting, run on the CPU stream), a vector right-hand side being
//! solved as a one-column matrix.
//!
//! Dtypes: rlx-cpu solves f32 and f64 with LAPACK `sgesv`/`dgesv`; f16/bf16
//! graphs are widened to f32 on the CPU, so halves are solved here in f32
//! too (the executable rounds the solution once to the declared dtype).
//! f64 is not lowered: MLX 0.32.4's float64 solve of a 1x1 system corrupts
//! the heap (glibc aborts with "free(): invalid pointer" later in the
//! process), so an f64 solve is refused at compile.
//!
//! Singular systems: rlx-cpu refuses an exactly singular `A` (LAPACK reports
//! a zero pivot and the kernel panics). MLX's solve (LU factor + triangular
//! inverses) fails the same way: the triangular inversion reports the zero
//! pivot and MLX raises an error at evaluation, which the plugin returns as
//! a run-time error. A nearly singular `A` is solved on both sides.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::row;
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{linalg, ops, Array, DType as MxDType};

/// f32 and the halves (solved in f32). Not f64: see the module doc.
const SOLVE_DTYPES: &[IrDType] = &[IrDType::F32, IrDType::F16, IrDType::BF16];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            DenseSolve,
            SOLVE_DTYPES,
            Composite,
            "mx::linalg::solve (LU, CPU stream) of A [N,N] with b [N] or [N,K]; \
             halves solved in f32; an exactly singular A is a run-time error, as \
             on rlx-cpu",
            dense_solve
        ),
        row!(
            BatchedDenseSolve,
            SOLVE_DTYPES,
            Composite,
            "batched mx::linalg::solve of A [B,N,N] with b [B,N] or [B,N,K]; \
             halves solved in f32; a singular slice is a run-time error, as on \
             rlx-cpu",
            batched_dense_solve
        ),
    ]
}

fn cast(a: &Array, d: MxDType) -> LResult {
    Ok(ops::astype(a, d)?)
}

/// Solve `a x = b` where `a` is `[.., N, N]` (`batch` leading dims) and `b`
/// is `a`'s batch dims followed by `[N]` or `[N, K]`.
fn solve(cx: &Ctx, args: &[&Array], batch: usize, op: &str) -> LResult {
    arity(args, 2, op)?;
    let ad = cx.in_dims(0);
    let bd = cx.in_dims(1);
    let out = cx.out_dims();
    let form = if batch == 0 {
        "A [N, N] with b [N] or [N, K]"
    } else {
        "A [B, N, N] with b [B, N] or [B, N, K]"
    };
    if ad.len() != batch + 2 || ad[batch] != ad[batch + 1] {
        return Err(format!("{op} takes {form}; A is {ad:?}: this shape is not supported").into());
    }
    let n = ad[batch];
    let vector = bd.len() == batch + 1;
    if !(vector || bd.len() == batch + 2) || bd[..batch] != ad[..batch] || bd[batch] != n {
        return Err(format!(
            "{op} takes {form}; A is {ad:?} and b is {bd:?}: this shape is not supported"
        )
        .into());
    }
    if out != bd {
        return Err(format!("{op}: the output {out:?} must have b's shape {bd:?}").into());
    }
    for i in 0..2 {
        if !matches!(cx.in_dtype(i), IrDType::F32 | IrDType::F16 | IrDType::BF16) {
            return Err(format!(
                "{op}: input {i} is {:?}; only float inputs are supported",
                cx.in_dtype(i)
            )
            .into());
        }
    }
    let wd = MxDType::F32;
    let a = cast(args[0], wd)?;
    let b = cast(args[1], wd)?;
    let b: A = if vector {
        ops::expand_dims(&b, &[-1])?
    } else {
        b
    };
    let x = linalg::solve(&a, &b)?;
    Ok(if vector { ops::reshape(&x, &bd)? } else { x })
}

fn dense_solve(cx: &Ctx, a: &[&Array]) -> LResult {
    solve(cx, a, 0, "DenseSolve")
}

fn batched_dense_solve(cx: &Ctx, a: &[&Array]) -> LResult {
    solve(cx, a, 1, "BatchedDenseSolve")
}
