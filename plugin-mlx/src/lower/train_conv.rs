//! (being written)

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
