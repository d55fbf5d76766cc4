//! The `Array` handle, dtypes, construction from host memory, evaluation and
//! read-out, and `ArrayList`.
//!
//! `ffi` is the raw cxx bridge (errors are `cxx::Exception`); the free
//! functions of this module are the safe wrappers whose errors are
//! [`ShimError`]s naming the operation.

use crate::ShimError;
use cxx::UniquePtr;

// cxx does not carry a bridge function's `# Safety` docs to the function
// it generates; `array_copy_to`'s contract is written at its declaration.
#[allow(clippy::missing_safety_doc)]
#[cxx::bridge(namespace = "rlx")]
pub mod ffi {
    /// Element type of an array. Values 0..=11 are the set every backend
    /// supports; `U16`/`U64` exist so that any MLX array's dtype can be
    /// reported.
    #[derive(Debug, Hash)]
    #[repr(u8)]
    enum DType {
        Bool = 0,
        U8 = 1,
        U32 = 2,
        I8 = 3,
        I16 = 4,
        I32 = 5,
        I64 = 6,
        F16 = 7,
        BF16 = 8,
        F32 = 9,
        F64 = 10,
        C64 = 11,
        U16 = 12,
        U64 = 13,
    }

    unsafe extern "C++" {
        include!("rlx-mlx-shim/include/array.h");

        /// One MLX array (a node of MLX's lazy graph). Cheap to clone with
        /// [`array_clone`].
        type Array;
        /// An ordered list of arrays.
        type ArrayList;
        /// A CPU graph's evaluation on the calling thread, recorded once
        /// (`inline_plan`) and run again on new leaves (`run_inline_plan`).
        type InlinePlan;

        /// Makes the CPU MLX's default device. Idempotent; optional (every
        /// shim op names the CPU device itself).
        fn init() -> Result<()>;
        fn default_device_is_cpu() -> bool;
        /// This thread's device for shim ops; errors if MLX has no such
        /// device.
        fn set_thread_device(gpu: bool, index: i32) -> Result<()>;
        fn thread_device_is_gpu() -> bool;
        fn thread_device_index() -> i32;
        /// The GPU backend the loaded libmlx was built with: 0 none, 1
        /// CUDA, 2 Metal (whether or not it sees a device now).
        fn gpu_backend() -> i32;
        /// GPUs MLX can use now (0 for the CPU-only build).
        fn gpu_device_count() -> i32;
        fn device_name(gpu: bool, index: i32) -> Result<String>;
        fn device_memory(gpu: bool, index: i32) -> Result<u64>;

        fn new_array_list() -> Result<UniquePtr<ArrayList>>;
        fn push(self: Pin<&mut ArrayList>, a: &Array) -> Result<()>;
        fn len(self: &ArrayList) -> usize;
        fn get(self: &ArrayList, i: usize) -> Result<UniquePtr<Array>>;
        fn clear(self: Pin<&mut ArrayList>);

        /// Copies `data` (row-major, native endian) into a new array.
        fn array_from_bytes(data: &[u8], shape: &[i32], dtype: DType) -> Result<UniquePtr<Array>>;
        /// Writes `data` into `a`'s buffer when `a` is an evaluated,
        /// row-contiguous array of exactly `data.len()` bytes that no other
        /// handle, view or pending task can see; false (nothing written)
        /// otherwise.
        fn array_overwrite(a: &Array, data: &[u8]) -> Result<bool>;
        /// Wraps caller memory without copying. See
        /// [`super::array_from_borrowed`] for the safety contract.
        fn array_from_borrowed(
            ptr: usize,
            nbytes: usize,
            shape: &[i32],
            dtype: DType,
        ) -> Result<UniquePtr<Array>>;
        /// Whether `array_from_borrowed` really shares the caller's memory
        /// with this MLX build (false for the CPU allocator of MLX 0.32.4,
        /// which copies once at construction).
        fn borrow_is_zero_copy() -> Result<bool>;
        /// A 0-d array holding `v` converted to `dtype`.
        fn scalar_f64(v: f64, dtype: DType) -> Result<UniquePtr<Array>>;
        /// An array of `shape` filled with `v` converted to `dtype`.
        fn full(shape: &[i32], v: f64, dtype: DType) -> Result<UniquePtr<Array>>;
        /// `[start, stop)` with `step`, as `dtype`.
        fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<UniquePtr<Array>>;
        /// A new handle to the same array (refcount copy).
        fn array_clone(a: &Array) -> Result<UniquePtr<Array>>;

        fn array_shape(a: &Array) -> Result<Vec<i32>>;
        /// Element strides of the array's current layout (meaningful after
        /// evaluation).
        fn array_strides(a: &Array) -> Result<Vec<i64>>;
        fn array_dtype(a: &Array) -> DType;
        fn array_size(a: &Array) -> usize;
        fn array_nbytes(a: &Array) -> usize;
        fn array_ndim(a: &Array) -> usize;
        fn array_itemsize(a: &Array) -> usize;
        /// MLX's unique id of the array node.
        fn array_id(a: &Array) -> usize;
        /// The primitives (MLX's op names) of the unevaluated graph that
        /// computes `outs`, one per graph node (shared nodes once),
        /// stopping at the arrays of `stop` and at leaves (evaluated
        /// arrays): what building `outs` from `stop` added, or, with no
        /// `stop`, what evaluating `outs` runs. For diagnostics (the
        /// per-node breakdown, op counts), not for runs.
        fn graph_ops(outs: &ArrayList, stop: &ArrayList) -> Result<Vec<String>>;
        /// Evaluates, then returns the address of the first element.
        fn array_data_ptr(a: &Array) -> Result<usize>;
        /// Evaluates, then returns the address of the first element when
        /// the elements lie row-major and contiguous from there, else 0.
        fn array_row_major_ptr(a: &Array) -> Result<usize>;

        /// Evaluates the array (runs its graph).
        fn eval(a: &Array) -> Result<()>;
        /// Evaluates all arrays of the list together.
        fn eval_list(l: &ArrayList) -> Result<()>;
        /// Evaluates all arrays of the list together, polling for up to
        /// `spin_us` microseconds for them to finish before blocking (0: as
        /// `eval_list`): a small graph's run is not delayed by the wake-up of a
        /// sleeping thread.
        fn eval_list_spinning(l: &ArrayList, spin_us: u32) -> Result<()>;
        /// `eval_list_spinning` of one array, without a list made for it.
        fn eval_spinning(a: &Array, spin_us: u32) -> Result<()>;
        /// Starts evaluating all arrays of the list and returns without
        /// waiting (`mx::async_eval`); a later `eval_list*` of them waits
        /// and reports a failure.
        fn async_eval_list(l: &ArrayList) -> Result<()>;
        /// Whether this thread's last evaluation that computed anything
        /// ran on this thread (the plugin's kernels, float32 arithmetic
        /// and views on the CPU; at most a few of MLX's own ops handed to
        /// MLX in their turn) rather than through MLX's scheduler.
        fn last_eval_inline() -> bool;
        /// Evaluation on the caller's thread on or off for the whole
        /// process (`RLX_MLX_INLINE=0` starts it off): to compare both
        /// ways in one process.
        fn set_eval_inline(on: bool);
        /// Whether evaluation on the calling thread is on (see
        /// `set_eval_inline`).
        fn eval_inline_enabled() -> bool;
        /// Records how to compute `outs` from `leaves` (arrays of the
        /// leaves' shapes and dtypes that `outs` were built from, never
        /// evaluated) on the calling thread, every op one the shim runs
        /// itself. Fails, naming the op, where one is not.
        fn inline_plan(leaves: &ArrayList, outs: &ArrayList) -> Result<UniquePtr<InlinePlan>>;
        /// The plan's outputs computed, on this thread, from `leaves`
        /// (evaluated arrays of the recorded shapes and dtypes, in order).
        fn run_inline_plan(plan: &InlinePlan, leaves: &ArrayList) -> Result<UniquePtr<ArrayList>>;
        /// How many ops the plan runs.
        fn inline_plan_len(plan: &InlinePlan) -> usize;
        /// How many of them MLX's compile could fuse into a kernel or
        /// drop: its elementwise arithmetic, broadcasts and no-op copies
        /// (the plugin's own kernels, concatenations, slices and reshapes
        /// it leaves as they are).
        fn inline_plan_fusable(plan: &InlinePlan) -> usize;
        /// Evaluates and copies the array, row-major and contiguous, into
        /// `out` (whose length must equal `array_nbytes`).
        fn array_copy_into(a: &Array, out: &mut [u8]) -> Result<()>;
        /// As `array_copy_into`, into `len` bytes at `out`, which may be
        /// uninitialised: a caller that allocates only to have them
        /// overwritten need not fill them first.
        ///
        /// # Safety
        /// `out` is valid for writes of `len` bytes.
        unsafe fn array_copy_to(a: &Array, out: *mut u8, len: usize) -> Result<()>;
        /// Evaluates a one-element array and converts its value to f64.
        fn array_item_f64(a: &Array) -> Result<f64>;
    }
}

pub use ffi::{Array, ArrayList, DType, InlinePlan};

// SAFETY: an `Array` is a refcounted handle to an MLX graph node and an
// `ArrayList` a vector of such handles; MLX's refcounts are atomic, so a
// handle may move to another thread. The shim's threading assumption is that
// one graph (and one compiled executable) is used by one thread at a time,
// which is why neither type is `Sync`.
unsafe impl Send for Array {}
unsafe impl Send for ArrayList {}
// SAFETY: a plan is immutable once recorded: its primitives (params of the
// plugin's kernels, MLX's view and arithmetic ops) are only read, and each
// run makes its own arrays, so runs may proceed on several threads at once.
unsafe impl Send for InlinePlan {}
unsafe impl Sync for InlinePlan {}

impl DType {
    /// Size of one element in bytes.
    pub fn size_of(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            _ => 0,
        }
    }

    /// Short lower-case name (`"f32"`, `"bf16"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            _ => "unknown",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Rust element types that map one-to-one onto a [`DType`].
pub trait Element: Copy + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: DType = DType::$d; })*
    };
}

element! {
    bool => Bool, u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64,
}

fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: every `Element` is a plain-old-data type without padding
    // (bool is one byte holding 0 or 1), so its bytes may be read as u8.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

impl Array {
    /// Copies a typed slice into a new array of the matching dtype.
    pub fn from_slice<T: Element>(
        data: &[T],
        shape: &[i32],
    ) -> Result<UniquePtr<Array>, ShimError> {
        array_from_bytes(as_bytes(data), shape, T::DTYPE)
    }

    pub fn shape(&self) -> Vec<i32> {
        array_shape(self)
    }

    pub fn dtype(&self) -> DType {
        ffi::array_dtype(self)
    }

    pub fn size(&self) -> usize {
        ffi::array_size(self)
    }

    pub fn ndim(&self) -> usize {
        ffi::array_ndim(self)
    }

    pub fn nbytes(&self) -> usize {
        ffi::array_nbytes(self)
    }

    /// A new handle to the same array.
    pub fn clone_handle(&self) -> UniquePtr<Array> {
        array_clone(self)
    }

    pub fn eval(&self) -> Result<(), ShimError> {
        eval(self)
    }

    /// Evaluates and returns the contents, row-major.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ShimError> {
        array_to_bytes(self)
    }

    /// Evaluates and returns the contents as `T`, which must match the
    /// array's dtype exactly.
    pub fn to_vec<T: Element + Default>(&self) -> Result<Vec<T>, ShimError> {
        if self.dtype() != T::DTYPE {
            return Err(ShimError::new(
                "to_vec",
                format!("array has dtype {}, requested {}", self.dtype(), T::DTYPE),
            ));
        }
        let n = self.size();
        let mut out: Vec<T> = Vec::new();
        out.try_reserve_exact(n).map_err(|_| {
            ShimError::new(
                "to_vec",
                format!("cannot allocate {n} elements for the result"),
            )
        })?;
        // SAFETY: `out` has room for `n` aligned elements of `T`; the shim
        // writes all their bytes (the array's, row-major) or fails, and the
        // length is set only then; every byte pattern MLX writes is a valid
        // `T` (bools are 0/1 in MLX).
        unsafe {
            ffi::array_copy_to(self, out.as_mut_ptr().cast(), n * std::mem::size_of::<T>())
                .map_err(|e| ShimError::new("to_vec", e))?;
            out.set_len(n);
        }
        Ok(out)
    }

    /// Evaluates a one-element array and converts its value to f64.
    pub fn item_f64(&self) -> Result<f64, ShimError> {
        ffi::array_item_f64(self).map_err(|e| ShimError::new("item", e))
    }
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Array(shape={:?}, dtype={})", self.shape(), self.dtype())
    }
}

impl ArrayList {
    /// A new list holding handles to `arrays`.
    pub fn from_arrays<'a, I>(arrays: I) -> UniquePtr<ArrayList>
    where
        I: IntoIterator<Item = &'a Array>,
    {
        let mut l = new_array_list();
        for a in arrays {
            l.pin_mut()
                .push(a)
                .unwrap_or_else(|e| allocation_failed("ArrayList::push", e));
        }
        l
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Handles to all elements.
    pub fn to_vec(&self) -> Vec<UniquePtr<Array>> {
        (0..self.len())
            .map(|i| self.get(i).expect("index in range"))
            .collect()
    }
}

impl std::fmt::Debug for ArrayList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.to_vec().iter().map(|a| &**a))
            .finish()
    }
}

// The safe wrappers of `ffi`'s functions, generated from the bridge above
// by build.rs (`build/wrappers.rs`): same name, arguments and docs, errors
// as `ShimError`s naming the op.
include!(concat!(env!("OUT_DIR"), "/array_wrappers.rs"));

/// Wraps `nbytes` bytes of caller memory at address `ptr` as an array of
/// `shape`/`dtype` through MLX's raw-pointer constructor with a do-nothing
/// deleter, which adopts the memory WITHOUT copying where MLX's allocator can
/// (e.g. Metal's unified memory). MLX 0.32.4's CPU allocator cannot adopt
/// foreign memory, so there the constructor copies the bytes once, during
/// this call; [`borrow_is_zero_copy`] tells which case applies.
///
/// # Safety
/// The caller guarantees that the buffer is valid for reads of `nbytes`
/// bytes, suitably aligned for `dtype`, not mutated while any array built
/// from it (directly or through ops) may still read it, and that it outlives
/// every such array, including arrays captured by compiled functions. MLX
/// never writes into a borrowed buffer (it is not "owned", so never donated).
pub unsafe fn array_from_borrowed(
    ptr: usize,
    nbytes: usize,
    shape: &[i32],
    dtype: DType,
) -> Result<UniquePtr<Array>, ShimError> {
    ffi::array_from_borrowed(ptr, nbytes, shape, dtype)
        .map_err(|e| ShimError::new("array_from_borrowed", e))
}

/// Evaluates `a` and returns its contents row-major (contiguous copy of a
/// strided/broadcast array).
pub fn array_to_bytes(a: &Array) -> Result<Vec<u8>, ShimError> {
    // Fallible: a failed `vec!` would abort the process.
    let n = a.nbytes();
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| {
        ShimError::new(
            "array_to_bytes",
            format!("cannot allocate {n} bytes for the result"),
        )
    })?;
    // Written into the spare capacity, unfilled: zero-filling a 4 MiB
    // result first cost more than the copy from a GPU itself.
    // SAFETY: `out` has room for `n` bytes; the shim writes all `n` (the
    // array's bytes, row-major) or fails, and the length is set only then.
    unsafe {
        ffi::array_copy_to(a, out.as_mut_ptr(), n)
            .map_err(|e| ShimError::new("array_to_bytes", e))?;
        out.set_len(n);
    }
    Ok(out)
}

/// A new, empty list.
pub fn new_array_list() -> UniquePtr<ArrayList> {
    ffi::new_array_list().unwrap_or_else(|e| allocation_failed("new_array_list", e))
}

// These allocate only a handle or a few integers, so the one failure is a
// C++ allocation failure. The bridge catches it (it would otherwise abort
// inside a noexcept call); it becomes a panic here, which the plugin's
// exported functions turn into a PANIC status.
#[cold]
fn allocation_failed(what: &str, e: cxx::Exception) -> ! {
    panic!("MLX shim: {what} failed: {e}")
}

pub fn array_clone(a: &Array) -> UniquePtr<Array> {
    ffi::array_clone(a).unwrap_or_else(|e| allocation_failed("array_clone", e))
}
pub fn array_shape(a: &Array) -> Vec<i32> {
    ffi::array_shape(a).unwrap_or_else(|e| allocation_failed("array_shape", e))
}
pub fn array_strides(a: &Array) -> Vec<i64> {
    ffi::array_strides(a).unwrap_or_else(|e| allocation_failed("array_strides", e))
}
pub fn array_dtype(a: &Array) -> DType {
    ffi::array_dtype(a)
}
pub fn array_size(a: &Array) -> usize {
    ffi::array_size(a)
}
pub fn array_nbytes(a: &Array) -> usize {
    ffi::array_nbytes(a)
}
pub fn array_ndim(a: &Array) -> usize {
    ffi::array_ndim(a)
}
pub fn array_itemsize(a: &Array) -> usize {
    ffi::array_itemsize(a)
}
pub fn array_id(a: &Array) -> usize {
    ffi::array_id(a)
}
pub fn default_device_is_cpu() -> bool {
    ffi::default_device_is_cpu()
}

pub use ffi::{
    eval_inline_enabled, gpu_backend, gpu_device_count, inline_plan_fusable, inline_plan_len,
    last_eval_inline, set_eval_inline, thread_device_index, thread_device_is_gpu,
};

/// A device shim ops can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    pub gpu: bool,
    pub index: i32,
}

impl Device {
    pub const CPU: Device = Device {
        gpu: false,
        index: 0,
    };

    /// This thread's device now.
    pub fn current() -> Device {
        Device {
            gpu: ffi::thread_device_is_gpu(),
            index: ffi::thread_device_index(),
        }
    }

    /// MLX's name for it ("cpu" for the CPU).
    pub fn name(self) -> Result<String, crate::ShimError> {
        ffi::device_name(self.gpu, self.index).map_err(|e| crate::ShimError::new("device_name", e))
    }

    /// Total memory in bytes, 0 when MLX does not say.
    pub fn memory(self) -> Result<u64, crate::ShimError> {
        ffi::device_memory(self.gpu, self.index)
            .map_err(|e| crate::ShimError::new("device_memory", e))
    }
}

/// Runs this thread's shim ops on `device` until dropped, then restores the
/// device it found (so guards nest).
pub struct DeviceGuard {
    previous: Device,
}

impl DeviceGuard {
    pub fn set(device: Device) -> Result<DeviceGuard, crate::ShimError> {
        let previous = Device::current();
        ffi::set_thread_device(device.gpu, device.index)
            .map_err(|e| crate::ShimError::new("set_thread_device", e))?;
        Ok(DeviceGuard { previous })
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        // The previous device was valid when it was set.
        let _ = ffi::set_thread_device(self.previous.gpu, self.previous.index);
    }
}
