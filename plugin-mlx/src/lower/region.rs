//! Fused regions: ElementwiseRegion, TransformRegion, BatchElementwiseRegion.
//!
//! The semantics are those of rlx-cpu's region interpreter
//! (`region_eval_elem` in rlx-cpu's `thunk/ops/elementwise.rs`), which the
//! GPU region kernels share:
//!
//! * every value of the chain is an f32 (f16/bf16 inputs are widened, I32/U32
//!   inputs converted as rlx-cpu's integer-storage pass does; the result is
//!   rounded once to the declared dtype by the executable);
//! * output element `gid` reads input `i` at flat row-major index `0` when
//!   bit `i` of `scalar_input_mask` is set, else `gid % input_modulus[i]`
//!   when the modulus is nonzero, else `gid`. This is a flat-index tiling,
//!   not numpy broadcasting: `[1, C, 1]` with modulus `C` onto `[1, C, T]`
//!   reads `bias[gid % C]`, which varies along T. Where the modulus equals
//!   the element count of a trailing run of output dims the input is simply
//!   reshaped to those dims and broadcast by MLX; otherwise it is tiled flat;
//! * the region's scalar formulas (`region_activation_scalar`, ...): Gelu is
//!   the tanh approximation inside a region, Max/Min ignore NaN, Mod is C
//!   `fmod`, bitwise ops go through `as i64`, Compare yields 1.0/0.0, Where
//!   takes any nonzero (or NaN) condition as true, and Cast rounds the value
//!   to the target without changing the f32 lane.
//!
//! TransformRegion and BatchElementwiseRegion follow rlx-fusion's
//! `DecomposeFusionRegions` (what rlx-cpu runs): a TransformRegion is its
//! ResizeNearest2x steps applied in sequence to input 0; a
//! BatchElementwiseRegion is one single-input region per batch input over a
//! `[1, C, H, W]` slice, concatenated along axis 0. The ResizeNearest2x
//! prologue of an ElementwiseRegion upsamples input 0 before the chain reads
//! it (rlx-fusion's `UnfuseElementwiseRegions`).

use super::{scalar, Ctx, LResult, Lowering, A};
use crate::dtype::FLOATS;
use crate::lower::I32;
use crate::row;
use rlx_ir::op::{Activation, ChainOperand, ChainStep, CmpOp, RegionPrologue, TransformStep};
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{array, ops, Array, ArrayList, DType as MxDType};

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            ElementwiseRegion,
            FLOATS,
            Composite,
            "the chain interpreted step by step in f32 (rlx-cpu's region \
             formulas: gelu = tanh approximation, NaN-ignoring max/min, fmod, \
             bitwise through i64, value-rounding casts); inputs placed by \
             rlx's flat `gid % input_modulus` rule (reshape + broadcast when \
             the modulus is a trailing run of output dims, flat tiling \
             otherwise); inputs f32/f16/bf16/i32/u32; ResizeNearest2x prologue \
             on input 0 = repeat x2 on H and W",
            elementwise_region
        ),
        row!(
            TransformRegion,
            FLOATS,
            Composite,
            "ResizeNearest2x steps in sequence on NCHW input 0 (repeat x2 on \
             H and W per step)",
            transform_region
        ),
        row!(
            BatchElementwiseRegion,
            FLOATS,
            Composite,
            "the chain over each batch input as a [1,C,H,W] region (optional \
             ResizeNearest2x prologue), concatenated on axis 0",
            batch_region
        ),
    ]
}

// ── helpers ────────────────────────────────────────────────────────────

/// A 0-d f32 constant.
fn f(v: f64) -> LResult {
    scalar(v, MxDType::F32)
}

fn to_f32(x: &Array) -> LResult {
    if x.dtype() == MxDType::F32 {
        Ok(x.clone_handle())
    } else {
        Ok(ops::astype(x, MxDType::F32)?)
    }
}

/// Nearest 2x upsample of an NCHW array: `out[n,c,y,x] = in[n,c,y/2,x/2]`.
fn resize_nearest2x(x: &Array) -> LResult {
    if x.ndim() != 4 {
        return Err(format!(
            "ResizeNearest2x of a rank-{} input is not supported (NCHW only)",
            x.ndim()
        )
        .into());
    }
    let h = ops::repeat(x, 2, 2)?;
    Ok(ops::repeat(&h, 2, 3)?)
}

/// The input dtypes rlx-cpu's interpreter reads correctly: f32/f16/bf16
/// lanes, and I32/U32, which its integer-storage pass casts to f32 around
/// the region (the same `as f32` rounding as `astype`). Other dtypes are
/// read through a wrong-width lane there, so there is no answer to match.
fn check_input(x: &Array, i: usize) -> LResult<()> {
    match x.dtype() {
        MxDType::F32 | MxDType::F16 | MxDType::BF16 | MxDType::I32 | MxDType::U32 => Ok(()),
        other => {
            Err(format!("a region input of dtype {other} (input {i}) is not supported").into())
        }
    }
}

/// Check the chain's operand references against `num_inputs`.
fn check_chain(chain: &[ChainStep], num_inputs: usize) -> LResult<()> {
    if chain.is_empty() {
        return Err("an empty region chain is not supported".into());
    }
    for (k, step) in chain.iter().enumerate() {
        let operands: Vec<&ChainOperand> = match step {
            ChainStep::Activation(_, x) | ChainStep::Cast(_, x) => vec![x],
            ChainStep::Binary(_, l, r) | ChainStep::Compare(_, l, r) => vec![l, r],
            ChainStep::Where(c, t, e) => vec![c, t, e],
        };
        for o in operands {
            match *o {
                ChainOperand::Input(i) if (i as usize) < num_inputs => {}
                ChainOperand::Step(j) if (j as usize) < k => {}
                bad => {
                    return Err(format!(
                        "chain step {k} reads {bad:?}, which is not defined there \
                         ({num_inputs} inputs): not supported"
                    )
                    .into())
                }
            }
        }
    }
    Ok(())
}

/// Place region input `x` (any shape, read flat row-major) for an output of
/// `out_dims`, following rlx's per-element read rule. The result is f32 and
/// broadcasts (numpy style) to `out_dims`: it has `out_dims`, a trailing run
/// of them, or no dims.
fn place_input(x: &Array, i: usize, is_scalar: bool, modulus: u32, out_dims: &[i32]) -> LResult {
    let len: usize = out_dims.iter().map(|d| *d as usize).product();
    let n = x.size();
    let flat = ops::reshape(&*to_f32(x)?, &[n.i32()?])?;
    // How many leading flat elements the output reads.
    let period = if is_scalar {
        1
    } else if modulus == 0 || modulus as usize >= len {
        len
    } else {
        modulus as usize
    };
    if n < period {
        return Err(format!(
            "region input {i} has {n} elements but the output of {len} elements reads \
             {period} of them (scalar: {is_scalar}, modulus {modulus}): not supported"
        )
        .into());
    }
    let base = if n == period {
        flat
    } else {
        ops::slice(&flat, &[0], &[period.i32()?], &[1])?
    };
    // A trailing run of output dims whose size is the period: reshaping to it
    // and broadcasting reads `gid % period` exactly.
    let r = out_dims.len();
    for k in (0..=r).rev() {
        let tail = &out_dims[k..];
        if tail.iter().map(|d| *d as usize).product::<usize>() == period {
            return Ok(ops::reshape(&base, tail)?);
        }
    }
    // Flat tiling.
    let p = period.i32()?;
    let tiled = if len.is_multiple_of(period) {
        let row = ops::reshape(&base, &[1, p])?;
        let b = ops::broadcast_to(&row, &[(len / period).i32()?, p])?;
        ops::reshape(&b, &[len.i32()?])?
    } else {
        let reps = len.div_ceil(period).i32()?;
        let t = ops::tile(&base, &[reps])?;
        ops::slice(&t, &[0], &[len.i32()?], &[1])?
    };
    Ok(ops::reshape(&tiled, out_dims)?)
}

/// One region over already-placed inputs: the value of the last step, f32,
/// with `out_dims`.
fn eval_chain(chain: &[ChainStep], inputs: &[A], out_dims: &[i32]) -> LResult {
    let mut steps: Vec<A> = Vec::with_capacity(chain.len());
    for step in chain {
        let v = {
            let get = |o: &ChainOperand| -> &Array {
                match *o {
                    ChainOperand::Input(i) => &inputs[i as usize],
                    ChainOperand::Step(j) => &steps[j as usize],
                }
            };
            match step {
                ChainStep::Activation(a, x) => activation(*a, get(x))?,
                ChainStep::Cast(to, x) => cast_value(*to, get(x))?,
                // rlx-cpu's region_binary_scalar is its f32 binary kernel.
                ChainStep::Binary(op, l, r) => {
                    super::elementwise::float_binary(*op, get(l), get(r))?
                }
                ChainStep::Compare(op, l, r) => {
                    let c = compare(*op, get(l), get(r))?;
                    ops::astype(&c, MxDType::F32)?
                }
                ChainStep::Where(c, t, e) => {
                    let cond = ops::not_equal(get(c), &*f(0.0)?)?;
                    ops::where_(&cond, get(t), get(e))?
                }
            }
        };
        steps.push(v);
    }
    let last = steps.pop().expect("the chain is not empty");
    if last.shape() == out_dims {
        Ok(last)
    } else {
        Ok(ops::broadcast_to(&last, out_dims)?)
    }
}

/// A whole region: inputs placed, prologue applied, chain evaluated.
#[allow(clippy::too_many_arguments)]
fn region(
    chain: &[ChainStep],
    num_inputs: usize,
    scalar_input_mask: u32,
    input_modulus: &[u32; 16],
    prologue: RegionPrologue,
    prologue_input: u32,
    args: &[&Array],
    out_dims: &[i32],
) -> LResult {
    if args.len() != num_inputs {
        return Err(format!(
            "the region declares {num_inputs} inputs but the node has {}",
            args.len()
        )
        .into());
    }
    if num_inputs > 16 {
        return Err(format!(
            "a region of {num_inputs} inputs is not supported (rlx carries 16 input moduli)"
        )
        .into());
    }
    check_chain(chain, num_inputs)?;
    let mut placed: Vec<A> = Vec::with_capacity(num_inputs);
    for (i, x) in args.iter().enumerate() {
        check_input(x, i)?;
        let src = match prologue {
            RegionPrologue::ResizeNearest2x if i == 0 => {
                if prologue_input != 0 {
                    return Err(format!(
                        "a ResizeNearest2x prologue on input {prologue_input} is not supported \
                         (rlx decomposes the prologue on input 0)"
                    )
                    .into());
                }
                resize_nearest2x(x)?
            }
            _ => x.clone_handle(),
        };
        let is_scalar = (scalar_input_mask >> i) & 1 == 1;
        placed.push(place_input(&src, i, is_scalar, input_modulus[i], out_dims)?);
    }
    let len: usize = out_dims.iter().map(|d| *d as usize).product();
    if len == 0 {
        return Ok(array::full(out_dims, 0.0, MxDType::F32)?);
    }
    eval_chain(chain, &placed, out_dims)
}

// ── the region's scalar formulas, on f32 arrays ────────────────────────

/// rlx-cpu's `region_activation_scalar`.
fn activation(act: Activation, x: &Array) -> LResult {
    let s = f;
    Ok(match act {
        Activation::Relu => {
            // f32::max(x, 0): NaN -> 0.
            ops::where_(&*ops::greater(x, &*s(0.0)?)?, x, &*s(0.0)?)?
        }
        // The region kernels compute Gelu as the tanh approximation.
        Activation::Gelu | Activation::GeluApprox => {
            let x3 = ops::multiply(&*ops::multiply(x, x)?, x)?;
            let inner = ops::add(x, &*ops::multiply(&*s(0.044_715)?, &x3)?)?;
            let t = ops::tanh(&*ops::multiply(&*s(0.797_884_6)?, &inner)?)?;
            let h = ops::multiply(&*s(0.5)?, x)?;
            ops::multiply(&h, &*ops::add(&*s(1.0)?, &t)?)?
        }
        // x / (1 + e^-x)
        Activation::Silu => {
            ops::divide(x, &*ops::add(&*s(1.0)?, &*ops::exp(&*ops::negative(x)?)?)?)?
        }
        Activation::Sigmoid => ops::sigmoid(x)?,
        Activation::Tanh => ops::tanh(x)?,
        Activation::Exp => ops::exp(x)?,
        Activation::Log => ops::log(x)?,
        Activation::Sqrt => ops::sqrt(x)?,
        // 1 / sqrt(x)
        Activation::Rsqrt => ops::divide(&*s(1.0)?, &*ops::sqrt(x)?)?,
        Activation::Neg => ops::negative(x)?,
        Activation::Abs => ops::abs(x)?,
        Activation::Sin => ops::sin(x)?,
        Activation::Cos => ops::cos(x)?,
        Activation::Tan => ops::tan(x)?,
        Activation::Atan => ops::arctan(x)?,
        Activation::Recip => ops::divide(&*s(1.0)?, x)?,
        // rint: half to even, as `round_ties_even`.
        Activation::Round => ops::round(x, 0)?,
        Activation::Floor => ops::floor(x)?,
        Activation::Ceil => ops::ceil(x)?,
        // 1 / -1 / 0, NaN -> 0.
        Activation::Sign => {
            let neg = ops::where_(&*ops::less(x, &*s(0.0)?)?, &*s(-1.0)?, &*s(0.0)?)?;
            ops::where_(&*ops::greater(x, &*s(0.0)?)?, &*s(1.0)?, &neg)?
        }
        // max(x, 0) + ln(1 + e^-|x|)
        Activation::Softplus => softplus(x)?,
        // x if x > 0 else e^x - 1 (not expm1)
        Activation::Elu => {
            let e = ops::subtract(&*ops::exp(x)?, &*s(1.0)?)?;
            ops::where_(&*ops::greater(x, &*s(0.0)?)?, x, &e)?
        }
        Activation::Erf => ops::erf(x)?,
        // x * clamp(x + 3, 0, 6) / 6
        Activation::HardSwish => {
            let c = ops::clip(&*ops::add(x, &*s(3.0)?)?, 0.0, 6.0)?;
            ops::divide(&*ops::multiply(x, &c)?, &*s(6.0)?)?
        }
        // clamp(x / 6 + 0.5, 0, 1)
        Activation::HardSigmoid => ops::clip(
            &*ops::add(&*ops::divide(x, &*s(6.0)?)?, &*s(0.5)?)?,
            0.0,
            1.0,
        )?,
        // x * tanh(softplus(x))
        Activation::Mish => ops::multiply(x, &*ops::tanh(&*softplus(x)?)?)?,
        // x / (1 + |x|)
        Activation::Softsign => ops::divide(x, &*ops::add(&*s(1.0)?, &*ops::abs(x)?)?)?,
        // min(x, 0) - ln(1 + e^-|x|)
        Activation::LogSigmoid => {
            let t = ops::log1p(&*ops::exp(&*ops::negative(&*ops::abs(x)?)?)?)?;
            ops::subtract(
                &*nan_ignoring(ops::minimum(x, &*s(0.0)?)?, x, &*s(0.0)?)?,
                &t,
            )?
        }
        #[allow(unreachable_patterns)]
        other => return Err(format!("region activation {other:?} is not lowered").into()),
    })
}

fn softplus(x: &Array) -> LResult {
    let zero = f(0.0)?;
    let m = nan_ignoring(ops::maximum(x, &zero)?, x, &zero)?;
    let t = ops::log1p(&*ops::exp(&*ops::negative(&*ops::abs(x)?)?)?)?;
    Ok(ops::add(&m, &t)?)
}

/// `m` = mx max/min of `x` and `y` (NaN-propagating), made NaN-ignoring like
/// Rust's `f32::max`/`f32::min`: if one side is NaN, the other.
fn nan_ignoring(m: A, x: &Array, y: &Array) -> LResult {
    let m = ops::where_(&*ops::isnan(y)?, x, &m)?;
    Ok(ops::where_(&*ops::isnan(x)?, y, &m)?)
}

fn compare(op: CmpOp, x: &Array, y: &Array) -> LResult {
    Ok(match op {
        CmpOp::Eq => ops::equal(x, y)?,
        CmpOp::Ne => ops::not_equal(x, y)?,
        CmpOp::Lt => ops::less(x, y)?,
        CmpOp::Le => ops::less_equal(x, y)?,
        CmpOp::Gt => ops::greater(x, y)?,
        CmpOp::Ge => ops::greater_equal(x, y)?,
    })
}

/// rlx-cpu's `region_cast_scalar`: the value rounded to `to`, kept in f32.
fn cast_value(to: IrDType, v: &Array) -> LResult {
    // Integer targets: truncate toward zero, saturate, NaN -> 0, then back
    // to f32. The bounds are `MIN as f32` and `MAX as f32`, so clipping the
    // truncated value to them is exactly `v as T as f32`.
    let int = |lo: f64, hi: f64| -> LResult {
        let zero = f(0.0)?;
        let t = ops::trunc(&*ops::where_(&*ops::isnan(v)?, &zero, v)?)?;
        Ok(ops::clip(&t, lo, hi)?)
    };
    Ok(match to {
        IrDType::F32 | IrDType::F64 | IrDType::C64 | IrDType::C128 => v.clone_handle(),
        IrDType::F16 => ops::astype(&*ops::astype(v, MxDType::F16)?, MxDType::F32)?,
        IrDType::BF16 => ops::astype(&*ops::astype(v, MxDType::BF16)?, MxDType::F32)?,
        IrDType::I8 => int(-128.0, 127.0)?,
        IrDType::I16 => int(-32_768.0, 32_767.0)?,
        IrDType::I32 => int(-2_147_483_648.0, 2_147_483_648.0)?,
        IrDType::I64 => int(-9_223_372_036_854_775_808.0, 9_223_372_036_854_775_808.0)?,
        IrDType::U8 => int(0.0, 255.0)?,
        IrDType::U32 => int(0.0, 4_294_967_296.0)?,
        IrDType::Bool => ops::astype(&*ops::not_equal(v, &*f(0.0)?)?, MxDType::F32)?,
        #[allow(unreachable_patterns)]
        other => return Err(format!("region cast to {other:?} is not lowered").into()),
    })
}

// ── the lowerings ──────────────────────────────────────────────────────

fn elementwise_region(cx: &Ctx, args: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        ElementwiseRegion {
            chain,
            num_inputs,
            scalar_input_mask,
            input_modulus,
            prologue,
            prologue_input,
        }
    );
    region(
        chain,
        *num_inputs as usize,
        *scalar_input_mask,
        input_modulus,
        *prologue,
        *prologue_input,
        args,
        &cx.out_dims(),
    )
}

fn transform_region(cx: &Ctx, args: &[&Array]) -> LResult {
    crate::op_fields!(cx, TransformRegion { steps, num_inputs });
    if *num_inputs != 1 || args.len() != 1 {
        return Err(format!(
            "a TransformRegion of {num_inputs} declared inputs ({} given) is not supported \
             (rlx resizes input 0 only)",
            args.len()
        )
        .into());
    }
    if !matches!(args[0].dtype(), MxDType::F32 | MxDType::F16 | MxDType::BF16) {
        return Err(format!(
            "a TransformRegion of a {} input is not supported",
            args[0].dtype()
        )
        .into());
    }
    let mut cur = args[0].clone_handle();
    for (k, step) in steps.iter().enumerate() {
        let TransformStep::ResizeNearest2x(o) = step;
        // rlx runs the steps as a sequence on the running value (its
        // MarkTransformRegions writes `Input(0)` for every step).
        let sequential = match *o {
            ChainOperand::Input(0) => true,
            ChainOperand::Step(j) => j as usize + 1 == k,
            _ => false,
        };
        if !sequential {
            return Err(format!(
                "TransformRegion step {k} reads {o:?}, which is not supported (rlx runs \
                 the steps as a sequence on input 0)"
            )
            .into());
        }
        cur = resize_nearest2x(&cur)?;
    }
    Ok(cur)
}

fn batch_region(cx: &Ctx, args: &[&Array]) -> LResult {
    crate::op_fields!(
        cx,
        BatchElementwiseRegion {
            chain,
            num_batch_inputs,
            scalar_input_mask,
            input_modulus,
            prologue,
            prologue_input,
        }
    );
    let out = cx.out_dims();
    let b = *num_batch_inputs as usize;
    if out.len() != 4 || args.len() != b || b == 0 || out[0] as usize != b {
        return Err(format!(
            "a BatchElementwiseRegion of {b} batch inputs ({} given) into {out:?} is not \
             supported (rlx runs one [1, C, H, W] slice per input)",
            args.len()
        )
        .into());
    }
    let slice_dims = [1, out[1], out[2], out[3]];
    let mut slices: Vec<A> = Vec::with_capacity(b);
    for x in args {
        // Each slice is a one-input region: the chain reads Input(0) only,
        // with bit 0 of the mask and modulus 0.
        slices.push(region(
            chain,
            1,
            *scalar_input_mask,
            input_modulus,
            *prologue,
            *prologue_input,
            &[*x],
            &slice_dims,
        )?);
    }
    let list = ArrayList::from_arrays(slices.iter().map(|a| &**a));
    Ok(ops::concatenate(&list, 0)?)
}
