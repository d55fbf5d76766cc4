//! GGUF's block formats (legacy Q*, K-quants, IQ*, the FP4/FP8 and BF16
//! variants) decoded to f32 with MLX integer ops (casts, shifts, masks,
//! gathers), following rlx-gguf's byte layouts exactly: the weights of
//! DequantMatMul, DequantGroupedMatMul and DequantMoEWeights.

use super::{const_i32, const_u32, f32, lut, scalar_of, table};
use crate::lower::I32;
use crate::lower::{LResult, A};
use rlx_gguf::iq_grids::{
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use rlx_ir::quant::QuantScheme;
use rlx_mlx_shim::{ops, Array, DType as Mx};

pub(super) const GGUF_SCHEMES: &str =
    "every GGUF scheme; GgufBF16/FV5/FV5B not for DequantMoEWeights";

pub(super) fn gguf_supported(s: &QuantScheme) -> bool {
    use QuantScheme::*;
    matches!(
        s,
        GgufQ4_0
            | GgufQ4_1
            | GgufQ5_0
            | GgufQ5_1
            | GgufQ8_0
            | GgufQ2K
            | GgufQ3K
            | GgufQ4K
            | GgufQ5K
            | GgufQ6K
            | GgufQ8K
            | GgufMXFP4
            | GgufNVFP4
            | GgufIQ4NL
            | GgufIQ4XS
            | GgufTQ1_0
            | GgufTQ2_0
            | GgufQ1_0
            | GgufQ2_0
            | GgufG8_0
            | GgufPtq1_0
            | GgufFV5
            | GgufFV5B
            | GgufIQ2XXS
            | GgufIQ2XS
            | GgufIQ3XXS
            | GgufIQ2S
            | GgufIQ3S
            | GgufIQ1S
            | GgufIQ1M
            | GgufBF16
    )
}

/// llama.cpp's IQ4 non-linear grid (`kvalues_iq4nl`).
const KVALUES_IQ4NL: [f32; 16] = [
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0,
    89.0, 113.0,
];

/// rlx-gguf's `e8m0_scale_to_f32` (GGUF MXFP4 block scale; 0xFF → 0).
fn gguf_e8m0(byte: u8) -> f32 {
    if byte == 0xFF {
        return 0.0;
    }
    let exp = i32::from(byte) - 127;
    if exp >= 128 {
        f32::INFINITY
    } else if exp < -126 {
        2f32.powi(exp.max(-149))
    } else {
        2f32.powi(exp)
    }
}

/// rlx-gguf's `e4m3_scale_to_f32` (GGUF NVFP4 block scale; NaN → 0).
fn gguf_e4m3(byte: u8) -> f32 {
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = (byte >> 3) & 0x0F;
    let mant = byte & 0x07;
    let v = if exp == 0 {
        if mant == 0 {
            0.0
        } else {
            (mant as f32 / 8.0) * 2f32.powi(-6)
        }
    } else if exp == 0x0F && mant == 0x07 {
        0.0
    } else {
        (1.0 + mant as f32 / 8.0) * 2f32.powi(i32::from(exp) - 7)
    };
    sign * v
}

/// Base-3 digit `n` of byte `b` as llama.cpp's ternary formats read it:
/// `((b * 3^n mod 256) * 3) >> 8`, in 0..=2. `pos(i)` gives element `i`'s
/// (byte, n). Returns f32 `[nb, elems]`.
fn base3_digits(blk: &Array, elems: usize, pos: impl Fn(usize) -> (usize, usize)) -> LResult {
    const POW3: [u32; 5] = [1, 3, 9, 27, 81];
    let b = field(blk, elems, |y| vec![part(pos(y).0, 0, 0xff, 0)])?;
    let off: Vec<u32> = (0..elems).map(|y| 256 * pos(y).1 as u32).collect();
    let idx = ops::add(&b, &*const_u32(&off, &[1, elems.i32()?])?)?;
    let digits: Vec<f32> = (0..5 * 256)
        .map(|t| {
            let (n, byte) = (t / 256, (t % 256) as u32);
            let q = (byte * POW3[n]) & 0xff;
            ((q * 3) >> 8) as f32
        })
        .collect();
    lut(&idx, &digits)
}

/// Element `y`'s (byte, digit) in llama.cpp's staged ternary packing:
/// `stages` are consecutive `(bytes, digits per byte)` runs, each stage's
/// digit `n` of all its bytes before digit `n + 1`.
fn staged_trit(y: usize, stages: &[(usize, usize)]) -> (usize, usize) {
    let (mut first, mut offset) = (0, 0);
    for &(bytes, digits) in stages {
        if y < first + bytes * digits {
            return (offset + (y - first) % bytes, (y - first) / bytes);
        }
        first += bytes * digits;
        offset += bytes;
    }
    unreachable!("element {y} is past the block's {first} digits")
}

/// Parts of the 7-bit sign index `l` packed in the little-endian u32 at
/// byte `base` (bits 7l..7l+7; may straddle two bytes).
fn sign7(base: usize, l: usize) -> Vec<Part> {
    let start = 7 * l;
    let (byte, sh) = (base + start / 8, (start % 8) as u32);
    let n_lo = (8 - sh).min(7);
    let mut p = vec![part(byte, sh, (1 << n_lo) - 1, 0)];
    if n_lo < 7 {
        p.push(part(byte + 1, 0, (1 << (7 - n_lo)) - 1, n_lo));
    }
    p
}

/// `tab[idx * width + j]` per element (`idx` uint32 `[nb, E]`, `j` per
/// element), as f32.
fn grid_values(idx: &Array, width: u32, j: &[u32], tab: &[f32]) -> LResult {
    let jc = const_u32(j, &[1, j.len().i32()?])?;
    let w = scalar_of(width as f64, Mx::U32)?;
    lut(&*ops::add(&*ops::multiply(idx, &w)?, &jc)?, tab)
}

/// Grid entries as their little-endian i8 lanes.
fn grid_tab_u64(g: &[u64]) -> Vec<f32> {
    g.iter()
        .flat_map(|e| e.to_le_bytes().map(|b| b as i8 as f32))
        .collect()
}

fn grid_tab_u32(g: &[u32]) -> Vec<f32> {
    g.iter()
        .flat_map(|e| e.to_le_bytes().map(|b| b as i8 as f32))
        .collect()
}

/// `KSIGNS_IQ2XS[s]` bit `j` as ±1, at `s * 8 + j`.
fn sign_tab() -> Vec<f32> {
    KSIGNS_IQ2XS
        .iter()
        .flat_map(|&sg| (0..8).map(move |j| if sg & (1 << j) != 0 { -1.0 } else { 1.0 }))
        .collect()
}

/// Parts of bits `start..start+n` (n <= 8) of the little-endian word at
/// byte `base`.
fn bits(base: usize, start: usize, n: usize) -> Vec<Part> {
    let (byte, sh) = (base + start / 8, (start % 8) as u32);
    let n_lo = (8 - sh).min(n as u32);
    let mut p = vec![part(byte, sh, (1 << n_lo) - 1, 0)];
    if (n as u32) > n_lo {
        p.push(part(byte + 1, 0, (1 << (n as u32 - n_lo)) - 1, n_lo));
    }
    p
}

/// A raw sign byte `b`'s bit `j` as ±1, at `b * 8 + j`.
fn byte_sign_tab() -> Vec<f32> {
    (0..256u32)
        .flat_map(|b| (0..8).map(move |j| if b & (1 << j) != 0 { -1.0 } else { 1.0 }))
        .collect()
}

/// One part of a per-element bit field read out of a block:
/// `((byte[at] >> shift) & mask) << lshift`.
#[derive(Clone, Copy)]
struct Part {
    at: usize,
    shift: u32,
    mask: u32,
    lshift: u32,
}

fn part(at: usize, shift: u32, mask: u32, lshift: u32) -> Part {
    Part {
        at,
        shift,
        mask,
        lshift,
    }
}

/// A per-element field of every block: `blk` is uint32 `[nb, block_bytes]`;
/// `f(i)` lists the parts of element `i` (at most two). Returns uint32
/// `[nb, elems]`.
fn field(blk: &Array, elems: usize, f: impl Fn(usize) -> Vec<Part>) -> LResult {
    let per: Vec<Vec<Part>> = (0..elems).map(&f).collect();
    let np = per.iter().map(|p| p.len()).max().unwrap_or(1).max(1);
    let mut acc: Option<A> = None;
    for j in 0..np {
        let get = |i: usize| per[i].get(j).copied().unwrap_or(part(0, 0, 0, 0));
        let at: Vec<i32> = (0..elems)
            .map(|i| get(i).at.i32())
            .collect::<LResult<_>>()?;
        let sh: Vec<u32> = (0..elems).map(|i| get(i).shift).collect();
        let mk: Vec<u32> = (0..elems).map(|i| get(i).mask).collect();
        let ls: Vec<u32> = (0..elems).map(|i| get(i).lshift).collect();
        let e = elems.i32()?;
        let v = ops::take(blk, &*const_i32(&at, &[e])?, 1)?;
        let v = ops::right_shift(&v, &*const_u32(&sh, &[1, e])?)?;
        let v = ops::bitwise_and(&v, &*const_u32(&mk, &[1, e])?)?;
        let v = ops::left_shift(&v, &*const_u32(&ls, &[1, e])?)?;
        acc = Some(match acc {
            None => v,
            Some(a) => ops::bitwise_or(&a, &v)?,
        });
    }
    Ok(acc.expect("at least one part"))
}

/// Bytes `[at, at+len)` of every block reinterpreted as `dtype`, as f32
/// `[nb, len / size(dtype)]`.
fn block_view(blk_u8: &Array, nb: i32, at: i32, len: i32, dtype: Mx) -> LResult {
    let b = ops::contiguous(&*ops::slice(blk_u8, &[0, at], &[nb, at + len], &[1, 1])?)?;
    f32(&*ops::view(&b, dtype)?)
}

/// llama.cpp `get_scale_min_k4` as bit-field parts: (scale, min) of
/// sub-block `j` from the 12 packed bytes starting at `base`.
fn scale_min_k4(j: usize, base: usize) -> (Vec<Part>, Vec<Part>) {
    if j < 4 {
        (
            vec![part(base + j, 0, 63, 0)],
            vec![part(base + j + 4, 0, 63, 0)],
        )
    } else {
        (
            vec![part(base + j + 4, 0, 0x0f, 0), part(base + j - 4, 6, 3, 4)],
            vec![part(base + j + 4, 4, 0x0f, 0), part(base + j, 6, 3, 4)],
        )
    }
}

/// Dequantize `nblocks` GGUF blocks of `s` from the flat byte stream
/// `bytes` to f32 `[nblocks * block_elems]` in stream order, following
/// rlx-gguf's block decoders (and their f32 operation order).
fn gguf_dequant(bytes: &Array, nblocks: i32, s: &QuantScheme) -> LResult {
    use QuantScheme::*;
    let bb = s.gguf_block_bytes().i32()?;
    let be = s.gguf_block_size() as usize;
    let nb = nblocks;
    let blk8 = ops::reshape(&*ops::astype(bytes, Mx::U8)?, &[nb, bb])?;
    let blk = ops::astype(&blk8, Mx::U32)?;
    let fl = |a: &Array| f32(a);
    let sub = |a: &Array, v: f64| -> LResult { Ok(ops::subtract(a, &*scalar_of(v, Mx::F32)?)?) };
    let mul = |a: &Array, b: &Array| -> LResult { Ok(ops::multiply(a, b)?) };
    let add = |a: &Array, b: &Array| -> LResult { Ok(ops::add(a, b)?) };
    // Nibble `i` of a 32-element legacy block whose 16 quant bytes start at
    // `qs`: low nibbles are elements 0..16, high nibbles 16..32.
    let nib = |qs: usize| {
        move |i: usize| {
            if i < 16 {
                vec![part(qs + i, 0, 0x0f, 0)]
            } else {
                vec![part(qs + i - 16, 4, 0x0f, 0)]
            }
        }
    };
    // Legacy 5-bit: nibble plus bit i of the little-endian u32 at `qh`.
    let five = |qh: usize, qs: usize| {
        move |i: usize| {
            let mut p = nib(qs)(i);
            p.push(part(qh + i / 8, (i % 8) as u32, 1, 4));
            p
        }
    };
    let w = match s {
        GgufQ8_0 => {
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            mul(&d, &*block_view(&blk8, nb, 2, 32, Mx::I8)?)?
        }
        GgufQ4_0 => {
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let q = sub(&*fl(&*field(&blk, be, nib(2))?)?, 8.0)?;
            mul(&d, &q)?
        }
        GgufQ4_1 => {
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let m = block_view(&blk8, nb, 2, 2, Mx::F16)?;
            let q = fl(&*field(&blk, be, nib(4))?)?;
            add(&*mul(&d, &q)?, &m)?
        }
        GgufQ5_0 => {
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let q = sub(&*fl(&*field(&blk, be, five(2, 6))?)?, 16.0)?;
            mul(&d, &q)?
        }
        GgufQ5_1 => {
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let m = block_view(&blk8, nb, 2, 2, Mx::F16)?;
            let q = fl(&*field(&blk, be, five(4, 8))?)?;
            add(&*mul(&d, &q)?, &m)?
        }
        GgufQ8K => {
            // f32 d, 256 i8 quants, then 16 i16 block sums (unused here).
            let d = block_view(&blk8, nb, 0, 4, Mx::F32)?;
            mul(&d, &*block_view(&blk8, nb, 4, 256, Mx::I8)?)?
        }
        GgufQ4K | GgufQ5K => {
            // f16 d, f16 dmin, 12 packed 6-bit scales/mins, [Q5_K: 32-byte
            // high-bit plane], 128 nibble bytes. Element i: pair jp = i/64,
            // half = (i%64)/32 (low / high nibble), l = i%32, sub-block
            // 2*jp + half. value = (d*sc)*q - dmin*m.
            let q5 = matches!(s, GgufQ5K);
            let qs = if q5 { 48 } else { 16 };
            let q = field(&blk, 256, |i| {
                let (jp, half, l) = (i / 64, (i % 64) / 32, i % 32);
                let mut p = vec![part(qs + 32 * jp + l, 4 * half as u32, 0x0f, 0)];
                if q5 {
                    p.push(part(16 + l, (2 * jp + half) as u32, 1, 4));
                }
                p
            })?;
            let sc = field(&blk, 256, |i| {
                scale_min_k4(2 * (i / 64) + (i % 64) / 32, 4).0
            })?;
            let mn = field(&blk, 256, |i| {
                scale_min_k4(2 * (i / 64) + (i % 64) / 32, 4).1
            })?;
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let dmin = block_view(&blk8, nb, 2, 2, Mx::F16)?;
            let d0 = mul(&d, &*fl(&sc)?)?;
            let m0 = mul(&dmin, &*fl(&mn)?)?;
            ops::subtract(&*mul(&d0, &*fl(&q)?)?, &m0)?
        }
        GgufQ6K => {
            // ql[128], qh[64], i8 scales[16], f16 d. Element i: h = i/128,
            // quarter = (i%128)/32, l = i%32; value = d*sc*(q - 32).
            let q = field(&blk, 256, |i| {
                let (h, qt, l) = (i / 128, (i % 128) / 32, i % 32);
                let lo = h * 64 + l + if qt % 2 == 1 { 32 } else { 0 };
                let lo_shift = if qt >= 2 { 4 } else { 0 };
                vec![
                    part(lo, lo_shift, 0x0f, 0),
                    part(128 + h * 32 + l, 2 * qt as u32, 3, 4),
                ]
            })?;
            let sc = field(&blk, 256, |i| {
                let (h, qt, l) = (i / 128, (i % 128) / 32, i % 32);
                vec![part(192 + h * 8 + l / 16 + 2 * qt, 0, 0xff, 0)]
            })?;
            let sc = f32(&*ops::view(&*ops::astype(&sc, Mx::U8)?, Mx::I8)?)?;
            let d = block_view(&blk8, nb, 208, 2, Mx::F16)?;
            let q = sub(&*fl(&q)?, 32.0)?;
            mul(&*mul(&d, &sc)?, &q)?
        }
        GgufQ2K | GgufQ3K => {
            // Element i: h = i/128, g = (i%128)/32 (2-bit plane at shift
            // 2g), sub = (i%32)/16, l = i%16; sub-block is = 8h + 2g + sub.
            let q3 = matches!(s, GgufQ3K);
            let qs = if q3 { 32 } else { 16 };
            let pos = |i: usize| (i / 128, (i % 128) / 32, (i % 32) / 16, i % 16);
            let q = field(&blk, 256, |i| {
                let (h, g, sb, l) = pos(i);
                let mut p = vec![part(qs + 32 * h + 16 * sb + l, 2 * g as u32, 3, 0)];
                if q3 {
                    // hmask bit (4h + g) of byte l + 16 sub: set → +0, clear → -4.
                    p.push(part(16 * sb + l, (4 * h + g) as u32, 1, 2));
                }
                p
            })?;
            let is = |i: usize| {
                let (h, g, sb, _) = pos(i);
                8 * h + 2 * g + sb
            };
            if q3 {
                // 6-bit scales unpacked from 12 bytes at 96 (kmask1/kmask2
                // shuffle); value = (d * (sc - 32)) * (q3 - 4).
                let sc = field(&blk, 256, |i| {
                    let j = is(i);
                    let (b, grp) = (j % 4, j / 4);
                    let lo = match grp {
                        0 => part(96 + b, 0, 0x0f, 0),
                        1 => part(100 + b, 0, 0x0f, 0),
                        2 => part(96 + b, 4, 0x0f, 0),
                        _ => part(100 + b, 4, 0x0f, 0),
                    };
                    vec![lo, part(104 + b, 2 * grp as u32, 3, 4)]
                })?;
                let d = block_view(&blk8, nb, 108, 2, Mx::F16)?;
                let dl = mul(&d, &*sub(&*fl(&sc)?, 32.0)?)?;
                mul(&dl, &*sub(&*fl(&q)?, 4.0)?)?
            } else {
                // Scale byte `is`: low nibble scale, high nibble min;
                // value = (d * sc) * q - dmin * m.
                let sc = field(&blk, 256, |i| vec![part(is(i), 0, 0x0f, 0)])?;
                let mn = field(&blk, 256, |i| vec![part(is(i), 4, 0x0f, 0)])?;
                let d = block_view(&blk8, nb, 80, 2, Mx::F16)?;
                let dmin = block_view(&blk8, nb, 82, 2, Mx::F16)?;
                let dl = mul(&d, &*fl(&sc)?)?;
                let ml = mul(&dmin, &*fl(&mn)?)?;
                ops::subtract(&*mul(&dl, &*fl(&q)?)?, &ml)?
            }
        }
        GgufMXFP4 | GgufNVFP4 => {
            // One scale byte (E8M0 for MXFP4, E4M3 for NVFP4, as rlx-gguf
            // decodes them), then nibble pairs: element 2i is the low
            // nibble of byte 1+i, 2i+1 the high one. value = s * fp4.
            let st = if matches!(s, GgufMXFP4) {
                table(gguf_e8m0, 256)
            } else {
                table(gguf_e4m3, 256)
            };
            let sc = lut(&*ops::slice(&blk8, &[0, 0], &[nb, 1], &[1, 1])?, &st)?;
            let q = field(&blk, be, |i| {
                vec![part(1 + i / 2, 4 * (i % 2) as u32, 0x0f, 0)]
            })?;
            mul(&sc, &*lut(&q, &rlx_ir::FP4_E2M1_LUT)?)?
        }
        GgufIQ4NL => {
            // f16 d, then Q4_0-ordered nibbles into the IQ4 non-linear grid.
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            mul(&d, &*lut(&*field(&blk, be, nib(2))?, &KVALUES_IQ4NL)?)?
        }
        GgufIQ4XS => {
            // f16 d, u16 scales_h, 4 bytes scales_l, 128 nibble bytes.
            // Sub-block ib = i/32: ls = scales_l nibble | 2 bits of scales_h
            // << 4; value = (d * (ls - 32)) * grid[nibble].
            let q = field(&blk, 256, |i| {
                let (ib, r) = (i / 32, i % 32);
                vec![part(8 + 16 * ib + r % 16, 4 * (r / 16) as u32, 0x0f, 0)]
            })?;
            let ls = field(&blk, 256, |i| {
                let ib = i / 32;
                vec![
                    part(4 + ib / 2, 4 * (ib % 2) as u32, 0x0f, 0),
                    part(2 + (2 * ib) / 8, ((2 * ib) % 8) as u32, 3, 4),
                ]
            })?;
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let dl = mul(&d, &*sub(&*fl(&ls)?, 32.0)?)?;
            mul(&dl, &*lut(&q, &KVALUES_IQ4NL)?)?
        }
        GgufTQ2_0 => {
            // qs[64] 2-bit trits, f16 d at 64. Element y: chunk y/128,
            // plane l = (y%128)/32 at shift 2l, m = y%32; value = (q-1)*d.
            let q = field(&blk, 256, |y| {
                vec![part(
                    32 * (y / 128) + y % 32,
                    2 * ((y % 128) / 32) as u32,
                    3,
                    0,
                )]
            })?;
            let d = block_view(&blk8, nb, 64, 2, Mx::F16)?;
            mul(&*sub(&*fl(&q)?, 1.0)?, &d)?
        }
        GgufTQ1_0 => {
            // qs[48] and qh[4] hold base-3 trits (5 per qs byte, 4 per qh
            // byte), f16 d at 52. Trit n of byte b is
            // ((b * 3^n mod 256) * 3) >> 8; value = (trit - 1) * d.
            let t = base3_digits(&blk, 256, |y| staged_trit(y, &[(32, 5), (16, 5), (4, 4)]))?;
            let d = block_view(&blk8, nb, 52, 2, Mx::F16)?;
            mul(&*sub(&t, 1.0)?, &d)?
        }
        GgufPtq1_0 => {
            // qs[24] (a 16-byte then an 8-byte stage, 5 trits per byte),
            // qh[2] (4 trits per byte), f16 d at 26; value = trit * d with
            // trit in {-1, 0, 1}.
            let t = base3_digits(&blk, 128, |y| staged_trit(y, &[(16, 5), (8, 5), (2, 4)]))?;
            let d = block_view(&blk8, nb, 26, 2, Mx::F16)?;
            mul(&*sub(&t, 1.0)?, &d)?
        }
        GgufFV5 => {
            // f32 s_lo, s_hi; bit planes p, n, r (32 bytes each, low bit
            // first): value = (p - n) * (r ? s_hi : s_lo).
            let bitf = |at: usize| {
                field(&blk, 256, move |j| {
                    vec![part(at + j / 8, (j % 8) as u32, 1, 0)]
                })
            };
            let sign = ops::subtract(&*fl(&*bitf(8)?)?, &*fl(&*bitf(40)?)?)?;
            let hi = ops::astype(&*bitf(72)?, Mx::Bool)?;
            let lo_s = block_view(&blk8, nb, 0, 4, Mx::F32)?;
            let hi_s = block_view(&blk8, nb, 4, 4, Mx::F32)?;
            let shape = [nb, 256];
            let mag = ops::where_(
                &hi,
                &*ops::broadcast_to(&hi_s, &shape)?,
                &*ops::broadcast_to(&lo_s, &shape)?,
            )?;
            mul(&sign, &mag)?
        }
        GgufFV5B => {
            // f32 s, then 256 i8 codes: value = s * q.
            let d = block_view(&blk8, nb, 0, 4, Mx::F32)?;
            mul(&d, &*block_view(&blk8, nb, 4, 256, Mx::I8)?)?
        }
        GgufQ1_0 => {
            // f16 d, then one sign bit per element (low bit first):
            // set → d, clear → -d.
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let bit = field(&blk, be, |j| vec![part(2 + j / 8, (j % 8) as u32, 1, 0)])?;
            let set = ops::astype(&bit, Mx::Bool)?;
            let nd = ops::negative(&d)?;
            let shape = [nb, be.i32()?];
            ops::where_(
                &set,
                &*ops::broadcast_to(&d, &shape)?,
                &*ops::broadcast_to(&nd, &shape)?,
            )?
        }
        GgufQ2_0 => {
            // f16 d, then 2-bit codes (low bits first); value = (q-1)*d.
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let q = field(&blk, be, |j| {
                vec![part(2 + j / 4, 2 * (j % 4) as u32, 3, 0)]
            })?;
            mul(&*sub(&*fl(&q)?, 1.0)?, &d)?
        }
        GgufG8_0 => {
            // Four bf16 scales (one per 8 elements), then 2-bit codes;
            // value = (q-1) * d[j/8].
            let bits = field(&blk, be, |j| {
                vec![
                    part(2 * (j / 8), 0, 0xff, 0),
                    part(2 * (j / 8) + 1, 0, 0xff, 8),
                ]
            })?;
            let d = ops::view(
                &*ops::left_shift(&bits, &*scalar_of(16.0, Mx::U32)?)?,
                Mx::F32,
            )?;
            let q = field(&blk, be, |j| {
                vec![part(8 + j / 4, 2 * (j % 4) as u32, 3, 0)]
            })?;
            mul(&*sub(&*fl(&q)?, 1.0)?, &d)?
        }
        GgufIQ2XXS => {
            // f16 d, then per 32-element sub-block ib: 4 grid-index bytes and
            // a u32 holding 4 x 7-bit sign-pattern indices plus a 4-bit
            // scale (bits 28..32). Element y: ib = y/32, l = (y%32)/8,
            // j = y%8; value = ((d * (0.5 + sc)) * 0.25) * grid[l][j] * sign.
            let grid_idx = field(&blk, 256, |y| {
                vec![part(2 + 8 * (y / 32) + (y % 32) / 8, 0, 0xff, 0)]
            })?;
            let sign_idx = field(&blk, 256, |y| sign7(2 + 8 * (y / 32) + 4, (y % 32) / 8))?;
            let sc = field(&blk, 256, |y| vec![part(2 + 8 * (y / 32) + 7, 4, 0x0f, 0)])?;
            let j8: Vec<u32> = (0..256).map(|y| (y % 8) as u32).collect();
            let gv = grid_values(&grid_idx, 8, &j8, &grid_tab_u64(&IQ2XXS_GRID))?;
            let sv = grid_values(&sign_idx, 8, &j8, &sign_tab())?;
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let half = scalar_of(0.5, Mx::F32)?;
            let db = mul(&d, &*ops::add(&*fl(&sc)?, &half)?)?;
            let db = mul(&db, &*scalar_of(0.25, Mx::F32)?)?;
            mul(&*mul(&db, &gv)?, &sv)?
        }
        GgufIQ2XS => {
            // f16 d, 32 u16 words (9-bit grid index | 7-bit sign index << 9),
            // 8 scale bytes (two 4-bit sub-scales per 32 elements). Element
            // y: ib = y/32, l = (y%32)/8, j = y%8; value =
            // ((d * (0.5 + sc)) * 0.25) * grid[j] * sign[j].
            let w = |y: usize| 2 + 2 * (4 * (y / 32) + (y % 32) / 8);
            let gi = field(&blk, 256, |y| {
                vec![part(w(y), 0, 0xff, 0), part(w(y) + 1, 0, 1, 8)]
            })?;
            let si = field(&blk, 256, |y| vec![part(w(y) + 1, 1, 0x7f, 0)])?;
            let sc = field(&blk, 256, |y| {
                vec![part(66 + y / 32, 4 * (((y % 32) / 8) / 2) as u32, 0x0f, 0)]
            })?;
            let j: Vec<u32> = (0..256).map(|y| (y % 8) as u32).collect();
            let gv = grid_values(&gi, 8, &j, &grid_tab_u64(&IQ2XS_GRID))?;
            let sv = grid_values(&si, 8, &j, &sign_tab())?;
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let db = mul(&d, &*ops::add(&*fl(&sc)?, &*scalar_of(0.5, Mx::F32)?)?)?;
            let db = mul(&db, &*scalar_of(0.25, Mx::F32)?)?;
            mul(&*mul(&db, &gv)?, &sv)?
        }
        GgufIQ3XXS => {
            // f16 d, 64 grid-index bytes (4 values each), then per 32
            // elements a u32: 4 x 7-bit sign indices + 4-bit scale (28..32).
            // Element y: ib = y/32, l = (y%32)/8, j = y%8; grid byte
            // 8ib + 2l + j/4, value = ((d * (0.5 + sc)) * 0.5) * grid * sign[j].
            let gi = field(&blk, 256, |y| {
                let (ib, l, j) = (y / 32, (y % 32) / 8, y % 8);
                vec![part(2 + 8 * ib + 2 * l + j / 4, 0, 0xff, 0)]
            })?;
            let si = field(&blk, 256, |y| sign7(66 + 4 * (y / 32), (y % 32) / 8))?;
            let sc = field(&blk, 256, |y| vec![part(66 + 4 * (y / 32) + 3, 4, 0x0f, 0)])?;
            let j4: Vec<u32> = (0..256).map(|y| (y % 4) as u32).collect();
            let j8: Vec<u32> = (0..256).map(|y| (y % 8) as u32).collect();
            let gv = grid_values(&gi, 4, &j4, &grid_tab_u32(&IQ3XXS_GRID))?;
            let sv = grid_values(&si, 8, &j8, &sign_tab())?;
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let db = mul(&d, &*ops::add(&*fl(&sc)?, &*scalar_of(0.5, Mx::F32)?)?)?;
            let db = mul(&db, &*scalar_of(0.5, Mx::F32)?)?;
            mul(&*mul(&db, &gv)?, &sv)?
        }
        GgufIQ2S => {
            // f16 d, qs[64] (32 grid low bytes, then 32 sign bytes), qh[8]
            // (2 high index bits per 8 elements), scales[8]. Element y:
            // ib = y/32, l = (y%32)/8, j = y%8; value =
            // ((d * (0.5 + sc)) * 0.25) * grid[j] * (sign bit j ? -1 : 1).
            let gi = field(&blk, 256, |y| {
                let (ib, l) = (y / 32, (y % 32) / 8);
                vec![
                    part(2 + 4 * ib + l, 0, 0xff, 0),
                    part(66 + ib, 2 * l as u32, 3, 8),
                ]
            })?;
            let sb = field(&blk, 256, |y| {
                vec![part(34 + 4 * (y / 32) + (y % 32) / 8, 0, 0xff, 0)]
            })?;
            let sc = field(&blk, 256, |y| {
                vec![part(74 + y / 32, 4 * (((y % 32) / 8) / 2) as u32, 0x0f, 0)]
            })?;
            let j8: Vec<u32> = (0..256).map(|y| (y % 8) as u32).collect();
            let gv = grid_values(&gi, 8, &j8, &grid_tab_u64(&IQ2S_GRID))?;
            let sv = grid_values(&sb, 8, &j8, &byte_sign_tab())?;
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let db = mul(&d, &*ops::add(&*fl(&sc)?, &*scalar_of(0.5, Mx::F32)?)?)?;
            let db = mul(&db, &*scalar_of(0.25, Mx::F32)?)?;
            mul(&*mul(&db, &gv)?, &sv)?
        }
        GgufIQ3S => {
            // f16 d, qs[64] grid low bytes (4 values each), qh[8] (one high
            // bit per grid index), signs[32], scales[4] (two 4-bit per 64
            // elements). Element y: ib = y/32, l = (y%32)/8, j = y%8,
            // h = j/4; index qs[8ib + 2l + h] | bit (2l + h) of qh[ib] << 8;
            // value = (d * (1 + 2 sc)) * grid[j%4] * (sign bit j ? -1 : 1).
            let gi = field(&blk, 256, |y| {
                let (ib, l, h) = (y / 32, (y % 32) / 8, (y % 8) / 4);
                vec![
                    part(2 + 8 * ib + 2 * l + h, 0, 0xff, 0),
                    part(66 + ib, (2 * l + h) as u32, 1, 8),
                ]
            })?;
            let sb = field(&blk, 256, |y| {
                vec![part(74 + 4 * (y / 32) + (y % 32) / 8, 0, 0xff, 0)]
            })?;
            let sc = field(&blk, 256, |y| {
                let ib = y / 32;
                vec![part(106 + ib / 2, 4 * (ib % 2) as u32, 0x0f, 0)]
            })?;
            let j4: Vec<u32> = (0..256).map(|y| (y % 4) as u32).collect();
            let j8: Vec<u32> = (0..256).map(|y| (y % 8) as u32).collect();
            let gv = grid_values(&gi, 4, &j4, &grid_tab_u32(&IQ3S_GRID))?;
            let sv = grid_values(&sb, 8, &j8, &byte_sign_tab())?;
            let d = block_view(&blk8, nb, 0, 2, Mx::F16)?;
            let two_s1 = ops::add(
                &*mul(&*fl(&sc)?, &*scalar_of(2.0, Mx::F32)?)?,
                &*scalar_of(1.0, Mx::F32)?,
            )?;
            let db = mul(&d, &two_s1)?;
            mul(&*mul(&db, &gv)?, &sv)?
        }
        GgufIQ1S | GgufIQ1M => {
            // Element y: ib = y/32, g = (y%32)/8, j = y%8; 11-bit index into
            // the IQ1 grid (low byte from qs, 3 high bits from qh), a 3-bit
            // sub-scale s and a delta sign bit; value =
            // (d * (2 s + 1)) * (grid[j] + (bit ? -0.125 : 0.125)).
            let m = matches!(s, GgufIQ1M);
            let (gi, sc, db, d) = if m {
                // qs[32]@0, qh[16]@32, 4 u16 scales@48 whose top nibbles
                // form the f16 d.
                let gi = field(&blk, 256, |y| {
                    let (ib, g) = (y / 32, (y % 32) / 8);
                    vec![
                        part(4 * ib + g, 0, 0xff, 0),
                        part(32 + 2 * ib + g / 2, 4 * (g % 2) as u32, 7, 8),
                    ]
                })?;
                let sc = field(&blk, 256, |y| {
                    let (ib, g) = (y / 32, (y % 32) / 8);
                    bits(48 + 2 * (ib / 2), 6 * (ib % 2) + 3 * (g / 2), 3)
                })?;
                let db = field(&blk, 256, |y| {
                    let (ib, g) = (y / 32, (y % 32) / 8);
                    vec![part(32 + 2 * ib + g / 2, 3 + 4 * (g % 2) as u32, 1, 0)]
                })?;
                let dbits = field(&blk, 1, |_| {
                    (0..4)
                        .map(|k| part(48 + 2 * k + 1, 4, 0x0f, 4 * k as u32))
                        .collect()
                })?;
                let d = f32(&*ops::view(&*ops::astype(&dbits, Mx::U16)?, Mx::F16)?)?;
                (gi, sc, db, d)
            } else {
                // f16 d@0, qs[32]@2, 8 u16 qh@34: bits 3l..3l+3 high index
                // bits, 12..15 sub-scale, 15 delta sign.
                let gi = field(&blk, 256, |y| {
                    let (ib, l) = (y / 32, (y % 32) / 8);
                    let mut p = vec![part(2 + 4 * ib + l, 0, 0xff, 0)];
                    p.extend(bits(34 + 2 * ib, 3 * l, 3).into_iter().map(|mut q| {
                        q.lshift += 8;
                        q
                    }));
                    p
                })?;
                let sc = field(&blk, 256, |y| vec![part(34 + 2 * (y / 32) + 1, 4, 7, 0)])?;
                let db = field(&blk, 256, |y| vec![part(34 + 2 * (y / 32) + 1, 7, 1, 0)])?;
                (gi, sc, db, block_view(&blk8, nb, 0, 2, Mx::F16)?)
            };
            let j8: Vec<u32> = (0..256).map(|y| (y % 8) as u32).collect();
            let gv = grid_values(&gi, 8, &j8, &grid_tab_u64(&IQ1S_GRID))?;
            let two_s1 = ops::add(
                &*mul(&*fl(&sc)?, &*scalar_of(2.0, Mx::F32)?)?,
                &*scalar_of(1.0, Mx::F32)?,
            )?;
            let dl = mul(&d, &two_s1)?;
            let delta = ops::subtract(
                &*scalar_of(0.125, Mx::F32)?,
                &*mul(&*fl(&db)?, &*scalar_of(0.25, Mx::F32)?)?,
            )?;
            mul(&dl, &*ops::add(&gv, &delta)?)?
        }
        GgufBF16 => block_view(&blk8, nb, 0, 2, Mx::BF16)?,
        other => {
            return Err(
                format!("GGUF scheme {other} is not lowered (supported: {GGUF_SCHEMES})").into(),
            )
        }
    };
    Ok(ops::reshape(&w, &[-1])?)
}

/// Bytes and elements per GGUF block.
fn gguf_block(s: &QuantScheme) -> (i64, i64) {
    (s.gguf_block_bytes() as i64, s.gguf_block_size() as i64)
}

/// A GGUF bank of `experts` slabs, each the `[n, k]` row-major blob of one
/// expert, dequantized to `[experts, n, k]`.
pub(super) fn gguf_rows(
    bytes: &Array,
    experts: i32,
    k: i32,
    n: i32,
    s: &QuantScheme,
    op: &str,
) -> LResult {
    if !gguf_supported(s) {
        return Err(format!("{op} scheme {s} is not lowered (supported: {GGUF_SCHEMES})").into());
    }
    let (_, be) = gguf_block(s);
    if k as i64 % be != 0 {
        return Err(format!(
            "{op} {s}: k={k} is not a multiple of the {be}-element block: not supported"
        )
        .into());
    }
    let nblocks = (experts as i64 * n as i64 * k as i64 / be).i32()?;
    let w = gguf_dequant(bytes, nblocks, s)?;
    Ok(ops::reshape(&w, &[experts, n, k])?)
}

/// The same bank in GroupedMatMul layout `[experts, k, n]`.
pub(super) fn gguf_bank(
    bytes: &Array,
    experts: i32,
    k: i32,
    n: i32,
    s: &QuantScheme,
    op: &str,
) -> LResult {
    let w = gguf_rows(bytes, experts, k, n, s, op)?;
    Ok(ops::transpose(&w, &[0, 2, 1])?)
}

/// Bytes per expert slab `[n, k]`.
pub(super) fn gguf_slab_bytes(s: &QuantScheme, k: i32, n: i32) -> i64 {
    let (bb, be) = gguf_block(s);
    (k as i64 * n as i64) / be.max(1) * bb
}
