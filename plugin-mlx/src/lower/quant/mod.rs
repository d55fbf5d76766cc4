//! Quantized matmuls: DequantMatMul, DequantGroupedMatMul (a GGUF expert
//! bank; the gather and batched matmul are `grouped`'s) and
//! DequantMoEWeights. GGUF's block formats are decoded in `gguf`.
//!
//! DequantMatMul with MLX's own layouts runs natively on
//! `mx::quantized_matmul` (on the CPU, 4- and 8-bit affine weights on the
//! shim's own kernel instead: MLX's runs on one thread, a code at a time): MlxAffine (bits 2/3/4/5/6/8, group 32/64/128,
//! mode "affine") and MlxMxfp4 / MlxMxfp8 with 32-element E8M0-scaled groups
//! (modes "mxfp4" / "mxfp8"). rlx stores those weights as the very bytes
//! `mx::quantize` writes (rows of a little-endian bitstream along k), so
//! they are only reinterpreted as MLX's uint32 words.
//!
//! Every other scheme (and MLX variants MLX's kernel does not take, e.g.
//! 16-element mxfp groups with FP8 scales) is dequantized to f32 with MLX
//! integer ops (casts, shifts, masks, gathers) following rlx's byte layouts
//! exactly, then multiplied with `mx::matmul`. Dequantized weights are
//! exact in f32 (a small integer code times an f32 scale, plus an f32
//! bias), so only the matmul's accumulation order differs from rlx-cpu.

mod gguf;

use super::grouped::{expert_ids, gather_matmul};
use super::{arity, Ctx, LResult, Lowering, A};
use crate::lower::I32;
// Named as this family has always called them (gguf.rs too).
use super::{numel, rows_of, scalar as scalar_of, to_f32 as f32};
use crate::row;
use gguf::{gguf_bank, gguf_rows, gguf_slab_bytes, gguf_supported, GGUF_SCHEMES};
use rlx_ir::quant::QuantScheme;
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{array, kernels, ops, Array, ArrayList, DType as Mx};

const F32: &[IrDType] = &[IrDType::F32];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            DequantGroupedMatMul,
            F32,
            Composite,
            "GGUF expert bank dequantized with integer ops (shift/mask/take, decode tables), \
             take(expert_idx), batched mx::matmul; every GGUF scheme; non-GGUF schemes and k \
             not a multiple of the block: not lowered",
            dequant_grouped_matmul
        ),
        row!(
            DequantMoEWeights,
            F32,
            Composite,
            "GGUF expert bank dequantized with integer ops to [E, K, N]; every GGUF scheme \
             except GgufFV5/FV5B/BF16 (rlx-cpu has no bank dequant for them): not lowered",
            dequant_moe_weights
        ),
        row!(
            DequantMatMul,
            F32,
            Composite,
            "Native for MLX's own layouts: MlxAffine bits 2/3/4/5/6/8 with group 32/64/128 \
             -> one mx::quantized_matmul (mode affine), MlxMxfp4/MlxMxfp8 group 32 (u8 E8M0 \
             scales) -> one mx::quantized_matmul (mode mxfp4/mxfp8); every other scheme \
             dequantized with integer ops (shift/mask/take, decode tables) then mx::matmul: \
             Int8Block(Asym), Int4Block, Fp8E4m3/E5m2, Nvfp4Block, MxFp4x2Block, MlxAffine \
             other group sizes, MlxMxfp4/Mxfp8 group 16 (FP8 scales), all Gguf*; other bit \
             widths / scale dtypes / k not a multiple of the group: not lowered",
            dequant_matmul
        ),
    ]
}

// ── helpers ──────────────────────────────────────────────────────────────

fn const_i32(v: &[i32], shape: &[i32]) -> LResult {
    Ok(Array::from_slice(v, shape)?)
}

fn const_u32(v: &[u32], shape: &[i32]) -> LResult {
    Ok(Array::from_slice(v, shape)?)
}

/// Unpack `cols` little-endian bit-packed codes of width `bits` (1..=8)
/// per row from `bytes` (`[rows, row_bytes]`, any integer dtype holding
/// bytes): code `c` of a row starts at bit `c*bits` of the row's byte
/// stream, low bits first. Returns uint32 `[rows, cols]`.
fn unpack_bits(bytes: &Array, rows: i32, row_bytes: i32, cols: i32, bits: u32) -> LResult {
    let b = ops::astype(&*ops::reshape(bytes, &[rows, row_bytes])?, Mx::U32)?;
    // One zero byte of padding so a code's high byte always exists.
    let pad = array::full(&[rows, 1], 0.0, Mx::U32)?;
    let b = ops::concatenate(&ArrayList::from_arrays([&*b, &*pad]), 1)?;
    let lo: Vec<i32> = (0..cols)
        .map(|c| (c as u32 * bits / 8).i32())
        .collect::<LResult<_>>()?;
    let hi: Vec<i32> = lo.iter().map(|i| i + 1).collect();
    let sh: Vec<u32> = (0..cols).map(|c| c as u32 * bits % 8).collect();
    let lo_b = ops::take(&b, &*const_i32(&lo, &[cols])?, 1)?;
    let hi_b = ops::take(&b, &*const_i32(&hi, &[cols])?, 1)?;
    let word = ops::bitwise_or(&lo_b, &*ops::left_shift(&hi_b, &*scalar_of(8.0, Mx::U32)?)?)?;
    let shifted = ops::right_shift(&word, &*const_u32(&sh, &[1, cols])?)?;
    let mask = scalar_of(((1u32 << bits) - 1) as f64, Mx::U32)?;
    Ok(ops::bitwise_and(&shifted, &mask)?)
}

/// Per-block params `[blocks, n]` expanded to `[k, n]` (row `p` uses block
/// `p / block`).
fn expand_rows(p: &Array, blocks: i32, n: i32, block: i32, k: i32) -> LResult {
    let p = ops::reshape(&*f32(p)?, &[blocks, n])?;
    let r = ops::repeat(&p, block, 0)?;
    Ok(ops::slice(&r, &[0, 0], &[k, n], &[1, 1])?)
}

/// Per-group params `[rows, groups]` expanded to `[rows, groups*gs]`.
fn expand_cols(p: &Array, rows: i32, groups: i32, gs: i32) -> LResult {
    let p = ops::reshape(&*f32(p)?, &[rows, groups])?;
    Ok(ops::repeat(&p, gs, 1)?)
}

fn const_f32(v: &[f32]) -> LResult {
    Ok(Array::from_slice(v, &[v.len().i32()?])?)
}

/// Decode byte/nibble codes through a host-built table (f32, same shape as
/// `codes`).
fn lut(codes: &Array, table: &[f32]) -> LResult {
    let idx = ops::astype(codes, Mx::I32)?;
    Ok(ops::take(&*const_f32(table)?, &idx, 0)?)
}

fn table(f: impl Fn(u8) -> f32, n: usize) -> Vec<f32> {
    (0..n).map(|c| f(c as u8)).collect()
}

/// rlx-cpu's IEEE-style FP8 decoders (`fp8_e4m3_to_f32`: `MANT` 3, `BIAS`
/// 7; `fp8_e5m2_to_f32`: 2, 15): the all-ones exponent is inf/NaN (not the
/// OCP E4M3FN convention), subnormals below it.
fn fp8_rlx<const MANT: u32, const BIAS: i32>(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp_max = (1u8 << (7 - MANT)) - 1;
    let exp = (b >> MANT) & exp_max;
    let mant = b & ((1u8 << MANT) - 1);
    if exp == 0 {
        if mant == 0 {
            return 0.0;
        }
        return sign * (mant as f32) * 2f32.powi(1 - BIAS) / (1u32 << MANT) as f32;
    }
    if exp == exp_max {
        return if mant == 0 {
            sign * f32::INFINITY
        } else {
            f32::NAN
        };
    }
    sign * (1.0 + mant as f32 / (1u32 << MANT) as f32) * 2f32.powi(i32::from(exp) - BIAS)
}

/// rlx-mlx-io's OCP E4M3 decode (MLX mxfp8 codes and 16-group scales):
/// no inf, NaN only at 0x7f / 0xff.
fn fp8_e4m3_ocp(s: u8) -> f32 {
    let sign = (s >> 7) as u32;
    let exp = i32::from((s >> 3) & 0x0f);
    let mant = (s & 0x07) as u32;
    if exp == 0x0f && mant == 0x07 {
        return f32::NAN;
    }
    if exp == 0 {
        if mant == 0 {
            return if sign != 0 { -0.0 } else { 0.0 };
        }
        let mut m = mant;
        let mut e = -6i32;
        while m & 0x8 == 0 {
            m <<= 1;
            e -= 1;
        }
        m &= 0x7;
        return f32::from_bits((sign << 31) | (((e + 127) as u32) << 23) | (m << 20));
    }
    f32::from_bits((sign << 31) | (((exp - 7 + 127) as u32) << 23) | (mant << 20))
}

/// rlx-mlx-io's E8M0 group scale (bf16 with the byte as exponent; 0 maps
/// to bf16 bits 0x40).
fn e8m0(s: u8) -> f32 {
    let bits: u16 = if s == 0 { 0x40 } else { (s as u16) << 7 };
    f32::from_bits((bits as u32) << 16)
}

/// The MLX mxfp group-scale decode rlx-mlx-io uses: FP8 E4M3 for 16-element
/// groups, E8M0 otherwise.
fn mx_scale_table(gs: i32) -> Vec<f32> {
    if gs == 16 {
        table(fp8_e4m3_ocp, 256)
    } else {
        table(e8m0, 256)
    }
}

// ── DequantGroupedMatMul / DequantMoEWeights ─────────────────────────────

fn dequant_grouped_matmul(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 3, "DequantGroupedMatMul")?;
    crate::op_fields!(cx, DequantGroupedMatMul { scheme });
    let out = cx.out_dims();
    let n = *out
        .last()
        .ok_or("DequantGroupedMatMul: output has rank 0")?;
    let k = *cx
        .in_dims(0)
        .last()
        .ok_or("DequantGroupedMatMul: input has rank 0")?;
    // rlx-cpu: expert count = bank bytes / slab bytes.
    let slab = gguf_slab_bytes(scheme, k, n);
    let total = numel(&cx.in_dims(1));
    if gguf_supported(scheme) && (slab == 0 || total % slab != 0) {
        return Err(format!(
            "DequantGroupedMatMul: {total} bank bytes are not a whole number of {slab}-byte slabs"
        )
        .into());
    }
    let experts = (total / slab.max(1)).i32()?;
    let bank = gguf_bank(a[1], experts, k, n, scheme, "DequantGroupedMatMul")?;
    let ids = expert_ids(a[2], experts)?;
    gather_matmul(a[0], &bank, &ids, k, &out)
}

fn dequant_moe_weights(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "DequantMoEWeights")?;
    crate::op_fields!(cx, DequantMoEWeights { scheme });
    let out = cx.out_dims();
    if out.len() != 3 {
        return Err(format!(
            "DequantMoEWeights: output rank {} (want [E, K, N])",
            out.len()
        )
        .into());
    }
    if matches!(
        scheme,
        QuantScheme::GgufFV5 | QuantScheme::GgufFV5B | QuantScheme::GgufBF16
    ) {
        // rlx-cpu has no FV5/FV5B/BF16 expert-bank dequant (it panics).
        return Err(format!("DequantMoEWeights scheme {scheme} is not lowered").into());
    }
    let (e, k, n) = (out[0], out[1], out[2]);
    let want = gguf_slab_bytes(scheme, k, n) * e as i64;
    let total = numel(&cx.in_dims(0));
    if gguf_supported(scheme) && total != want {
        return Err(format!("DequantMoEWeights: {total} packed bytes, want {want}").into());
    }
    gguf_bank(a[0], e, k, n, scheme, "DequantMoEWeights")
}

// ── DequantMatMul ────────────────────────────────────────────────────────

/// MlxAffine variants `mx::quantized_matmul` computes natively: MLX's
/// affine bit widths and group sizes, with whole uint32 words per row.
fn native_affine(bits: i32, gs: i32, k: i32) -> bool {
    matches!(bits, 2 | 3 | 4 | 5 | 6 | 8)
        && matches!(gs, 32 | 64 | 128)
        && k % gs == 0
        && (k * bits) % 32 == 0
}

/// MlxMxfp4/Mxfp8 variants MLX's `mxfp4` / `mxfp8` modes compute natively:
/// 32-element groups with E8M0 scales (rlx's 16-element groups carry FP8
/// E4M3 scales, which those modes do not take: dequantized instead).
fn native_mxfp(gs: i32, k: i32) -> bool {
    gs == 32 && k % gs == 0
}

/// rlx's packed MLX weight (`[n, k*bits/8]` bytes, each row a little-endian
/// bitstream along k, low bits first: exactly the bytes `mx::quantize`
/// writes) reinterpreted as MLX's uint32 words `[n, k*bits/32]`.
fn packed_words(bytes: &Array, n: i32, k: i32, bits: i32) -> LResult {
    let b = ops::reshape(&*ops::astype(bytes, Mx::U8)?, &[n, k * bits / 8])?;
    Ok(ops::view(&*ops::contiguous(&b)?, Mx::U32)?)
}

fn dequant_matmul(cx: &Ctx, a: &[&Array]) -> LResult {
    crate::op_fields!(cx, DequantMatMul { scheme });
    let out = cx.out_dims();
    let n = *out.last().ok_or("DequantMatMul: output has rank 0")?;
    let k = *cx.in_dims(0).last().ok_or("DequantMatMul: x has rank 0")?;
    let x = rows_of(a[0], k)?;
    let y: A = match *scheme {
        QuantScheme::Int8Block { block_size } | QuantScheme::Int8BlockAsym { block_size } => {
            arity(a, 4, "DequantMatMul")?;
            let bs = block_size.max(1).i32()?;
            let nb = (k + bs - 1) / bs;
            // w[p, j] = (q[p, j] - zp[b, j]) * scale[b, j], b = p / block.
            let q = f32(&*ops::reshape(&*ops::astype(a[1], Mx::I8)?, &[k, n])?)?;
            let s = expand_rows(a[2], nb, n, bs, k)?;
            let q = if matches!(scheme, QuantScheme::Int8BlockAsym { .. }) {
                ops::subtract(&q, &*expand_rows(a[3], nb, n, bs, k)?)?
            } else {
                q
            };
            ops::matmul(&x, &*ops::multiply(&q, &s)?)?
        }
        QuantScheme::Int4Block { block_size } => {
            arity(a, 4, "DequantMatMul")?;
            let bs = block_size.max(1).i32()?;
            let nb = (k + bs - 1) / bs;
            // Element e = p*n + j of the [k, n] weight is nibble e of the
            // flat byte stream (low nibble first); w = nibble * scale
            // (rlx-cpu ignores the zp input for Int4Block).
            let total = k * n;
            let nbytes = (total + 1) / 2;
            let codes = unpack_bits(a[1], 1, nbytes, total, 4)?;
            let q = ops::reshape(&*f32(&codes)?, &[k, n])?;
            let s = expand_rows(a[2], nb, n, bs, k)?;
            ops::matmul(&x, &*ops::multiply(&q, &s)?)?
        }
        QuantScheme::MlxAffine { bits, group_size }
            if native_affine(bits.i32()?, group_size.i32()?, k) =>
        {
            arity(a, 4, "DequantMatMul")?;
            let gs = group_size.i32()?;
            let sc = ops::reshape(&*f32(a[2])?, &[n, k / gs])?;
            let bi = ops::reshape(&*f32(a[3])?, &[n, k / gs])?;
            let w = packed_words(a[1], n, k, bits.i32()?)?;
            // On the CPU, the plugin's own kernel where it takes the
            // operands (4 and 8 bits): MLX's runs on one thread.
            if super::cpu_f32(&[&x])
                && kernels::quantized_matmul_cpu_takes(&x, &w, &sc, &bi, gs, bits.i32()?)
            {
                kernels::quantized_matmul_cpu(&x, &w, &sc, &bi, gs, bits.i32()?)?
            } else {
                ops::quantized_matmul(&x, &w, &sc, Some(&*bi), true, gs, bits.i32()?, "affine")?
            }
        }
        QuantScheme::MlxMxfp4 { group_size } | QuantScheme::MlxMxfp8 { group_size }
            if native_mxfp(group_size.i32()?, k) && cx.in_dtype(2) == IrDType::U8 =>
        {
            arity(a, 4, "DequantMatMul")?;
            let gs = group_size.i32()?;
            let (bits, mode) = if matches!(scheme, QuantScheme::MlxMxfp4 { .. }) {
                (4, "mxfp4")
            } else {
                (8, "mxfp8")
            };
            // u8 E8M0 group scales, as MLX's mxfp modes take them; no biases.
            let sc = ops::reshape(&*ops::astype(a[2], Mx::U8)?, &[n, k / gs])?;
            let w = packed_words(a[1], n, k, bits)?;
            ops::quantized_matmul(&x, &w, &sc, None, true, gs, bits, mode)?
        }
        // MLX variants the native kernel does not take (group sizes other
        // than 32/64/128; mxfp with 16-element groups): dequantized.
        QuantScheme::MlxAffine { bits, group_size } => {
            arity(a, 4, "DequantMatMul")?;
            if !matches!(bits, 2 | 3 | 4 | 5 | 6 | 8) {
                return Err(format!("DequantMatMul MlxAffine bits={bits} is not lowered").into());
            }
            let gs = group_size.i32()?;
            if gs <= 0 || k % gs != 0 || !(gs as u32 * bits as u32).is_multiple_of(8) {
                return Err(format!(
                    "DequantMatMul MlxAffine: k={k} with group_size={gs} is not supported \
                     (k must be a multiple of group_size)"
                )
                .into());
            }
            let groups = k / gs;
            // W is [n, k], each row packed low bits first along k;
            // w = scale * code + bias per (row, group).
            let row_bytes = k * bits.i32()? / 8;
            let codes = f32(&*unpack_bits(a[1], n, row_bytes, k, bits as u32)?)?;
            let s = expand_cols(a[2], n, groups, gs)?;
            let b = expand_cols(a[3], n, groups, gs)?;
            let w = ops::add(&*ops::multiply(&s, &codes)?, &b)?;
            ops::matmul(&x, &*ops::transpose(&w, &[1, 0])?)?
        }
        QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => {
            arity(a, 4, "DequantMatMul")?;
            // w [k, n] FP8 codes (rlx-cpu's decoders) times a per-column
            // scale (the first n scale values).
            let t = if matches!(scheme, QuantScheme::Fp8E4m3) {
                table(fp8_rlx::<3, 7>, 256)
            } else {
                table(fp8_rlx::<2, 15>, 256)
            };
            let q = lut(&*ops::reshape(a[1], &[k, n])?, &t)?;
            if numel(&cx.in_dims(2)) < n as i64 {
                return Err(format!("DequantMatMul {scheme}: fewer than n={n} scales").into());
            }
            let sc = ops::slice(&*ops::reshape(&*f32(a[2])?, &[-1])?, &[0], &[n], &[1])?;
            ops::matmul(&x, &*ops::multiply(&q, &*ops::reshape(&sc, &[1, n])?)?)?
        }
        QuantScheme::Nvfp4Block => {
            arity(a, 4, "DequantMatMul")?;
            // Flat nibble stream over the [k, n] weight (low nibble first),
            // E2M1 codes; FP8 E4M3 scale per 16 rows of k and column;
            // one f32 global scale. w = fp4 * (scale * global).
            let gs = rlx_ir::NVFP4_GROUP_SIZE.i32()?;
            let nb = (k + gs - 1) / gs;
            let total = k * n;
            let codes = unpack_bits(a[1], 1, (total + 1) / 2, total, 4)?;
            let q = ops::reshape(&*lut(&codes, &rlx_ir::FP4_E2M1_LUT)?, &[k, n])?;
            let st = table(rlx_ir::fp8_e4m3_scale_to_f32, 256);
            let sc = lut(&*ops::reshape(a[2], &[-1])?, &st)?;
            let sc = ops::slice(&sc, &[0], &[nb * n], &[1])?;
            let g = ops::slice(&*ops::reshape(&*f32(a[3])?, &[-1])?, &[0], &[1], &[1])?;
            let sc = ops::multiply(&sc, &g)?;
            let sc = expand_rows(&sc, nb, n, gs, k)?;
            ops::matmul(&x, &*ops::multiply(&q, &sc)?)?
        }
        QuantScheme::MxFp4x2Block { group_size } => {
            arity(a, 3, "DequantMatMul")?;
            if cx.in_dtype(2) != IrDType::F32 {
                return Err(format!(
                    "DequantMatMul {scheme}: {:?} scales are not supported (f32 [2, k/group, n] only)",
                    cx.in_dtype(2)
                )
                .into());
            }
            // Two E2M1 nibble planes over the [k, n] weight (each a flat
            // nibble stream, low nibble first), and two f32 scale sets
            // [k/group, n]: w = fp4(q0) * s0 + fp4(q1) * s1.
            let g = group_size.max(1).i32()?;
            let nb = (k + g - 1) / g;
            let total = k * n;
            let plane = (total + 1) / 2;
            let bytes = ops::reshape(a[1], &[2, plane])?;
            let codes = unpack_bits(&bytes, 2, plane, total, 4)?; // [2, k*n]
            let q = ops::reshape(&*lut(&codes, &rlx_ir::FP4_E2M1_LUT)?, &[2, k, n])?;
            let sc = ops::reshape(a[2], &[-1])?;
            let sc = ops::slice(&sc, &[0], &[2 * nb * n], &[1])?;
            let sc = ops::reshape(&sc, &[2, nb, n])?;
            let sc = ops::repeat(&sc, g, 1)?;
            let sc = ops::slice(&sc, &[0, 0, 0], &[2, k, n], &[1, 1, 1])?;
            let wq = ops::multiply(&q, &sc)?; // [2, k, n]
            let w0 = ops::slice(&wq, &[0, 0, 0], &[1, k, n], &[1, 1, 1])?;
            let w1 = ops::slice(&wq, &[1, 0, 0], &[2, k, n], &[1, 1, 1])?;
            let w = ops::reshape(&*ops::add(&w0, &w1)?, &[k, n])?;
            ops::matmul(&x, &w)?
        }
        QuantScheme::MlxMxfp4 { group_size } | QuantScheme::MlxMxfp8 { group_size } => {
            arity(a, 4, "DequantMatMul")?;
            let gs = group_size.i32()?;
            if gs <= 0 || k % gs != 0 || gs % 2 != 0 {
                return Err(format!(
                    "DequantMatMul {scheme}: k={k} not a multiple of the group size: not supported"
                )
                .into());
            }
            if cx.in_dtype(2) != IrDType::U8 {
                return Err(format!(
                    "DequantMatMul {scheme}: {:?} scales are not supported (u8 scale codes only)",
                    cx.in_dtype(2)
                )
                .into());
            }
            let groups = k / gs;
            // W [n, k]: mxfp4 packs two E2M1 nibbles per byte (low first),
            // mxfp8 one OCP E4M3 code per byte; u8 group scales [n, groups].
            let q = if matches!(scheme, QuantScheme::MlxMxfp4 { .. }) {
                let codes = unpack_bits(a[1], n, k / 2, k, 4)?;
                lut(&codes, &rlx_ir::FP4_E2M1_LUT)?
            } else {
                lut(&*ops::reshape(a[1], &[n, k])?, &table(fp8_e4m3_ocp, 256))?
            };
            let sc = lut(&*ops::reshape(a[2], &[n, groups])?, &mx_scale_table(gs))?;
            let sc = expand_cols(&sc, n, groups, gs)?;
            let w = ops::multiply(&q, &sc)?;
            ops::matmul(&x, &*ops::transpose(&w, &[1, 0])?)?
        }
        s if s.is_gguf() => {
            arity(a, 2, "DequantMatMul")?;
            // GGUF stores W as [n, k] row-major, blocks along k.
            let w = gguf_rows(a[1], 1, k, n, &s, "DequantMatMul")?;
            ops::matmul(&x, &*ops::transpose(&*ops::reshape(&w, &[n, k])?, &[1, 0])?)?
        }
        other => {
            return Err(format!(
                "DequantMatMul scheme {other} is not lowered (supported: Int8Block, \
                 Int8BlockAsym, Int4Block, Fp8E4m3, Fp8E5m2, Nvfp4Block, MxFp4x2Block, \
                 MlxAffine bits 2/3/4/5/6/8, MlxMxfp4, MlxMxfp8, {GGUF_SCHEMES})"
            )
            .into())
        }
    };
    Ok(ops::reshape(&y, &out)?)
}
