//! Fused regions: ElementwiseRegion, TransformRegion, BatchElementwiseRegion.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
