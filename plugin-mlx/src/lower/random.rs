//! Random numbers and sampling: RngNormal, RngUniform, Sample.
//!
//! rlx's RNG contract (rlx-ir `rng.rs`, default [`RngBackend::Philox`]): a
//! node draws from one sequential Philox4×32-10 stream seeded with
//! `combine_seed(RngOptions::seed, key)`; the stream's u32 word `j` is lane
//! `j % 4` of the block computed from the 128-bit counter `j / 4` (key
//! bumped by the Weyl constants every round). `next_f32` is
//! `(word >> 8) / 2^24`. RngUniform element `i` uses word `i`
//! (`low + u * (high - low)`); RngNormal element `i` uses words `2i`, `2i+1`
//! (Box–Muller, cos branch only: `r = sqrt(-2 ln max(u1, MIN_POSITIVE))`,
//! `theta = (2π) u2`, `mean + scale * r cos theta`).
//!
//! MLX's own random (threefry) does not reproduce that stream, so the
//! stream is computed here with MLX integer ops: the Philox rounds over an
//! arange of block counters, the 32×32→64 multiply-high done in uint64.
//!
//! The seed: `RngOptions` is an *executable-level* option of rlx-runtime
//! (`CompileOptions::rng`, `CompiledGraph::set_rng`), not part of the graph;
//! it reaches the plugin in the ABI's compile options (`rng_policy`,
//! `rng_seed`) and each lowering reads it from [`Ctx::rng`]. The
//! per-node `key` is in the graph. `op_seed` only matters to the Ort backend and is ignored here, as
//! it is by rlx-cpu's Philox path.
//!
//! Sample carries its own seed in the op (`0` means `0xDEADBEEF` on rlx-cpu)
//! and draws one `next_f32` per logit row from one stream, in row order; the
//! filtering (temperature, top-k, softmax, top-p, inverse CDF) is rlx-cpu's
//! `sample_row` expressed with MLX ops.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::lower::I32;
use crate::row;
use rlx_ir::{DType as IrDType, RngBackend};
use rlx_mlx_shim::{array, ops, Array, ArrayList, DType as MxDType};

/// rlx-cpu fills random ops and Sample through `&mut [f32]`: f32 only.
const F32: &[IrDType] = &[IrDType::F32];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            RngUniform,
            F32,
            Composite,
            "Philox4x32-10 in MLX uint32/uint64 ops (rlx stream, RngOptions seed from the compile options + node key), (w>>8)/2^24 scaled to [low,high)",
            rng_uniform
        ),
        row!(
            RngNormal,
            F32,
            Composite,
            "Philox4x32-10 in MLX uint32/uint64 ops (rlx stream, RngOptions seed from the compile options + node key), Box-Muller cos branch on word pairs",
            rng_normal
        ),
        row!(
            Sample,
            F32,
            Composite,
            "temperature, top-k mask (sort), softmax, top-p (stable argsort + exclusive cumsum), inverse CDF against one Philox uniform per row",
            sample
        ),
    ]
}

fn u32_scalar(v: u32) -> LResult {
    Ok(Array::from_slice(&[v], &[])?)
}

fn u64_scalar(v: u64) -> LResult {
    Ok(Array::from_slice(&[v], &[])?)
}

fn f32_scalar(v: f32) -> LResult {
    Ok(Array::from_slice(&[v], &[])?)
}

/// The first `n_words` u32 words of rlx's sequential Philox4×32-10 stream for
/// `seed` (`rlx_ir::Philox4x32::new(seed)` followed by `next_u32` calls), as
/// a uint32 array `[n_words]`.
fn philox_words(seed: u64, n_words: usize) -> LResult {
    let n_blocks = n_words.div_ceil(4).max(1);
    if n_blocks as u64 > u32::MAX as u64 {
        return Err(format!(
            "a Philox stream of {n_words} words (counter beyond 32 bits) is not lowered"
        )
        .into());
    }
    // Counter = (block, 0, 0, 0): block < 2^32, so the carries never reach
    // the upper counter words.
    let zeros = array::full(&[n_blocks.i32()?], 0.0, MxDType::U32)?;
    let mut s: [A; 4] = [
        array::arange(0.0, n_blocks as f64, 1.0, MxDType::U32)?,
        zeros.clone_handle(),
        zeros.clone_handle(),
        zeros,
    ];
    let m0 = u64_scalar(0xD256_1A75)?;
    let m1 = u64_scalar(0xCD9E_8D57)?;
    let sh32 = u64_scalar(32)?;
    let mut key = [(seed & 0xFFFF_FFFF) as u32, (seed >> 32) as u32];
    for _ in 0..10 {
        let p0 = ops::multiply(&*ops::astype(&s[0], MxDType::U64)?, &m0)?;
        let p1 = ops::multiply(&*ops::astype(&s[2], MxDType::U64)?, &m1)?;
        let hi0 = ops::astype(&*ops::right_shift(&p0, &sh32)?, MxDType::U32)?;
        let lo0 = ops::astype(&p0, MxDType::U32)?;
        let hi1 = ops::astype(&*ops::right_shift(&p1, &sh32)?, MxDType::U32)?;
        let lo1 = ops::astype(&p1, MxDType::U32)?;
        let k0 = u32_scalar(key[0])?;
        let k1 = u32_scalar(key[1])?;
        let n0 = ops::bitwise_xor(&*ops::bitwise_xor(&hi1, &s[1])?, &k0)?;
        let n2 = ops::bitwise_xor(&*ops::bitwise_xor(&hi0, &s[3])?, &k1)?;
        s = [n0, lo1, n2, lo0];
        key[0] = key[0].wrapping_add(0x9E37_79B9);
        key[1] = key[1].wrapping_add(0xBB67_AE85);
    }
    let list = ArrayList::from_arrays(s.iter().map(|a| &**a));
    // [blocks, 4] row-major = the words in stream order.
    let words = ops::reshape(&*ops::stack(&list, 1)?, &[(n_blocks * 4).i32()?])?;
    Ok(ops::slice(&words, &[0], &[n_words.i32()?], &[1])?)
}

/// `Philox4x32::next_f32` on each word: `(w >> 8) / 2^24` in f32 (exact).
fn words_to_unit_f32(words: &Array) -> LResult {
    let top24 = ops::right_shift(words, &*u32_scalar(8)?)?;
    let f = ops::astype(&top24, MxDType::F32)?;
    Ok(ops::divide(&f, &*f32_scalar((1u32 << 24) as f32)?)?)
}

/// `a * b`, rounded to f32 before whatever adds to it. MLX's compiled mode
/// fuses elementwise chains into one kernel, and on CUDA NVRTC contracts
/// `a * b + c` in such a kernel into a fused multiply-add, rounded once:
/// a value or two in 21 then came out 1 to 4 ulps from rlx's stream (seen on
/// an H200). A reshape is not fusable, so it ends the fused kernel between
/// the product and the sum; the `[n, 1]` shape only has to differ from the
/// product's, as MLX returns a same-shape reshape unchanged.
fn rounded_product(a: &Array, b: &Array, n: usize) -> LResult {
    Ok(ops::reshape(&*ops::multiply(a, b)?, &[n.i32()?, 1])?)
}

/// The seed rlx-cpu's Philox path uses for a random node.
fn node_seed(cx: &Ctx, key: u64) -> LResult<u64> {
    let opts = cx.rng;
    match opts.backend {
        RngBackend::Philox => Ok(rlx_ir::rng::combine_seed(opts.seed, key)),
        b => Err(format!("RNG backend {b:?} is not lowered").into()),
    }
}

fn out_len(cx: &Ctx) -> usize {
    cx.out_dims().iter().map(|d| *d as usize).product()
}

fn rng_uniform(cx: &Ctx, args: &[&Array]) -> LResult {
    crate::op_fields!(cx, RngUniform { low, high, key, .. });
    if args.len() > 1 {
        arity(args, 1, "RngUniform")?;
    }
    let n = out_len(cx);
    let u = words_to_unit_f32(&*philox_words(node_seed(cx, *key)?, n)?)?;
    // rlx: `lo + u * (hi - lo)`, (hi - lo) rounded in f32 first.
    let span = f32_scalar(*high - *low)?;
    let v = ops::add(&*f32_scalar(*low)?, &*rounded_product(&u, &span, n)?)?;
    Ok(ops::reshape(&v, &cx.out_dims())?)
}

fn rng_normal(cx: &Ctx, args: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        RngNormal {
            mean,
            scale,
            key,
            ..
        }
    );
    if args.len() > 1 {
        arity(args, 1, "RngNormal")?;
    }
    let n = out_len(cx);
    let u = words_to_unit_f32(&*philox_words(node_seed(cx, *key)?, 2 * n)?)?;
    let pairs = ops::reshape(&u, &[n.i32()?, 2])?;
    let u1 = ops::reshape(
        &*ops::slice(&pairs, &[0, 0], &[n.i32()?, 1], &[1, 1])?,
        &[n.i32()?],
    )?;
    let u2 = ops::reshape(
        &*ops::slice(&pairs, &[0, 1], &[n.i32()?, 2], &[1, 1])?,
        &[n.i32()?],
    )?;
    let u1 = ops::maximum(&u1, &*f32_scalar(f32::MIN_POSITIVE)?)?;
    // r = sqrt(-2 * ln u1); theta = (2 * PI) * u2 (the f32 constant 2π).
    let r = ops::sqrt(&*ops::multiply(&*f32_scalar(-2.0)?, &*ops::log(&u1)?)?)?;
    let theta = ops::multiply(&*f32_scalar(2.0 * std::f32::consts::PI)?, &u2)?;
    let z = ops::multiply(&r, &*ops::cos(&theta)?)?;
    let v = ops::add(
        &*f32_scalar(*mean)?,
        &*rounded_product(&*f32_scalar(*scale)?, &z, n)?,
    )?;
    Ok(ops::reshape(&v, &cx.out_dims())?)
}

fn sample(cx: &Ctx, args: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        Sample {
            top_k,
            top_p,
            temperature,
            seed,
        }
    );
    arity(args, 1, "Sample")?;
    if cx.in_dtype(0) != IrDType::F32 {
        return Err(format!(
            "Sample of {:?} logits is not lowered (rlx-cpu reads f32 logits)",
            cx.in_dtype(0)
        )
        .into());
    }
    let in_dims = cx.in_dims(0);
    let (rows, vocab) = if in_dims.len() >= 2 {
        let v = *in_dims.last().unwrap() as usize;
        let total: usize = in_dims.iter().map(|d| *d as usize).product();
        (total / v.max(1), v)
    } else {
        (1, in_dims.iter().map(|d| *d as usize).product())
    };
    let n_out = out_len(cx);
    if n_out != rows || vocab == 0 {
        return Err(format!(
            "Sample of {rows} logit rows of {vocab} into {n_out} outputs is not lowered (one id per row)"
        )
        .into());
    }
    let (b, v) = (rows.i32()?, vocab.i32()?);
    let x = ops::reshape(args[0], &[b, v])?;
    let temp = temperature.max(1e-6);
    let mut scaled = ops::divide(&x, &*f32_scalar(temp)?)?;

    // Top-k: everything below the k-th largest becomes -inf.
    let k = (*top_k).min(vocab);
    if *top_k > 0 && k < vocab {
        let sorted = ops::sort(&scaled, 1)?;
        let kth = (vocab - k).i32()?;
        let cutoff = ops::slice(&sorted, &[0, kth], &[b, kth + 1], &[1, 1])?;
        let below = ops::less(&scaled, &cutoff)?;
        scaled = ops::where_(&below, &*f32_scalar(f32::NEG_INFINITY)?, &scaled)?;
    }

    // Softmax: exp(x - max) * (1 / max(sum, MIN_POSITIVE)).
    let mx = ops::max(&scaled, &[1], true)?;
    let e = ops::exp(&*ops::subtract(&scaled, &mx)?)?;
    let renorm = |p: &Array| -> LResult {
        let sum = ops::sum(p, &[1], true)?;
        let inv = ops::divide(
            &*f32_scalar(1.0)?,
            &*ops::maximum(&sum, &*f32_scalar(f32::MIN_POSITIVE)?)?,
        )?;
        Ok(ops::multiply(p, &inv)?)
    };
    let mut p = renorm(&e)?;

    // Top-p: in descending order (stable, ties by index), keep a token while
    // the probability mass before it is still below top_p — the first token
    // is always kept (top_p <= 0 keeps exactly one, like rlx-cpu's loop).
    if *top_p < 1.0 {
        let order = ops::argsort(&*ops::negative(&p)?, 1)?;
        let sp = ops::take_along_axis(&p, &order, 1)?;
        let before = ops::cumsum(&sp, 1, false, false)?;
        let thresh = if *top_p > 0.0 {
            *top_p
        } else {
            // `before` is 0 at the first token and >= 1/vocab after it.
            f32::MIN_POSITIVE
        };
        let keep_sorted = ops::less(&before, &*f32_scalar(thresh)?)?;
        let inv_order = ops::argsort(&order, 1)?;
        let keep = ops::take_along_axis(&keep_sorted, &inv_order, 1)?;
        p = ops::where_(&keep, &p, &*f32_scalar(0.0)?)?;
        p = renorm(&p)?;
    }

    // Inverse CDF: the first i with r <= cumsum(p)[i], else vocab - 1.
    let draw_seed = if *seed == 0 { 0xDEAD_BEEF } else { *seed };
    let r = words_to_unit_f32(&*philox_words(draw_seed, rows)?)?;
    let r = ops::reshape(&r, &[b, 1])?;
    let acc = ops::cumsum(&p, 1, false, true)?;
    let below = ops::astype(&*ops::less(&acc, &r)?, MxDType::I32)?;
    let count = ops::sum(&below, &[1], false)?;
    let last = Array::from_slice(&[v - 1], &[])?;
    let tok = ops::minimum(&count, &last)?;
    Ok(ops::reshape(
        &*ops::astype(&tok, MxDType::F32)?,
        &cx.out_dims(),
    )?)
}
