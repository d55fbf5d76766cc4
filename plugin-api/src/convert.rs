//! Element conversions between RLX dtypes and f32, for hosts and tests that
//! fill and read tensors as f32.

use crate::error::{PluginError, PluginResult};
use crate::tensor::DType;

/// Decode little-endian elements of `dtype` to f32.
pub fn bytes_to_f32(dtype: DType, data: &[u8]) -> PluginResult<Vec<f32>> {
    let es = dtype.size_bytes();
    if !data.len().is_multiple_of(es) {
        return Err(PluginError::invalid_argument(format!(
            "{} bytes is not a whole number of {dtype} elements",
            data.len()
        )));
    }
    if dtype == DType::F32 {
        return Ok(f32_from_le(data));
    }
    let it = data.chunks_exact(es);
    Ok(match dtype {
        DType::F32 => unreachable!("handled above"),
        DType::F16 => it
            .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f32())
            .collect(),
        DType::BF16 => it
            .map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f32())
            .collect(),
        DType::F64 => it
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        DType::I8 => it.map(|c| c[0] as i8 as f32).collect(),
        DType::I16 => it
            .map(|c| i16::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        DType::I32 => it
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        DType::I64 => it
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        DType::U8 => it.map(|c| c[0] as f32).collect(),
        DType::U32 => it
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        DType::Bool => it.map(|c| if c[0] != 0 { 1.0 } else { 0.0 }).collect(),
        DType::C64 => {
            return Err(PluginError::unsupported(
                "c64 tensors cannot be read as f32 (two parts per element)",
            ))
        }
    })
}

/// Little-endian f32 bytes as values, in one `memcpy` on little-endian
/// targets (the per-element loop it replaces showed up in profiles of 4 MiB
/// runs); a trailing partial element is ignored.
pub fn f32_from_le(data: &[u8]) -> Vec<f32> {
    let n = data.len() / 4;
    #[cfg(target_endian = "little")]
    {
        let mut out = Vec::<f32>::with_capacity(n);
        // SAFETY: `out` has room for `n` f32s (4n bytes); the source holds
        // at least 4n bytes; every bit pattern is a valid f32; the length
        // is set only after all 4n bytes are written.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), out.as_mut_ptr().cast::<u8>(), n * 4);
            out.set_len(n);
        }
        out
    }
    #[cfg(not(target_endian = "little"))]
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// f32 values as little-endian bytes, in one `memcpy` on little-endian
/// targets (see [`f32_from_le`]).
pub fn f32_to_le(values: &[f32]) -> Vec<u8> {
    #[cfg(target_endian = "little")]
    {
        let n = values.len() * 4;
        let mut out = Vec::<u8>::with_capacity(n);
        // SAFETY: `out` has room for `n` bytes, the source is `n` bytes of
        // f32s, and the length is set only after they are all written.
        unsafe {
            std::ptr::copy_nonoverlapping(values.as_ptr().cast::<u8>(), out.as_mut_ptr(), n);
            out.set_len(n);
        }
        out
    }
    #[cfg(not(target_endian = "little"))]
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// f32 values as little-endian bytes without a copy where the target is
/// little-endian (the values' own memory, reinterpreted), else encoded.
pub fn f32_le_bytes(values: &[f32]) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: an f32 slice is `4 * len` initialised bytes, u8 has no
        // alignment requirement, and the borrow keeps `values` alive.
        std::borrow::Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        })
    }
    #[cfg(not(target_endian = "little"))]
    std::borrow::Cow::Owned(f32_to_le(values))
}

/// Encode f32 values as little-endian elements of `dtype` (rounding to
/// nearest for narrower floats, truncating toward zero for integers).
pub fn f32_to_bytes(dtype: DType, values: &[f32]) -> PluginResult<Vec<u8>> {
    if dtype == DType::F32 {
        return Ok(f32_to_le(values));
    }
    let mut out = Vec::with_capacity(values.len() * dtype.size_bytes());
    for &v in values {
        match dtype {
            DType::F32 => out.extend(v.to_le_bytes()),
            DType::F16 => out.extend(half::f16::from_f32(v).to_le_bytes()),
            DType::BF16 => out.extend(half::bf16::from_f32(v).to_le_bytes()),
            DType::F64 => out.extend((v as f64).to_le_bytes()),
            DType::I8 => out.push(v as i8 as u8),
            DType::I16 => out.extend((v as i16).to_le_bytes()),
            DType::I32 => out.extend((v as i32).to_le_bytes()),
            DType::I64 => out.extend((v as i64).to_le_bytes()),
            DType::U8 => out.push(v as u8),
            DType::U32 => out.extend((v as u32).to_le_bytes()),
            DType::Bool => out.push((v != 0.0) as u8),
            DType::C64 => {
                return Err(PluginError::unsupported(
                    "c64 tensors cannot be written from f32 values",
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_floats_round_trip_within_their_precision() {
        let v = [1.0f32, -2.5, 3.140625, 65504.0];
        for d in [DType::F16, DType::BF16] {
            let back = bytes_to_f32(d, &f32_to_bytes(d, &v).unwrap()).unwrap();
            for (a, b) in v.iter().zip(&back) {
                assert!((a - b).abs() <= a.abs() * 1e-2, "{d}: {a} vs {b}");
            }
        }
        assert_eq!(
            bytes_to_f32(DType::I64, &f32_to_bytes(DType::I64, &[-3.0, 7.0]).unwrap()).unwrap(),
            vec![-3.0, 7.0]
        );
    }
}

#[cfg(test)]
mod f32_copy_tests {
    use super::*;

    #[test]
    fn the_f32_fast_paths_keep_every_bit() {
        let values = [
            0.0f32,
            -0.0,
            1.5,
            -3.25e-38,
            f32::MIN_POSITIVE / 4.0, // subnormal
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(0x7fc0_0001), // a NaN with a payload
        ];
        let bytes = f32_to_bytes(DType::F32, &values).unwrap();
        let want: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(bytes, want);
        let back = bytes_to_f32(DType::F32, &bytes).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
        assert!(bytes_to_f32(DType::F32, &bytes[..5]).is_err());
    }
}
