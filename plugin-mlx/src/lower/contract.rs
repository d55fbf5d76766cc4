//! Contraction: DotGeneral (XLA's dot_general), as one `mx::matmul` over
//! (batch, free, contract) views. Like rlx-cpu, which widens f16/bf16 to an
//! f32 arena, half-precision operands accumulate in f32 and round once.

use super::{arity, Ctx, LResult, Lowering};
use crate::lower::I32;
use crate::row;
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{ops, Array, DType as MxDType};

const FLOATS: &[IrDType] = &[IrDType::F32, IrDType::F16, IrDType::BF16];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            DotGeneral,
            FLOATS,
            Composite,
            "transpose to (batch, free, contract), reshape, mx::matmul, reshape to (batch, lhs free, rhs free); f16/bf16 accumulate in f32",
            dot_general
        ),
    ]
}

fn is_half(d: IrDType) -> bool {
    matches!(d, IrDType::F16 | IrDType::BF16)
}

fn to_f32(a: &Array) -> LResult {
    Ok(ops::astype(a, MxDType::F32)?)
}

fn unique_axes(axes: &[usize], rank: usize, what: &str) -> LResult<Vec<usize>> {
    let mut seen = vec![false; rank];
    for &a in axes {
        if a >= rank {
            return Err(format!("{what}: axis {a} is out of range for rank {rank}").into());
        }
        if seen[a] {
            return Err(format!("{what}: axis {a} is listed twice").into());
        }
        seen[a] = true;
    }
    Ok(axes.to_vec())
}

fn prod(dims: &[i32], axes: &[usize]) -> i32 {
    axes.iter().map(|&a| dims[a]).product()
}

fn dot_general(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "DotGeneral")?;
    crate::op_fields!(
        cx,
        DotGeneral {
            lhs_contracting: lc,
            rhs_contracting: rc,
            lhs_batch: lb,
            rhs_batch: rb,
        }
    );
    let (ld, rd) = (cx.in_dims(0), cx.in_dims(1));
    if lc.len() != rc.len() || lb.len() != rb.len() {
        return Err(format!(
            "DotGeneral: lhs/rhs contracting ({lc:?} / {rc:?}) and batch ({lb:?} / {rb:?}) dims must pair up"
        )
        .into());
    }
    let lused: Vec<usize> = lb.iter().chain(lc).copied().collect();
    let rused: Vec<usize> = rb.iter().chain(rc).copied().collect();
    unique_axes(&lused, ld.len(), "DotGeneral lhs")?;
    unique_axes(&rused, rd.len(), "DotGeneral rhs")?;
    for (kind, l, r) in [("batch", lb, rb), ("contracting", lc, rc)] {
        for (&i, &j) in l.iter().zip(r) {
            if ld[i] != rd[j] {
                return Err(format!(
                    "DotGeneral: {kind} dim lhs axis {i} ({}) != rhs axis {j} ({})",
                    ld[i], rd[j]
                )
                .into());
            }
        }
    }
    let lfree: Vec<usize> = (0..ld.len()).filter(|i| !lused.contains(i)).collect();
    let rfree: Vec<usize> = (0..rd.len()).filter(|i| !rused.contains(i)).collect();
    let (b, m, k, n) = (
        prod(&ld, lb),
        prod(&ld, &lfree),
        prod(&ld, lc),
        prod(&rd, &rfree),
    );
    let perm = |v: &[&[usize]]| -> LResult<Vec<i32>> {
        v.iter().flat_map(|s| s.iter()).map(|&x| x.i32()).collect()
    };
    let prep = |x: &Array, dtype: IrDType, p: Vec<i32>, shape: [i32; 3]| -> LResult {
        let t = ops::transpose(x, &p)?;
        let t = ops::reshape(&t, &shape)?;
        Ok(if is_half(dtype) { to_f32(&t)? } else { t })
    };
    let l = prep(a[0], cx.in_dtype(0), perm(&[lb, &lfree, lc])?, [b, m, k])?;
    let r = prep(a[1], cx.in_dtype(1), perm(&[rb, rc, &rfree])?, [b, k, n])?;
    let out = ops::matmul(&l, &r)?;
    // rlx's order (XLA's): batch dims, then lhs free, then rhs free.
    let shape: Vec<i32> = lb
        .iter()
        .map(|&i| ld[i])
        .chain(lfree.iter().map(|&i| ld[i]))
        .chain(rfree.iter().map(|&i| rd[i]))
        .collect();
    Ok(ops::reshape(&out, &shape)?)
}
