//! Quantized, grouped and low-rank matmuls: GroupedMatMul,
//! DequantGroupedMatMul, DequantMoEWeights, LoraMatMul, DequantMatMul.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
