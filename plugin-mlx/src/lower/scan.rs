//! Ordering, selection and scans: Reverse, Cumsum, ArgMax/ArgMin, TopK,
//! StopGradient, and DotGeneral.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
