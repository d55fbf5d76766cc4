//! Signal ops: Fft, LogMel, LogMelBackward, WelchPeaks.
//!
//! All of them read rlx's 2N "block layout": the last axis of an F32 tensor
//! holds `[re_0 … re_{N-1}, im_0 … im_{N-1}]` (see `rlx_ir::Op::Fft`).
//! `FftPocketFft` (rlx's bit-exact pocketfft rounding) is a separate op kind,
//! lowered in `pocketfft.rs`.

use super::{arity, Ctx, LResult, Lowering, A};
use crate::lower::I32;
use crate::row;
use rlx_ir::fft::{FftAlgo, FftNorm};
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{array, fft as mfft, ops, Array, ArrayList, DType as MxDType};

const F32_ONLY: &[IrDType] = &[IrDType::F32];
// C64 is computed by `fft` below, but not claimed: the Input/Param rows
// (io.rs) do not bind c64 tensors yet. Add IrDType::C64 here once they do
// (test `fft_c64_parity`, ignored until then).
const FFT_DTYPES: &[IrDType] = &[IrDType::F32, IrDType::C64];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            Fft,
            FFT_DTYPES,
            Composite,
            "F32 block layout → complex64 (stack+view) → mx::fft::fft (inverse as conj∘fft∘conj, unscaled) → re/im × rlx norm scale; Native algo only",
            fft
        ),
        row!(
            LogMel,
            F32_ONLY,
            Composite,
            "one-sided power re²+im² → matmul with filtersᵀ → log10(max(·,1e-10)) → per-frame floor max−8 → (x+4)/4",
            log_mel
        ),
        row!(
            LogMelBackward,
            F32_ONLY,
            Composite,
            "rlx's LogMel VJP: floor mask, dy/4/(energy·ln10) → matmul with filters → 2·re, 2·im, zero-padded to block layout",
            log_mel_backward
        ),
        row!(
            WelchPeaks,
            F32_ONLY,
            Composite,
            "Welch PSD summed segment by segment as rlx does → stable argsort of −psd → first k (bin, power) pairs",
            welch_peaks
        ),
    ]
}

/// `a[..., start:stop]` along the last axis.
fn last_slice(a: &Array, start: i32, stop: i32) -> LResult {
    let shape = a.shape();
    let r = shape.len();
    let mut lo = vec![0i32; r];
    let mut hi = shape.clone();
    lo[r - 1] = start;
    hi[r - 1] = stop;
    Ok(ops::slice(a, &lo, &hi, &vec![1i32; r])?)
}

fn concat(parts: &[&Array], axis: i32) -> LResult {
    let list = ArrayList::from_arrays(parts.iter().copied());
    Ok(ops::concatenate(&list, axis)?)
}

fn f32_scalar(v: f32) -> LResult {
    Ok(array::full(&[], v as f64, MxDType::F32)?)
}

/// The last-axis length of a block-layout tensor, halved.
pub(super) fn block_n(a: &Array, op: &str) -> LResult<i32> {
    let shape = a.shape();
    let Some(&two_n) = shape.last() else {
        return Err(format!("{op}: a rank-0 input is not supported").into());
    };
    if two_n % 2 != 0 {
        return Err(format!("{op}: last axis {two_n} is not a 2N block layout").into());
    }
    Ok(two_n / 2)
}

fn check_f32(cx: &Ctx, n_inputs: usize, op: &str) -> LResult<()> {
    for i in 0..n_inputs {
        if cx.in_dtype(i) != IrDType::F32 {
            return Err(format!("{op} on {:?} input {i} is not lowered", cx.in_dtype(i)).into());
        }
    }
    if cx.out_ir_dtype() != IrDType::F32 {
        return Err(format!("{op} with {:?} output is not lowered", cx.out_ir_dtype()).into());
    }
    Ok(())
}

fn fft(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Fft")?;
    crate::op_fields!(
        cx,
        Fft {
            inverse,
            norm,
            algo,
        }
    );
    if *algo != FftAlgo::Native {
        return Err(format!("Fft algo {algo:?} is not lowered (only Native)").into());
    }
    // F64 would have to go through MLX's complex64 FFT (single precision).
    let dt = cx.out_ir_dtype();
    if dt != IrDType::F32 && dt != IrDType::C64 || cx.in_dtype(0) != dt {
        return Err(format!("Fft on {dt:?} is not lowered (F32 block layout and C64 only)").into());
    }
    let x = a[0];
    let shape = x.shape();
    let r = shape.len();
    if r == 0 {
        return Err("Fft on a rank-0 tensor is not supported".into());
    }
    let axis = (r - 1).i32()?;
    let (z, n) = if dt == IrDType::C64 {
        (ops::copy(x)?, shape[r - 1])
    } else {
        let n = block_n(x, "Fft")?;
        let re = last_slice(x, 0, n)?;
        let im = last_slice(x, n, 2 * n)?;
        (to_complex(&re, &im)?, n)
    };
    // rlx's transform is unscaled in both directions under `Backward`;
    // MLX's ifft divides by N, so the inverse is conj(fft(conj(z))), exact.
    let y = if *inverse {
        let c = ops::conjugate(&z)?;
        let f = mfft::fft(&c, n, axis)?;
        ops::conjugate(&f)?
    } else {
        mfft::fft(&z, n, axis)?
    };
    let mut yre: A = ops::real(&y)?;
    let mut yim: A = ops::imag(&y)?;
    // rlx multiplies each f32 component by the f32 scale.
    let scale = FftNorm::output_scale(*norm, n as usize, *inverse) as f32;
    if scale != 1.0 {
        let s = f32_scalar(scale)?;
        yre = ops::multiply(&yre, &s)?;
        yim = ops::multiply(&yim, &s)?;
    }
    if dt == IrDType::C64 {
        if scale == 1.0 {
            return Ok(y);
        }
        return to_complex(&yre, &yim);
    }
    concat(&[&yre, &yim], axis)
}

/// complex64 `re + i·im` from two f32 arrays of one shape, bit-exact:
/// interleave as `[..., n, 2]` f32 and view the pairs as complex64.
fn to_complex(re: &Array, im: &Array) -> LResult {
    let shape = re.shape();
    let pairs = ops::stack(&ArrayList::from_arrays([re, im]), shape.len().i32()?)?;
    let pairs = ops::contiguous(&pairs)?;
    let z = ops::view(&pairs, MxDType::C64)?;
    Ok(ops::reshape(&z, &shape)?)
}

/// Shared front of LogMel and its VJP: `(re, im, power, energy)` over
/// `[outer, n_bins]` / `[outer, n_mels]`.
struct MelFront {
    outer: i32,
    n_fft: i32,
    n_bins: i32,
    n_mels: i32,
    re: A,
    im: A,
    energy: A,
}

fn mel_front(cx: &Ctx, spec: &Array, filters: &Array, op: &str) -> LResult<MelFront> {
    let n_fft = block_n(spec, op)?;
    let n_bins = n_fft / 2 + 1;
    let fshape = filters.shape();
    if fshape.len() != 2 || fshape[1] != n_bins {
        return Err(format!(
            "{op}: filters {fshape:?} do not match n_bins {n_bins} (n_fft {n_fft}): not supported"
        )
        .into());
    }
    let n_mels = fshape[0];
    let size: i64 = spec.shape().iter().map(|&d| d as i64).product();
    let outer = (size / (2 * n_fft as i64).max(1)).i32()?;
    let _ = cx;
    let flat = ops::reshape(spec, &[outer, 2 * n_fft])?;
    let re = last_slice(&flat, 0, n_bins)?;
    let im = last_slice(&flat, n_fft, n_fft + n_bins)?;
    // rlx: power = re*re + im*im, each product rounded (no FMA).
    let power = ops::add(&*ops::multiply(&re, &re)?, &*ops::multiply(&im, &im)?)?;
    let ft = ops::transpose(filters, &[1, 0])?;
    let energy = ops::matmul(&power, &ft)?;
    Ok(MelFront {
        outer,
        n_fft,
        n_bins,
        n_mels,
        re,
        im,
        energy,
    })
}

/// `log10(max(energy, 1e-10))` and the per-frame floor `max − 8`.
fn mel_log_and_floor(energy: &Array) -> LResult<(A, A)> {
    let tiny = f32_scalar(1e-10)?;
    let lg = ops::log10(&*ops::maximum(energy, &tiny)?)?;
    let mx = ops::max(&lg, &[1], true)?;
    let floor = ops::subtract(&mx, &*f32_scalar(8.0)?)?;
    Ok((lg, floor))
}

fn log_mel(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 2, "LogMel")?;
    check_f32(cx, 2, "LogMel")?;
    let f = mel_front(cx, a[0], a[1], "LogMel")?;
    let (lg, floor) = mel_log_and_floor(&f.energy)?;
    let v = ops::maximum(&lg, &floor)?;
    let v = ops::divide(&*ops::add(&v, &*f32_scalar(4.0)?)?, &*f32_scalar(4.0)?)?;
    Ok(ops::reshape(&v, &cx.out_dims())?)
}

fn log_mel_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "LogMelBackward")?;
    check_f32(cx, 3, "LogMelBackward")?;
    let f = mel_front(cx, a[0], a[1], "LogMelBackward")?;
    let dy = ops::reshape(a[2], &[f.outer, f.n_mels])?;
    let (lg, floor) = mel_log_and_floor(&f.energy)?;
    // rlx: d_mel = 0 where |max(lg, floor) − floor| <= 1e-6, else dy·0.25.
    let clamped = ops::maximum(&lg, &floor)?;
    let gap = ops::abs(&*ops::subtract(&clamped, &floor)?)?;
    let at_floor = ops::less_equal(&gap, &*f32_scalar(1e-6)?)?;
    let zero = f32_scalar(0.0)?;
    let d_mel = ops::where_(&at_floor, &zero, &*ops::multiply(&dy, &*f32_scalar(0.25)?)?)?;
    // rlx skips mels with energy <= 1e-10; d_log = d_mel / (energy·ln10).
    let ln10 = f32_scalar(core::f32::consts::LN_10)?;
    let d_log = ops::divide(&d_mel, &*ops::multiply(&f.energy, &ln10)?)?;
    let live = ops::greater(&f.energy, &*f32_scalar(1e-10)?)?;
    let d_log = ops::where_(&live, &d_log, &zero)?;
    // d_power[k] = Σ_m d_log[m]·filters[m][k]
    let d_power = ops::matmul(&d_log, a[1])?;
    let two = f32_scalar(2.0)?;
    let d_re = ops::multiply(&*ops::multiply(&d_power, &two)?, &f.re)?;
    let d_im = ops::multiply(&*ops::multiply(&d_power, &two)?, &f.im)?;
    let gap_bins = f.n_fft - f.n_bins;
    let out = if gap_bins > 0 {
        let z = array::full(&[f.outer, gap_bins], 0.0, MxDType::F32)?;
        concat(&[&d_re, &z, &d_im, &z], 1)?
    } else {
        concat(&[&d_re, &d_im], 1)?
    };
    Ok(ops::reshape(&out, &cx.out_dims())?)
}

fn welch_peaks(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "WelchPeaks")?;
    check_f32(cx, 1, "WelchPeaks")?;
    crate::op_fields!(cx, WelchPeaks { k, n_segments });
    let spec = a[0];
    let shape = spec.shape();
    if shape.len() != 2 || *n_segments == 0 || *k == 0 {
        return Err(format!(
            "WelchPeaks on {shape:?} k={k} n_segments={n_segments} is not supported"
        )
        .into());
    }
    let n_fft = block_n(spec, "WelchPeaks")?;
    let n_bins = n_fft / 2 + 1;
    let segs = (*n_segments).i32()?;
    let k = (*k).i32()?;
    if shape[0] % segs != 0 {
        return Err(format!(
            "WelchPeaks: {} rows are not a multiple of n_segments {segs}: not supported",
            shape[0]
        )
        .into());
    }
    if k > n_bins {
        // rlx writes only n_bins pairs and leaves the rest of the row unset.
        return Err(format!("WelchPeaks k={k} > n_bins={n_bins} is not lowered").into());
    }
    let batch = shape[0] / segs;
    // rlx: row[bin] += scale·(re²+im²) for DC and the last bin,
    // (scale·2)·(re²+im²) in between, segment after segment.
    let inv = 1.0f32 / segs as f32;
    let coef: Vec<f32> = (0..n_bins)
        .map(|b| {
            if b == 0 || b == n_bins - 1 {
                inv
            } else {
                inv * 2.0
            }
        })
        .collect();
    let coef = Array::from_slice(&coef, &[n_bins])?;
    let x = ops::reshape(spec, &[batch, segs, 2 * n_fft])?;
    let mut psd: Option<A> = None;
    for s in 0..segs {
        let row = ops::slice(&x, &[0, s, 0], &[batch, s + 1, 2 * n_fft], &[1, 1, 1])?;
        let row = ops::reshape(&row, &[batch, 2 * n_fft])?;
        let re = last_slice(&row, 0, n_bins)?;
        let im = last_slice(&row, n_fft, n_fft + n_bins)?;
        let p = ops::add(&*ops::multiply(&re, &re)?, &*ops::multiply(&im, &im)?)?;
        let term = ops::multiply(&coef, &p)?;
        psd = Some(match psd {
            None => term,
            Some(acc) => ops::add(&acc, &term)?,
        });
    }
    let psd = psd.expect("n_segments >= 1");
    // Highest power first, ties to the lower bin (rlx's insertion top-k):
    // a stable ascending argsort of −psd.
    let order = ops::argsort(&*ops::negative(&psd)?, 1)?;
    let idx = ops::slice(&order, &[0, 0], &[batch, k], &[1, 1])?;
    let power = ops::take_along_axis(&psd, &idx, 1)?;
    let bin = ops::astype(&idx, MxDType::F32)?;
    let pairs = ops::stack(&ArrayList::from_arrays([&*bin, &*power]), 2)?;
    Ok(ops::reshape(&pairs, &[batch, 2 * k])?)
}
