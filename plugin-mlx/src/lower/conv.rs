//! Convolution, pooling and resizing.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
