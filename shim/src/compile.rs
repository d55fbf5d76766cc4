//! `mx::compile` of a Rust closure.
//!
//! The closure receives the (traced) inputs as an [`ArrayList`] and returns
//! the outputs; it must only build graph with the shim's ops (no `eval`
//! or read-out: MLX forbids evaluation while tracing). An `Err` returned by
//! the closure, or a panic in it, becomes a C++ exception thrown inside the
//! traced function, so it comes out of the compiled call as an `Err`.

use crate::array::{Array, ArrayList};
use crate::ShimError;
use cxx::UniquePtr;
use std::panic::{catch_unwind, AssertUnwindSafe};

#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    extern "Rust" {
        /// A boxed Rust closure traced by `mx::compile`.
        type GraphFn;
        /// Called by C++ (from inside MLX's tracer) to run the closure.
        fn call_graph_fn(f: &GraphFn, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>>;
    }

    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/compile.h");

        type ArrayList = crate::array::ffi::ArrayList;
        /// The compiled function (owns the closure).
        type CompiledFn;

        fn compile_fn(f: Box<GraphFn>, shapeless: bool) -> Result<UniquePtr<CompiledFn>>;
        fn compiled_call(f: &CompiledFn, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>>;
        /// Runs the closure without compilation.
        fn uncompiled_call(f: &CompiledFn, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>>;
    }
}

pub use ffi::CompiledFn;

// SAFETY: a CompiledFn owns a std::function over a `Send` Rust closure and
// MLX's compile-cache key; moving it between threads is fine. It is not
// `Sync`: one compiled function is called by one thread at a time
// ([`Compiled`] takes a lock around every call).
unsafe impl Send for CompiledFn {}

/// Signature of a closure that can be compiled.
pub type GraphClosure = dyn Fn(&ArrayList) -> Result<UniquePtr<ArrayList>, String> + Send;

/// A Rust closure handed to C++.
pub struct GraphFn(Box<GraphClosure>);

impl GraphFn {
    pub fn new(
        f: impl Fn(&ArrayList) -> Result<UniquePtr<ArrayList>, String> + Send + 'static,
    ) -> Box<GraphFn> {
        Box::new(GraphFn(Box::new(f)))
    }
}

/// Runs the closure for C++. Panics are caught here: they must not unwind
/// into C++.
pub fn call_graph_fn(f: &GraphFn, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>, String> {
    match catch_unwind(AssertUnwindSafe(|| (f.0)(inputs))) {
        Ok(Ok(out)) if out.is_null() => Err("compiled closure returned a null ArrayList".into()),
        Ok(result) => result,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            Err(format!("panic in compiled closure: {msg}"))
        }
    }
}

/// A compiled function; call it with [`Compiled::call`]. Calls take a
/// lock, one at a time, so that executables running one program (clones)
/// can share it from several threads: MLX keeps a function's traces per
/// thread, so each thread traces it once and later calls replay.
pub struct Compiled {
    inner: UniquePtr<CompiledFn>,
    calls: std::sync::Mutex<()>,
}

// SAFETY: every use of `inner` (`call`, `call_uncompiled`, `raw`'s callers
// through them) holds `calls`, so the `!Sync` CompiledFn is used by one
// thread at a time.
unsafe impl Sync for Compiled {}

impl Compiled {
    /// Runs the compiled function (tracing it on the first call and
    /// whenever input shapes/dtypes change, unless shapeless).
    pub fn call(&self, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>, ShimError> {
        let _one = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        ffi::compiled_call(&self.inner, inputs).map_err(|e| ShimError::new("compiled_call", e))
    }

    /// [`Compiled::call`] on a slice of arrays, returning the outputs as a
    /// vector.
    pub fn call_arrays(&self, inputs: &[&Array]) -> Result<Vec<UniquePtr<Array>>, ShimError> {
        let list = ArrayList::from_arrays(inputs.iter().copied());
        Ok(self.call(&list)?.to_vec())
    }

    /// Runs the closure directly, without compilation.
    pub fn call_uncompiled(&self, inputs: &ArrayList) -> Result<UniquePtr<ArrayList>, ShimError> {
        let _one = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        ffi::uncompiled_call(&self.inner, inputs).map_err(|e| ShimError::new("uncompiled_call", e))
    }
}

/// Compiles `f` with `mx::compile` (shape-specialised).
pub fn compile(
    f: impl Fn(&ArrayList) -> Result<UniquePtr<ArrayList>, String> + Send + 'static,
) -> Result<Compiled, ShimError> {
    compile_with(f, false)
}

/// Compiles `f`; with `shapeless`, one trace serves all input shapes.
pub fn compile_with(
    f: impl Fn(&ArrayList) -> Result<UniquePtr<ArrayList>, String> + Send + 'static,
    shapeless: bool,
) -> Result<Compiled, ShimError> {
    let inner =
        ffi::compile_fn(GraphFn::new(f), shapeless).map_err(|e| ShimError::new("compile", e))?;
    Ok(Compiled {
        inner,
        calls: std::sync::Mutex::new(()),
    })
}
