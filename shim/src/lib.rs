//! `rlx-mlx-shim`: a hand-written C++20 shim over Apple MLX's C++ API
//! (MLX 0.32.4), bridged to Rust with `cxx`. It knows MLX only: it must
//! not depend on rlx's crates or on the plugin ABI (the plugin maps graphs
//! onto it).
//!
//! One cxx bridge per area, each in its module as `ffi` (raw; errors are
//! `cxx::Exception`), plus safe wrappers of the same names whose errors are
//! [`ShimError`]s naming the MLX op. Each function is declared once in Rust,
//! in its bridge, and defined once in C++ (`include/`); build.rs generates
//! the plain wrappers from the bridges (`build/wrappers.rs`), and a module
//! writes by hand only those with more to do:
//!
//! * [`array`](mod@array)  - the [`Array`] handle, [`DType`], construction from host
//!   bytes (copied or borrowed), evaluation, read-out, [`ArrayList`];
//! * [`ops`]    - `mlx::core` ops;
//! * [`fast`]   - `mlx::core::fast` (rms_norm, layer_norm, rope, sdpa);
//! * [`compile`](mod@compile) - `mx::compile` of a Rust closure;
//! * [`random`], [`linalg`], [`fft`];
//! * [`info`]   - MLX version, the loaded BLAS/LAPACK, memory counters;
//! * [`kernels`] - the plugin's own CPU kernels as MLX primitives;
//! * [`fusion`] - a region of elementwise steps as one MLX `Compiled` primitive;
//! * [`host_kernel`] - a Rust function (a host's kernel) as an MLX primitive;
//! * [`distributed`] - MLX's process group and collectives.
//!
//! Every function that can reach MLX returns `Result`: a C++ exception never
//! escapes, it becomes an error carrying MLX's own `what()` text.
//!
//! All ops run on the CPU device (the `mlx-cpu` wheel has no other); the
//! shim also makes the CPU MLX's default device when it is loaded, so
//! calling [`init`] is optional.
//!
//! # Threading
//! [`Array`], [`ArrayList`] and [`compile::Compiled`] are `Send` but not
//! `Sync`: MLX arrays are refcounted graph nodes (atomic refcounts), and the
//! assumption is that one graph / one compiled executable is used by one
//! thread at a time.

use std::fmt;

pub mod array;
pub mod compile;
pub mod cuda_kernels;
pub mod distributed;
pub mod fast;
pub mod fft;
pub mod fusion;
pub mod host_kernel;
pub mod host_memory;
pub mod info;
pub mod kernels;
pub mod linalg;
pub mod ops;
pub mod random;

pub use array::{Array, ArrayList, DType, Element};
pub use compile::{compile, Compiled};
pub use cxx::UniquePtr;
pub use info::{blas_library_path, mlx_version};

/// The MLX version this crate is built against.
pub const MLX_VERSION: &str = "0.32.4";

/// Makes the CPU MLX's default device (idempotent; optional).
pub fn init() -> Result<(), ShimError> {
    array::init()
}

/// An error from MLX (or from the shim's own argument checks), naming the
/// operation that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShimError {
    /// The operation, e.g. `"matmul"`, `"rms_norm"`, `"linalg::solve"`.
    pub op: String,
    /// The C++ exception's `what()` (MLX's own message).
    pub message: String,
}

impl ShimError {
    pub fn new(op: impl Into<String>, message: impl fmt::Display) -> Self {
        ShimError {
            op: op.into(),
            message: message.to_string(),
        }
    }
}

impl fmt::Display for ShimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MLX {} failed: {}", self.op, self.message)
    }
}

impl std::error::Error for ShimError {}

impl From<ShimError> for String {
    fn from(e: ShimError) -> String {
        e.to_string()
    }
}

/// `result.op("name")` turns a raw `cxx::Exception` result into a
/// [`ShimError`] naming the op.
pub trait ResultExt<T> {
    fn op(self, op: &str) -> Result<T, ShimError>;
}

impl<T> ResultExt<T> for Result<T, cxx::Exception> {
    fn op(self, op: &str) -> Result<T, ShimError> {
        self.map_err(|e| ShimError::new(op, e))
    }
}
