//! Several elementwise outputs as one MLX `Compiled` primitive
//! (`src/fusion.cc` says why MLX's own fuser would split them).

use crate::array::ArrayList;
use crate::ShimError;
use cxx::UniquePtr;

#[cxx::bridge(namespace = "rlx")]
mod ffi {
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/fusion.h");

        type ArrayList = crate::array::ffi::ArrayList;

        fn fuse_elementwise(
            inputs: &ArrayList,
            constant: &[u8],
            steps: &[u32],
            outputs: &[u32],
            shape: &[i32],
        ) -> Result<UniquePtr<ArrayList>>;
    }
}

/// One step of a region: an MLX elementwise primitive over operands, each
/// an input (`0..inputs`) or an earlier step (`inputs + k`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Add(u32, u32),
    Subtract(u32, u32),
    Multiply(u32, u32),
    Divide(u32, u32),
    Sqrt(u32),
    Negative(u32),
}

impl Step {
    /// `[code, a, b]`, the codes of `src/fusion.cc`.
    fn encode(self) -> [u32; 3] {
        match self {
            Step::Add(a, b) => [0, a, b],
            Step::Subtract(a, b) => [1, a, b],
            Step::Multiply(a, b) => [2, a, b],
            Step::Divide(a, b) => [3, a, b],
            Step::Sqrt(a) => [4, a, 0],
            Step::Negative(a) => [5, a, 0],
        }
    }
}

/// The region's values `outputs` (indices of `steps`) as one primitive.
/// Every input is float32, of `shape` or a single element; `constant[i]`
/// lets MLX write input `i` into the kernel's source (when it holds its
/// value already). The outputs are float32 arrays of `shape`.
pub fn fuse_elementwise(
    inputs: &ArrayList,
    constant: &[bool],
    steps: &[Step],
    outputs: &[u32],
    shape: &[i32],
) -> Result<UniquePtr<ArrayList>, ShimError> {
    let constant: Vec<u8> = constant.iter().map(|&c| c as u8).collect();
    let codes: Vec<u32> = steps.iter().flat_map(|s| s.encode()).collect();
    ffi::fuse_elementwise(inputs, &constant, &codes, outputs, shape)
        .map_err(|e| ShimError::new("fuse_elementwise", e))
}
