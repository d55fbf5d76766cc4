//! Indexing: ScatterAdd, ScatterNd, ScatterElements, GatherNd, GatherElements.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
