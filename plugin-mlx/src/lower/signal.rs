//! Signal ops: Fft, LogMel, LogMelBackward, WelchPeaks.

use super::Lowering;

pub fn entries() -> Vec<Lowering> {
    vec![]
}
