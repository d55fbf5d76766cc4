//! A Rust function as an MLX primitive (`src/host_kernel.cc` says why):
//! the plugin runs kernels registered by its host inside MLX's graph.

use crate::array::{Array, ArrayList, DType};
use cxx::UniquePtr;

/// What a host-kernel node runs: given the inputs' data (row-contiguous,
/// as `(address, bytes)`) and the zeroed output buffer, compute the output.
/// It must not unwind; a failure is recorded by the closure itself (the
/// plugin reads it after evaluation).
pub struct HostCall {
    run: Box<HostFn>,
}

/// `(inputs as (address, bytes), output as (address, bytes))`.
type HostFn = dyn Fn(&[(usize, usize)], (usize, usize)) + Send + Sync;

impl HostCall {
    pub fn new(run: impl Fn(&[(usize, usize)], (usize, usize)) + Send + Sync + 'static) -> Self {
        HostCall { run: Box::new(run) }
    }
}

fn host_call_run(call: &HostCall, inputs: &[usize], lens: &[usize], output: usize, len: usize) {
    let ins: Vec<(usize, usize)> = inputs.iter().copied().zip(lens.iter().copied()).collect();
    // Nothing may unwind into C++: a panic that escaped the closure is
    // dropped here (the closure records its own failures).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (call.run)(&ins, (output, len))
    }));
}

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    extern "Rust" {
        type HostCall;
        fn host_call_run(
            call: &HostCall,
            inputs: &[usize],
            lens: &[usize],
            output: usize,
            len: usize,
        );
    }
    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/host_kernel.h");

        type Array = crate::array::ffi::Array;
        type ArrayList = crate::array::ffi::ArrayList;
        type DType = crate::array::ffi::DType;

        /// A node running `call` on `inputs`, on the CPU stream.
        fn host_kernel_node(
            inputs: &ArrayList,
            call: Box<HostCall>,
            shape: &[i32],
            dtype: DType,
        ) -> Result<UniquePtr<Array>>;
    }
}

/// A node of this shape and dtype computed by `call` from `inputs`.
pub fn host_kernel_node(
    inputs: &[&Array],
    call: HostCall,
    shape: &[i32],
    dtype: DType,
) -> Result<UniquePtr<Array>, crate::ShimError> {
    let list = ArrayList::from_arrays(inputs.iter().copied());
    ffi::host_kernel_node(&list, Box::new(call), shape, dtype)
        .map_err(|e| crate::ShimError::new("host_kernel", e))
}
