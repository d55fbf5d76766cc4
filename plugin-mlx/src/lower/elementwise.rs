//! Elementwise ops: activations, binary arithmetic, comparisons, select and
//! casts, with rlx-cpu's conventions (see each fn).
//!
//! rlx-cpu computes every float elementwise op in f32 (half-precision values
//! sit widened to f32 in its arena) and rounds once to the declared dtype.
//! Composite lowerings therefore compute in f32 when the input is f16/bf16;
//! the executable casts the result to the declared dtype (one rounding, as
//! on the CPU). Single native MLX ops compute halves in float internally and
//! round once already, so they run in the input dtype.

use super::{arity, scalar, Ctx, LResult, Lowering, A};
use crate::dtype::{ALL, FLOATS};
use crate::lower::I32;
use crate::row;
use rlx_ir::op::{Activation, BinaryOp, CmpOp};
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{kernels, ops, Array, DType as MxDType};

/// Binary: floats, plus the integer dtypes rlx-cpu computes (I32/U32 through
/// f32, I64 natively).
const BINARY_DTYPES: &[IrDType] = &[
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::I32,
    IrDType::U32,
    IrDType::I64,
];
/// Fma: the dtypes `std::fma` rounds once in (rlx-cpu's Fma is f32/f64).
const FMA_DTYPES: &[IrDType] = &[IrDType::F32, IrDType::F64];
/// Compare's output is Bool whatever its inputs are.
const BOOL: &[IrDType] = &[IrDType::Bool];
/// Where: the value dtypes.
const WHERE_DTYPES: &[IrDType] = &[
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::I32,
    IrDType::I64,
    IrDType::Bool,
];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Activation,
            FLOATS,
            Composite,
            "all 29 rlx Activations; one native MLX unary op where it matches \
             (tanh log sqrt rsqrt neg abs sin cos tan atan recip floor ceil \
             sign erf, round = rint half-to-even), else composed in f32 with \
             rlx-cpu's formulas: exp saturating like its exp_poly (also in \
             sigmoid silu softplus mish log_sigmoid), gelu erf, gelu tanh \
             0.7978846/0.044715, softplus without threshold, elu alpha 1, \
             hard_sigmoid x/6+1/2, hard_swish x*clamp(x+3,0,6)/6, relu NaN->0",
            activation
        ),
        row!(
            Binary,
            BINARY_DTYPES,
            Composite,
            "Add Sub Mul Div Pow Atan2 native (numpy broadcasting); Max/Min \
             NaN-ignoring like f32::max; Mod = C fmod; bitwise/shift on \
             truncated i64 (floats) or natively (i64); i32/u32 computed in f32 \
             and saturated back, as rlx-cpu does; i64 Atan2 in f64 (on the \
             CPU stream when building for a GPU, which has no f64)",
            binary
        ),
        row!(
            Compare,
            BOOL,
            Native,
            "Eq Ne Lt Le Gt Ge -> bool, broadcasting (i32/u32 compared in f32, as rlx-cpu)",
            compare
        ),
        row!(
            Where,
            WHERE_DTYPES,
            Native,
            "mx::where, cond nonzero (or NaN) = true, broadcasting all three; \
             i32 values selected in f32 as rlx-cpu does",
            where_
        ),
        row!(
            Fma,
            FMA_DTYPES,
            Native,
            "a*b + c with one rounding (std::fma), operands broadcast to the \
             node's shape; the shim's CPU kernel, on the CPU stream when \
             building for a GPU (MLX has no fused multiply-add: its multiply \
             then add rounds twice)",
            fma
        ),
        row!(
            Cast,
            ALL,
            Composite,
            "mx::astype; float->int truncates toward zero, saturates, NaN->0 \
             (Rust `as`, as rlx-cpu)",
            cast
        ),
    ]
}

// ── helpers ────────────────────────────────────────────────────────────

fn is_half(d: MxDType) -> bool {
    matches!(d, MxDType::F16 | MxDType::BF16)
}

/// `x` in f32 if it is f16/bf16 (for composite formulas), else as is.
fn up(x: &Array) -> LResult {
    if is_half(x.dtype()) {
        Ok(ops::astype(x, MxDType::F32)?)
    } else {
        Ok(x.clone_handle())
    }
}

/// A 0-d array of `v` in the dtype of `like`.
fn sc(v: f64, like: &Array) -> LResult {
    scalar(v, like.dtype())
}

/// An exact 0-d integer (or bool) constant: `full` goes through f64, which
/// cannot hold every i64.
fn int_const(v: i128, dt: MxDType) -> LResult {
    use rlx_mlx_shim::Array as Ar;
    Ok(match dt {
        MxDType::Bool => Ar::from_slice(&[v != 0], &[])?,
        MxDType::I8 => Ar::from_slice(&[v as i8], &[])?,
        MxDType::I16 => Ar::from_slice(&[v as i16], &[])?,
        MxDType::I32 => Ar::from_slice(&[v.i32()?], &[])?,
        MxDType::I64 => Ar::from_slice(&[v as i64], &[])?,
        MxDType::U8 => Ar::from_slice(&[v as u8], &[])?,
        MxDType::U16 => Ar::from_slice(&[v as u16], &[])?,
        MxDType::U32 => Ar::from_slice(&[v as u32], &[])?,
        MxDType::U64 => Ar::from_slice(&[v as u64], &[])?,
        other => return Err(format!("integer constant of dtype {other} is not supported").into()),
    })
}

/// `(min, max)` of an integer dtype.
fn int_range(dt: MxDType) -> Option<(i128, i128)> {
    Some(match dt {
        MxDType::I8 => (i8::MIN as i128, i8::MAX as i128),
        MxDType::I16 => (i16::MIN as i128, i16::MAX as i128),
        MxDType::I32 => (i32::MIN as i128, i32::MAX as i128),
        MxDType::I64 => (i64::MIN as i128, i64::MAX as i128),
        MxDType::U8 => (0, u8::MAX as i128),
        MxDType::U16 => (0, u16::MAX as i128),
        MxDType::U32 => (0, u32::MAX as i128),
        MxDType::U64 => (0, u64::MAX as i128),
        _ => return None,
    })
}

/// Float → integer as Rust's `as` does it (rlx-cpu's casts): truncate
/// toward zero, saturate at the target's range, NaN → 0. A bare
/// `mx::astype` is C++'s `static_cast`, undefined (in practice wrapping or
/// INT_MIN) out of range and for NaN.
fn sat_cast(x: &Array, to: MxDType) -> LResult {
    let (lo, hi) =
        int_range(to).ok_or_else(|| format!("saturating cast to {to} is not supported"))?;
    // Both bounds are compared in x's dtype: `lo` and `hi + 1` are 0 or
    // ±powers of two, exact in every float dtype (or ±inf beyond its range,
    // which is the right threshold there too).
    let zero = sc(0.0, x)?;
    let xn = ops::where_(&*ops::isnan(x)?, &zero, x)?;
    let lo_s = sc(lo as f64, x)?;
    let hi_s = sc((hi + 1) as f64, x)?;
    let inside = ops::logical_and(&*ops::greater(&xn, &lo_s)?, &*ops::less(&xn, &hi_s)?)?;
    let safe = ops::where_(&inside, &xn, &zero)?;
    let t = ops::astype(&safe, to)?;
    let low = ops::where_(&*ops::less_equal(&xn, &lo_s)?, &*int_const(lo, to)?, &t)?;
    Ok(ops::where_(
        &*ops::greater_equal(&xn, &hi_s)?,
        &*int_const(hi, to)?,
        &low,
    )?)
}

// ── Activation ─────────────────────────────────────────────────────────

fn activation(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Activation")?;
    crate::op_fields!(cx, Activation(act));
    apply_activation(*act, a[0])
}

/// `act` over a float array with rlx-cpu's formulas; the result is f32 for
/// a composite over f16/bf16 input (cast it to the wanted dtype). Public so
/// that fused ops ending in an activation can share the exact semantics.
pub fn apply_activation(act: Activation, x: &Array) -> LResult {
    if !x.dtype().is_float() {
        return Err(format!("Activation {act:?} on {} input is not lowered", x.dtype()).into());
    }
    Ok(match act {
        // Native MLX unary ops (halves computed in float, rounded once).
        Activation::Tanh => ops::tanh(x)?,
        Activation::Log => ops::log(x)?,
        Activation::Sqrt => ops::sqrt(x)?,
        Activation::Rsqrt => ops::rsqrt(x)?,
        Activation::Neg => ops::negative(x)?,
        Activation::Abs => ops::abs(x)?,
        Activation::Sin => ops::sin(x)?,
        Activation::Cos => ops::cos(x)?,
        Activation::Tan => ops::tan(x)?,
        Activation::Atan => ops::arctan(x)?,
        Activation::Recip => ops::reciprocal(x)?,
        // rint: half to even, as rlx's `round_ties_even`.
        Activation::Round => ops::round(x, 0)?,
        Activation::Floor => ops::floor(x)?,
        Activation::Ceil => ops::ceil(x)?,
        // -1/0/+1, NaN -> 0 in both.
        Activation::Sign => ops::sign(x)?,
        Activation::Erf => ops::erf(x)?,
        // Composites, in f32.
        other => composite_activation(other, &*up(x)?)?,
    })
}

/// Erf-GELU, `0.5·x·(1 + erf(x/√2))`. On the CPU a float32 input runs the
/// shim's vector kernel (an MLX primitive with rlx-cpu's erf approximation:
/// MLX's own erf is a scalar loop in the CPU wheel, ~20x slower); other
/// dtypes and the GPU use MLX's ops.
pub(crate) fn gelu_erf(x: &Array) -> LResult {
    if super::cpu_f32(&[x]) {
        return Ok(kernels::gelu_erf_cpu(x)?);
    }
    let s = |v: f64| sc(v, x);
    let e = ops::erf(&*ops::multiply(x, &*s(std::f64::consts::FRAC_1_SQRT_2)?)?)?;
    let h = ops::multiply(&*s(0.5)?, x)?;
    Ok(ops::multiply(&h, &*ops::add(&*s(1.0)?, &e)?)?)
}

fn composite_activation(act: Activation, x: &Array) -> LResult {
    let s = |v: f64| sc(v, x);
    Ok(match act {
        // 0.5·x·(1 + erf(x/√2))
        Activation::Gelu => gelu_erf(x)?,
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), rlx's constants.
        Activation::GeluApprox => {
            let x3 = ops::multiply(&*ops::multiply(x, x)?, x)?;
            let inner = ops::add(x, &*ops::multiply(&*s(0.044_715)?, &x3)?)?;
            let t = ops::tanh(&*ops::multiply(&*s(0.797_884_6)?, &inner)?)?;
            let h = ops::multiply(&*s(0.5)?, x)?;
            ops::multiply(&h, &*ops::add(&*s(1.0)?, &t)?)?
        }
        // On the CPU, float32 runs the shim's kernels (rlx-cpu's own exp
        // polynomial, one MLX op each).
        Activation::Exp | Activation::Sigmoid | Activation::Silu if super::cpu_f32(&[x]) => {
            match act {
                Activation::Exp => kernels::exp_rlx_cpu(x)?,
                Activation::Sigmoid => kernels::sigmoid_rlx_cpu(x)?,
                _ => kernels::silu_rlx_cpu(x)?,
            }
        }
        // On a CUDA GPU, the shim's kernel over the same saturating exp.
        Activation::Exp | Activation::Sigmoid | Activation::Silu
            if super::cuda_kernels(&[x]) && super::one_row(x) =>
        {
            use rlx_mlx_shim::cuda_kernels::{activation_rlx_cuda, ExpActivation};
            let kind = match act {
                Activation::Exp => ExpActivation::Exp,
                Activation::Sigmoid => ExpActivation::Sigmoid,
                _ => ExpActivation::Silu,
            };
            activation_rlx_cuda(x, kind)?
        }
        // rlx's exp saturates (see `exp_rlx`): exp(100) is 3.3e38, not inf.
        Activation::Exp => exp_rlx(x)?,
        // 1/(1 + e^-x)
        Activation::Sigmoid => {
            ops::reciprocal(&*ops::add(&*s(1.0)?, &*exp_rlx(&*ops::negative(x)?)?)?)?
        }
        // x/(1 + e^-x): silu(-inf) = -inf as on the CPU (x·σ(x) is NaN).
        Activation::Silu => {
            ops::divide(x, &*ops::add(&*s(1.0)?, &*exp_rlx(&*ops::negative(x)?)?)?)?
        }
        // f32::max(x, 0): NaN -> 0.
        Activation::Relu => ops::where_(&*ops::greater(x, &*s(0.0)?)?, x, &*s(0.0)?)?,
        // max(x,0) + ln(1 + e^-|x|), no threshold (rlx's softplus_poly).
        Activation::Softplus => softplus(x)?,
        // α = 1: x if x > 0 else eˣ − 1.
        Activation::Elu => ops::where_(&*ops::greater(x, &*s(0.0)?)?, x, &*ops::expm1(x)?)?,
        // x·clamp(x+3, 0, 6)/6
        Activation::HardSwish => {
            let c = ops::clip(&*ops::add(x, &*s(3.0)?)?, 0.0, 6.0)?;
            ops::divide(&*ops::multiply(x, &c)?, &*s(6.0)?)?
        }
        // clamp(x/6 + 0.5, 0, 1)
        Activation::HardSigmoid => ops::clip(
            &*ops::add(&*ops::divide(x, &*s(6.0)?)?, &*s(0.5)?)?,
            0.0,
            1.0,
        )?,
        // x·tanh(softplus(x))
        Activation::Mish => ops::multiply(x, &*tanh_rlx(&*softplus(x)?)?)?,
        // x/(1 + |x|)
        Activation::Softsign => ops::divide(x, &*ops::add(&*s(1.0)?, &*ops::abs(x)?)?)?,
        // min(x,0) − ln(1 + e^-|x|)
        Activation::LogSigmoid => {
            let t = ops::log1p(&*exp_rlx(&*ops::negative(&*ops::abs(x)?)?)?)?;
            ops::subtract(&*ops::minimum(x, &*s(0.0)?)?, &t)?
        }
        #[allow(unreachable_patterns)]
        other => return Err(format!("Activation {other:?} is not lowered").into()),
    })
}

fn softplus(x: &Array) -> LResult {
    let zero = sc(0.0, x)?;
    // f32::max(x, 0) ignores NaN; the log1p term carries it anyway.
    let m = ops::maximum(x, &zero)?;
    let t = ops::log1p(&*exp_rlx(&*ops::negative(&*ops::abs(x)?)?)?)?;
    Ok(ops::add(&m, &t)?)
}

/// rlx-cpu's exp (`exp_poly` and its SIMD arms) clamps its argument to
/// [-87.3, 88.7] first, so it never overflows to inf nor underflows to 0:
/// exp(100) = 3.3e38, exp(-100) = 1.2e-38. Its sigmoid, silu, softplus,
/// mish and log-sigmoid inherit that.
///
/// MLX's exp overflows to inf above ~88.376 although e^88.7 = 3.3e38 is
/// finite, so the top of the range is taken as (e^(x/2))² (x/2 is exact;
/// the square costs about one ulp).
fn exp_rlx(x: &Array) -> LResult {
    let c = ops::clip(x, -87.3, 88.7)?;
    let half = ops::exp(&*ops::multiply(&c, &*sc(0.5, &c)?)?)?;
    Ok(ops::where_(
        &*ops::greater(&c, &*sc(88.0, &c)?)?,
        &*ops::square(&half)?,
        &*ops::exp(&c)?,
    )?)
}

/// rlx-cpu's `tanh_poly` (used inside its mish): (e^2y − 1)/(e^2y + 1) over
/// its saturating exp, so tanh of a tiny y is exactly 0 and mish(-inf) is
/// NaN there as well.
fn tanh_rlx(y: &Array) -> LResult {
    let e = exp_rlx(&*ops::multiply(y, &*sc(2.0, y)?)?)?;
    let one = sc(1.0, y)?;
    Ok(ops::divide(
        &*ops::subtract(&e, &one)?,
        &*ops::add(&e, &one)?,
    )?)
}

// ── Binary ─────────────────────────────────────────────────────────────

fn binary(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "Binary")?;
    crate::op_fields!(cx, Binary(op));
    let (x, y) = (a[0], a[1]);
    match cx.out_ir_dtype() {
        IrDType::F32 | IrDType::F16 | IrDType::BF16 => {
            if !x.dtype().is_float() || !y.dtype().is_float() {
                return Err(format!(
                    "Binary {op:?} of {} and {} into a float is not supported",
                    x.dtype(),
                    y.dtype()
                )
                .into());
            }
            float_binary(*op, x, y)
        }
        // rlx-cpu keeps I32/U32 as integers but computes elementwise ops in
        // f32: inputs cast to f32, the f32 op, the result cast back (Rust
        // `as`: truncating, saturating).
        IrDType::I32 | IrDType::U32 => {
            let xf = ops::astype(x, MxDType::F32)?;
            let yf = ops::astype(y, MxDType::F32)?;
            let r = float_binary(*op, &xf, &yf)?;
            sat_cast(&r, cx.out_dtype())
        }
        IrDType::I64 => {
            if x.dtype() != MxDType::I64 || y.dtype() != MxDType::I64 {
                return Err(format!(
                    "Binary {op:?} of {} and {} into i64 is not supported",
                    x.dtype(),
                    y.dtype()
                )
                .into());
            }
            i64_binary(*op, x, y)
        }
        other => Err(format!("Binary {op:?} on {other:?} is not lowered").into()),
    }
}

/// rlx-cpu's f32 binary kernel, on float operands.
/// rlx-cpu's f32 binary kernel (also a region chain's binary step).
pub(crate) fn float_binary(op: BinaryOp, x: &Array, y: &Array) -> LResult {
    Ok(match op {
        BinaryOp::Add => ops::add(x, y)?,
        BinaryOp::Sub => ops::subtract(x, y)?,
        BinaryOp::Mul => ops::multiply(x, y)?,
        BinaryOp::Div => ops::divide(x, y)?,
        BinaryOp::Pow => ops::power(x, y)?,
        BinaryOp::Atan2 => ops::arctan2(x, y)?,
        // f32::max / f32::min return the other operand when one is NaN;
        // mx::maximum propagates NaN.
        BinaryOp::Max | BinaryOp::Min => {
            let m = if op == BinaryOp::Max {
                ops::maximum(x, y)?
            } else {
                ops::minimum(x, y)?
            };
            let m = ops::where_(&*ops::isnan(y)?, x, &m)?;
            ops::where_(&*ops::isnan(x)?, y, &m)?
        }
        // C fmod (sign of the dividend). mx::remainder has the divisor's
        // sign; on |a|, |b| the two agree exactly, then the dividend's sign.
        BinaryOp::Mod => {
            let (x, y) = (up(x)?, up(y)?);
            let r = ops::remainder(&*ops::abs(&x)?, &*ops::abs(&y)?)?;
            ops::where_(&*ops::less(&x, &*sc(0.0, &x)?)?, &*ops::negative(&r)?, &r)?
        }
        // `(a as i64) op (b as i64) as f32`.
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor => {
            let (xi, yi) = (sat_cast(x, MxDType::I64)?, sat_cast(y, MxDType::I64)?);
            let r = match op {
                BinaryOp::BitAnd => ops::bitwise_and(&xi, &yi)?,
                BinaryOp::BitOr => ops::bitwise_or(&xi, &yi)?,
                _ => ops::bitwise_xor(&xi, &yi)?,
            };
            ops::astype(&r, MxDType::F32)?
        }
        // `(a as i64).wrapping_shl(b as u32) as f32`: the count is `b`
        // saturated to u32, taken mod 64.
        BinaryOp::Shl | BinaryOp::Shr => {
            let xi = sat_cast(x, MxDType::I64)?;
            let n = ops::astype(&*sat_cast(y, MxDType::U32)?, MxDType::I64)?;
            let n = ops::bitwise_and(&n, &*int_const(63, MxDType::I64)?)?;
            let r = if op == BinaryOp::Shl {
                ops::left_shift(&xi, &n)?
            } else {
                ops::right_shift(&xi, &n)?
            };
            ops::astype(&r, MxDType::F32)?
        }
        #[allow(unreachable_patterns)]
        other => return Err(format!("Binary {other:?} is not lowered").into()),
    })
}

/// rlx-cpu's i64 binary kernel (Rust integer semantics).
fn i64_binary(op: BinaryOp, x: &Array, y: &Array) -> LResult {
    let c = |v: i128| int_const(v, MxDType::I64);
    // Signs differ and the python remainder is nonzero.
    let trunc_fix = |r: &A| -> LResult {
        let neg_x = ops::less(x, &*c(0)?)?;
        let neg_y = ops::less(y, &*c(0)?)?;
        Ok(ops::logical_and(
            &*ops::not_equal(r, &*c(0)?)?,
            &*ops::not_equal(&neg_x, &neg_y)?,
        )?)
    };
    Ok(match op {
        BinaryOp::Add => ops::add(x, y)?,
        BinaryOp::Sub => ops::subtract(x, y)?,
        BinaryOp::Mul => ops::multiply(x, y)?,
        BinaryOp::Max => ops::maximum(x, y)?,
        BinaryOp::Min => ops::minimum(x, y)?,
        // Truncating division, 0 when b == 0 (mx::divide would go to float;
        // floor_divide floors).
        BinaryOp::Div => {
            let fq = ops::floor_divide(x, y)?;
            let r = ops::remainder(x, y)?;
            let fix = ops::logical_and(&*trunc_fix(&r)?, &*ops::not_equal(y, &*c(0)?)?)?;
            ops::where_(&fix, &*ops::add(&fq, &*c(1)?)?, &fq)?
        }
        // Rust `%` (sign of the dividend) from the python remainder.
        BinaryOp::Mod => {
            let r = ops::remainder(x, y)?;
            ops::where_(&*trunc_fix(&r)?, &*ops::subtract(&r, y)?, &r)?
        }
        // `a.pow(b.max(0) as u32)`.
        BinaryOp::Pow => ops::power(x, &*ops::maximum(y, &*c(0)?)?)?,
        // `atan2(a as f64, b as f64) as i64`.
        BinaryOp::Atan2 => {
            let _cpu = super::cpu_steps()?;
            let r = ops::arctan2(
                &*ops::astype(x, MxDType::F64)?,
                &*ops::astype(y, MxDType::F64)?,
            )?;
            sat_cast(&r, MxDType::I64)?
        }
        BinaryOp::BitAnd => ops::bitwise_and(x, y)?,
        BinaryOp::BitOr => ops::bitwise_or(x, y)?,
        BinaryOp::BitXor => ops::bitwise_xor(x, y)?,
        // wrapping_shl/shr: the count mod 64; shr is arithmetic.
        BinaryOp::Shl | BinaryOp::Shr => {
            let n = ops::bitwise_and(y, &*c(63)?)?;
            if op == BinaryOp::Shl {
                ops::left_shift(x, &n)?
            } else {
                ops::right_shift(x, &n)?
            }
        }
        #[allow(unreachable_patterns)]
        other => return Err(format!("Binary {other:?} on i64 is not lowered").into()),
    })
}

// ── Compare / Where ────────────────────────────────────────────────────

fn compare(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "Compare")?;
    crate::op_fields!(cx, Compare(op));
    // rlx-cpu compares I32/U32 operands in f32.
    let widen = |v: &Array| -> LResult {
        if matches!(v.dtype(), MxDType::I32 | MxDType::U32) {
            Ok(ops::astype(v, MxDType::F32)?)
        } else {
            Ok(v.clone_handle())
        }
    };
    let (x, y) = (widen(a[0])?, widen(a[1])?);
    Ok(match op {
        CmpOp::Eq => ops::equal(&x, &y)?,
        CmpOp::Ne => ops::not_equal(&x, &y)?,
        CmpOp::Lt => ops::less(&x, &y)?,
        CmpOp::Le => ops::less_equal(&x, &y)?,
        CmpOp::Gt => ops::greater(&x, &y)?,
        CmpOp::Ge => ops::greater_equal(&x, &y)?,
        #[allow(unreachable_patterns)]
        other => return Err(format!("Compare {other:?} is not lowered").into()),
    })
}

fn where_(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "Where")?;
    // mx::where takes the condition as bool (nonzero = true, NaN = true),
    // as rlx-cpu reads an f32 mask.
    if matches!(cx.out_ir_dtype(), IrDType::I32 | IrDType::U32) {
        // rlx-cpu selects I32/U32 values in f32 and casts back (exact below
        // 2^24, rounded above it, as there).
        let t = ops::astype(a[1], MxDType::F32)?;
        let e = ops::astype(a[2], MxDType::F32)?;
        return sat_cast(&*ops::where_(a[0], &t, &e)?, cx.out_dtype());
    }
    Ok(ops::where_(a[0], a[1], a[2])?)
}

// ── Fma ────────────────────────────────────────────────────────────────

/// rlx-ir's Fma: `a * b + c` rounded once, which an error-free product or
/// a compensated sum depends on (a multiply then an add would round
/// twice).
fn fma(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "Fma")?;
    let dims = cx.out_dims();
    let dt = cx.out_dtype();
    if let Some(x) = a.iter().find(|x| x.dtype() != dt) {
        return Err(format!(
            "Fma of {} operands into {dt}: the operands must have the node's dtype",
            x.dtype()
        )
        .into());
    }
    // The kernel takes operands of one shape; a broadcast is a view it
    // reads through its strides.
    let mut full = Vec::with_capacity(3);
    for x in a {
        full.push(ops::broadcast_to(x, &dims)?);
    }
    let _cpu = super::cpu_steps()?;
    Ok(kernels::fma_cpu(&full[0], &full[1], &full[2])?)
}

// ── Cast ───────────────────────────────────────────────────────────────

fn cast(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Cast")?;
    let x = a[0];
    let from = x.dtype();
    let to = cx.out_dtype();
    if from == MxDType::C64 || to == MxDType::C64 {
        return Err(format!("Cast {from} -> {to} is not supported").into());
    }
    if from.is_float() && int_range(to).is_some() {
        return sat_cast(x, to);
    }
    Ok(ops::astype(x, to)?)
}
