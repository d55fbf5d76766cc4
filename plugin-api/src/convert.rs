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
    let it = data.chunks_exact(es);
    Ok(match dtype {
        DType::F32 => it
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
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

/// Encode f32 values as little-endian elements of `dtype` (rounding to
/// nearest for narrower floats, truncating toward zero for integers).
pub fn f32_to_bytes(dtype: DType, values: &[f32]) -> PluginResult<Vec<u8>> {
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
