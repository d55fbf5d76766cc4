//! Linear solves: DenseSolve, BatchedDenseSolve.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
