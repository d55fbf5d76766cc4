//! Random numbers and sampling: RngNormal, RngUniform, Sample.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
