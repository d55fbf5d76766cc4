//! The lowerings: rlx-ir op kind → MLX computation. Each is data: one
//! [`Lowering`] per op kind, in one file per op family, which
//! `crate::table` gathers into the lowering table.
//!
//! A lowering receives the node (its op, its declared output shape and
//! dtype) and its input arrays, and returns one MLX array. The executable
//! checks the result against the node's declared shape and casts it to the
//! declared dtype, so a lowering can never silently return a wrong shape.

pub mod attention;
pub mod contract;
pub mod control;
pub mod conv;
pub mod custom_scope;
pub mod double_single;
pub mod elementwise;
pub mod fused;
pub mod grouped;
pub mod host_kernel;
pub mod index;
pub mod io;
pub mod linalg;
pub mod norm;
pub mod number_format;
pub mod order;
pub mod param_writes;
pub mod pocketfft;
pub mod quant;
pub mod random;
pub mod recurrent;
pub mod reduce;
pub mod region;
pub mod scan_fused;
pub mod shape;
pub mod signal;
pub mod solve;
pub mod splat;
pub mod ssm;
pub mod train_act;
pub mod train_conv;
pub mod train_norm;

use rlx_ir::{DType as IrDType, Dim, Graph, Node, NodeId, OpKind};
use rlx_mlx_shim::{Array, DType as MxDType, ShimError, UniquePtr};
use rlx_plugin_api::Strategy;

/// An owned MLX array.
pub type A = UniquePtr<Array>;

/// Why a lowering failed; the executable adds the node's context.
#[derive(Debug, Clone)]
pub struct LowerError(pub String);

impl From<ShimError> for LowerError {
    fn from(e: ShimError) -> Self {
        LowerError(e.to_string())
    }
}

impl From<String> for LowerError {
    fn from(e: String) -> Self {
        LowerError(e)
    }
}

impl From<&str> for LowerError {
    fn from(e: &str) -> Self {
        LowerError(e.to_string())
    }
}

pub type LResult<T = A> = Result<T, LowerError>;

/// A size, index or axis as the `int32` MLX takes, checked: never a
/// wrapped value. The graph's own integers are bounded once, before any
/// lowering ([`crate::bounds`]); what a lowering derives from them (a
/// product, a sum) may still not fit, and is refused here. The one way a
/// lowering turns an integer into MLX's `int32` (`as i32` is not used in
/// `lower/`: `tests/tests/source_rules.rs`).
pub(crate) trait I32: Copy + std::fmt::Display + TryInto<i32> {
    fn i32(self) -> LResult<i32> {
        self.try_into()
            .map_err(|_| LowerError(format!("{self} is past the int32 range MLX takes")))
    }
}

impl I32 for usize {}
impl I32 for u64 {}
impl I32 for i64 {}
impl I32 for u32 {}
impl I32 for u8 {}
impl I32 for i32 {}
impl I32 for i128 {}

/// Whether the shim's own CPU kernels take these operands: every one is
/// float32 and this thread builds for the CPU (the GPU, and other dtypes,
/// keep MLX's ops).
pub(crate) fn cpu_f32(operands: &[&Array]) -> bool {
    operands.iter().all(|a| a.dtype() == MxDType::F32)
        && !rlx_mlx_shim::array::thread_device_is_gpu()
}

/// Whether the shim's own CUDA kernels (`rlx_mlx_shim::cuda_kernels`) take
/// these operands: this thread builds for the GPU of a CUDA build of MLX,
/// every operand is float32, float16 or bfloat16, and
/// `RLX_MLX_CUDA_COMPOSITES` (read once per process) does not ask for
/// MLX's composites instead. Callers also keep them to steps of one row
/// ([`one_row`]): each kernel is compiled for its sizes.
pub(crate) fn cuda_kernels(operands: &[&Array]) -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(|| {
        rlx_mlx_shim::array::gpu_backend() == 1
            && !rlx_plugin_api::setting_flag("RLX_MLX_CUDA_COMPOSITES")
    });
    on && rlx_mlx_shim::array::thread_device_is_gpu()
        && operands
            .iter()
            .all(|a| matches!(a.dtype(), MxDType::F32 | MxDType::F16 | MxDType::BF16))
}

/// Whether `x` (`[..., rows, features]`) holds one row: a decode step's
/// shapes, the same every step (a prompt's change with its length).
pub(crate) fn one_row(x: &Array) -> bool {
    let d = x.shape();
    d.len() >= 2 && d[d.len() - 2] == 1
}

/// While the returned guard lives, this thread's MLX ops go to the CPU when
/// it was building for a GPU, for the steps only the CPU has: float64
/// (MLX's GPU backends have none: every node with float64 values, which
/// the executable takes it for, and a lowering that computes in float64
/// inside a node whose own values are not), and the plugin's own CPU
/// kernels a GPU graph needs (Fma's single rounding).
pub fn cpu_steps() -> LResult<Option<rlx_mlx_shim::array::DeviceGuard>> {
    use rlx_mlx_shim::array::{thread_device_is_gpu, Device, DeviceGuard};
    if !thread_device_is_gpu() {
        return Ok(None);
    }
    Ok(Some(DeviceGuard::set(Device::CPU)?))
}

/// How a graph is being built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eval {
    /// Build every node once, on placeholder values, computing nothing:
    /// the compile-time check. Loops build their bodies once.
    Check,
    /// Build the whole graph; the caller evaluates its outputs.
    Lazy,
    /// Evaluate each node as soon as it is built, so an error names it.
    Eager,
}

/// Builds a nested graph (a loop's body, a composite's) in the
/// environment of the node `Ctx` describes, its Inputs and Params from
/// `leaf`: the executable's evaluator, handed down with each node so that
/// the lowerings that hold bodies do not depend on the executable that
/// calls them.
pub type NestedFn = fn(
    &Ctx,
    &Graph,
    &dyn Fn(NodeId) -> rlx_plugin_api::PluginResult<A>,
) -> rlx_plugin_api::PluginResult<Vec<A>>;

/// What a lowering knows about the node it lowers.
pub struct Ctx<'a> {
    pub graph: &'a Graph,
    pub node: &'a Node,
    /// The RNG policy and global seed this graph was compiled with.
    pub rng: rlx_ir::RngOptions,
    /// The custom ops the executable resolved at compile.
    pub custom: &'a custom_scope::CustomScope,
    /// How the graph is being built (a check, lazily, eagerly): what a
    /// nested body is built with, and whether a loop may run.
    pub how: Eval,
    /// Where an op records values to write back into params.
    pub writes: &'a param_writes::ParamWrites,
    /// See [`NestedFn`].
    pub nested: NestedFn,
    /// What this build derived once for several nodes.
    pub memo: &'a Memo,
}

/// Values one build derives once and several nodes read (the clamped start
/// of every cache write at one position), by the node they come from and
/// what was derived from it. One per build of one graph: node ids name
/// values of that graph only.
#[derive(Default)]
pub struct Memo(std::cell::RefCell<std::collections::HashMap<(NodeId, &'static str, i64), A>>);

impl Memo {
    /// The value `what` (with `key`) derived from node `from`, made by
    /// `make` the first time this build asks for it.
    pub fn get_or(
        &self,
        from: NodeId,
        what: &'static str,
        key: i64,
        make: impl FnOnce() -> LResult,
    ) -> LResult {
        if let Some(v) = self.0.borrow().get(&(from, what, key)) {
            return Ok(v.clone_handle());
        }
        let v = make()?;
        self.0
            .borrow_mut()
            .insert((from, what, key), v.clone_handle());
        Ok(v)
    }
}

impl<'a> Ctx<'a> {
    /// Build `body` as this node's nested graph, in this node's
    /// environment (the RNG policy, custom ops, mode and param writes).
    pub fn evaluate(
        &self,
        body: &Graph,
        leaf: &dyn Fn(NodeId) -> rlx_plugin_api::PluginResult<A>,
    ) -> rlx_plugin_api::PluginResult<Vec<A>> {
        (self.nested)(self, body, leaf)
    }
    /// The declared output dims.
    pub fn out_dims(&self) -> Vec<i32> {
        static_dims(self.node.shape.dims())
    }
    pub fn out_ir_dtype(&self) -> IrDType {
        self.node.shape.dtype()
    }
    pub fn out_dtype(&self) -> MxDType {
        crate::dtype::ir_to_mx(self.out_ir_dtype()).expect("checked at compile")
    }
    /// Declared dims of input `i`.
    pub fn in_dims(&self, i: usize) -> Vec<i32> {
        static_dims(self.graph.shape(self.input(i)).dims())
    }
    pub fn in_dtype(&self, i: usize) -> IrDType {
        self.graph.shape(self.input(i)).dtype()
    }
    pub fn input(&self, i: usize) -> NodeId {
        self.node.inputs[i]
    }
    /// Whether input `i` is a constant of all-zero bytes (+0.0 for floats):
    /// a shift a lowering may leave out where the sign of a zero result
    /// does not matter.
    pub fn input_is_zeros(&self, i: usize) -> bool {
        matches!(
            &self.graph.node(self.input(i)).op,
            rlx_ir::Op::Constant { data } if data.iter().all(|b| *b == 0)
        )
    }
    /// A scalar of the output dtype.
    pub fn scalar(&self, v: f64) -> LResult {
        scalar(v, self.out_dtype())
    }
}

/// A 0-d array.
pub fn scalar(v: f64, dtype: MxDType) -> LResult {
    Ok(rlx_mlx_shim::array::full(&[], v, dtype)?)
}

/// `a` as float32.
pub fn to_f32(a: &Array) -> LResult {
    Ok(rlx_mlx_shim::ops::astype(a, MxDType::F32)?)
}

/// `x [..., k]` as float32 `[m, k]`.
pub fn rows_of(x: &Array, k: i32) -> LResult {
    Ok(rlx_mlx_shim::ops::reshape(&*to_f32(x)?, &[-1, k])?)
}

/// How many elements `dims` hold.
pub fn numel(dims: &[i32]) -> i64 {
    // Saturating: i64::MAX is no array's size, so a product past it never
    // compares equal to one.
    dims.iter()
        .try_fold(1i64, |n, &d| n.checked_mul(i64::from(d)))
        .unwrap_or(i64::MAX)
}

/// Dims as MLX wants them (shapes are static: checked at compile).
pub fn static_dims(d: &[Dim]) -> Vec<i32> {
    d.iter()
        .map(|d| match d {
            // Bounded before any lowering (`crate::bounds`): a dimension
            // past int32 never gets here; were it to, MLX would refuse
            // i32::MAX as a shape rather than read a wrapped one.
            Dim::Static(n) => i32::try_from(*n).unwrap_or(i32::MAX),
            Dim::Dynamic(_) => -1,
        })
        .collect()
}

/// Normalise a possibly negative axis against `rank`.
pub fn axis(a: i64, rank: usize) -> LResult<i32> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    if n < 0 || n >= r.max(1) {
        return Err(format!("axis {a} is out of range for rank {rank}").into());
    }
    n.i32()
}

/// Check the number of inputs.
pub fn arity(args: &[&Array], n: usize, op: &str) -> LResult<()> {
    if args.len() != n {
        return Err(format!("{op} takes {n} inputs, got {}", args.len()).into());
    }
    Ok(())
}

pub type LowerFn = fn(&Ctx, &[&Array]) -> LResult;

/// One row of the lowering table.
pub struct Lowering {
    pub op_kind: OpKind,
    pub dtypes: &'static [IrDType],
    pub strategy: Strategy,
    pub note: &'static str,
    /// None for graph leaves (Input, Param), which the executable binds.
    pub lower: Option<LowerFn>,
}

impl Lowering {
    pub fn name(&self) -> String {
        format!("{:?}", self.op_kind)
    }
}

/// `op_fields!(cx, Variant { field, other: renamed, .. })`: bind the
/// fields of the node's op, which the table guarantees is that variant (it
/// dispatches by kind); any other op is an error naming both, never a
/// panic.
#[macro_export]
macro_rules! op_fields {
    ($cx:expr, $variant:ident { $($fields:tt)* }) => {
        let rlx_ir::Op::$variant { $($fields)* } = &$cx.node.op else {
            return Err($crate::lower::wrong_op(stringify!($variant), $cx));
        };
    };
    ($cx:expr, $variant:ident ( $($fields:tt)* )) => {
        let rlx_ir::Op::$variant ( $($fields)* ) = &$cx.node.op else {
            return Err($crate::lower::wrong_op(stringify!($variant), $cx));
        };
    };
}

/// The error of a lowering handed another op than its own.
pub fn wrong_op(want: &str, cx: &Ctx) -> LowerError {
    LowerError(format!(
        "the {want} lowering was given a {:?} node",
        cx.node.op.kind()
    ))
}

/// `row!(Kind, dtypes, Native|Composite|HostEvaluated, "note", fn)`.
#[macro_export]
macro_rules! row {
    ($kind:ident, $dtypes:expr, $strategy:ident, $note:expr, leaf) => {
        $crate::lower::Lowering {
            op_kind: rlx_ir::OpKind::$kind,
            dtypes: $dtypes,
            strategy: rlx_plugin_api::Strategy::$strategy,
            note: $note,
            lower: None,
        }
    };
    ($kind:ident, $dtypes:expr, $strategy:ident, $note:expr, $f:expr) => {
        $crate::lower::Lowering {
            op_kind: rlx_ir::OpKind::$kind,
            dtypes: $dtypes,
            strategy: rlx_plugin_api::Strategy::$strategy,
            note: $note,
            lower: Some($f),
        }
    };
}
