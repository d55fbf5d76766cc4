//! Grouped (mixture-of-experts) and low-rank matmuls: GroupedMatMul and
//! LoraMatMul. The expert gather and batched matmul also serve the
//! quantized DequantGroupedMatMul (`quant`).

use super::{arity, numel, rows_of, scalar, to_f32, Ctx, LResult, Lowering};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_mlx_shim::{ops, Array, DType as Mx};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            LoraMatMul,
            FLOATS,
            Composite,
            "x·W + scale·(x·A)·B: three mx::matmul + multiply + add (computed in f32, \
             rounded to f16/bf16 like rlx-cpu)",
            lora_matmul
        ),
        row!(
            GroupedMatMul,
            FLOATS,
            Composite,
            "take(weight, expert_idx) then batched mx::matmul per token (computed in f32, \
             rounded to f16/bf16 like rlx-cpu)",
            grouped_matmul
        ),
    ]
}

// ── LoraMatMul ───────────────────────────────────────────────────────────

fn lora_matmul(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 4, "LoraMatMul")?;
    crate::op_fields!(cx, LoraMatMul { scale });
    // rlx-cpu: out = x·W + ((x·A)·scale)·B, the scale applied to the rank-r
    // intermediate.
    let out = cx.out_dims();
    let k = *cx.in_dims(0).last().ok_or("LoraMatMul: x has rank 0")?;
    let n = *out.last().ok_or("LoraMatMul: output has rank 0")?;
    let x = rows_of(a[0], k)?;
    let w = ops::reshape(a[1], &[k, n])?;
    let r = (numel(&cx.in_dims(2)) / k as i64).i32()?;
    let am = ops::reshape(a[2], &[k, r])?;
    let bm = ops::reshape(a[3], &[r, n])?;
    let base = ops::matmul(&x, &*to_f32(&w)?)?;
    let mut t = ops::matmul(&x, &*to_f32(&am)?)?;
    if *scale != 1.0 {
        t = ops::multiply(&t, &*scalar(*scale as f64, Mx::F32)?)?;
    }
    let low = ops::matmul(&t, &*to_f32(&bm)?)?;
    Ok(ops::reshape(&*ops::add(&base, &low)?, &out)?)
}

// ── GroupedMatMul ────────────────────────────────────────────────────────

/// Expert ids as rlx-cpu reads them (`f32 as usize`: truncation, negatives
/// saturate to 0), clamped to the bank (rlx-cpu panics past the end).
pub(super) fn expert_ids(idx: &Array, experts: i32) -> LResult {
    let i = ops::astype(&*ops::reshape(idx, &[-1])?, Mx::I32)?;
    let i = ops::maximum(&i, &*scalar(0.0, Mx::I32)?)?;
    Ok(ops::minimum(&i, &*scalar((experts - 1) as f64, Mx::I32)?)?)
}

/// `out[i] = x[i] @ bank[ids[i]]` with `bank [E, K, N]`.
pub(super) fn gather_matmul(x: &Array, bank: &Array, ids: &Array, k: i32, out: &[i32]) -> LResult {
    let x = ops::reshape(&*to_f32(x)?, &[-1, 1, k])?;
    let w = ops::take(bank, ids, 0)?; // [M, K, N]
    let y = ops::matmul(&x, &w)?; // [M, 1, N]
    Ok(ops::reshape(&y, out)?)
}

fn grouped_matmul(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "GroupedMatMul")?;
    let wd = cx.in_dims(1);
    if wd.len() != 3 {
        return Err(format!("GroupedMatMul: weight rank {} (want [E, K, N])", wd.len()).into());
    }
    let ids = expert_ids(a[2], wd[0])?;
    gather_matmul(a[0], &*to_f32(a[1])?, &ids, wd[1], &cx.out_dims())
}
