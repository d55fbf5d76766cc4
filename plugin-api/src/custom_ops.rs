//! The custom-op registry a plugin keeps: ops by name, from three sources.
//!
//! - *native*: ops the plugin builds from its own backend's ops (registered
//!   by the plugin in `Plugin::init`; [`CustomImpl::Native`]);
//! - *kernels*: a function of the registering party, host or plugin
//!   ([`CustomImpl::Kernel`], which writes into outputs allocated for it, or
//!   [`CustomImpl::Owned`] for kernels that return their outputs);
//! - *composites*: an `.rlxmodel` body inlined where the op is used
//!   ([`CustomImpl::Composite`]).
//!
//! The registry holds each op behind an `Arc`: an executable that resolved
//! an op at compile keeps it (and its kernel context) alive after the op is
//! unregistered, until the executable is destroyed.

use crate::error::{PluginError, PluginResult, StatusCode};
use crate::tensor::{DType, HostTensor};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

/// A borrowed, compact row-major input of a kernel.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl TensorView<'_> {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// An owned copy.
    pub fn to_host(&self) -> PluginResult<HostTensor> {
        HostTensor::new(self.dtype, self.shape.to_vec(), self.data.to_vec())
    }
}

impl<'a> From<&'a HostTensor> for TensorView<'a> {
    fn from(t: &'a HostTensor) -> Self {
        TensorView {
            dtype: t.dtype,
            shape: &t.shape,
            data: &t.data,
        }
    }
}

/// A compact row-major output a kernel writes in place.
#[derive(Debug)]
pub struct TensorViewMut<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub data: &'a mut [u8],
}

/// A dtype and shape (`-1`: a size known only at run time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<i64>,
}

impl TensorType {
    pub fn of(t: &TensorView<'_>) -> TensorType {
        TensorType {
            dtype: t.dtype,
            shape: t.shape.iter().map(|d| *d as i64).collect(),
        }
    }
    /// The shape as sizes, if every one is known.
    pub fn static_shape(&self) -> Option<Vec<usize>> {
        self.shape
            .iter()
            .map(|d| usize::try_from(*d).ok())
            .collect()
    }
}

/// Conversions to and from the ABI's records (§8).
impl TensorType {
    /// An `RlxShapeOut` holding this type; `InvalidArgument` beyond
    /// `CUSTOM_MAX_NDIM` dimensions.
    pub fn to_shape_out(&self) -> PluginResult<crate::tables::RlxShapeOut> {
        use crate::tables::{RlxShapeOut, CUSTOM_MAX_NDIM};
        if self.shape.len() > CUSTOM_MAX_NDIM {
            return Err(PluginError::invalid_argument(format!(
                "a custom op's output may have at most {CUSTOM_MAX_NDIM} dimensions, {self} has {}",
                self.shape.len()
            )));
        }
        let mut dims = [0i64; CUSTOM_MAX_NDIM];
        dims[..self.shape.len()].copy_from_slice(&self.shape);
        Ok(RlxShapeOut {
            struct_size: <RlxShapeOut as crate::sized::AbiStruct>::STRUCT_SIZE,
            dtype: self.dtype.to_dl(),
            ndim: self.shape.len() as i32,
            dims,
        })
    }

    pub fn from_shape_out(o: &crate::tables::RlxShapeOut) -> PluginResult<TensorType> {
        let n = usize::try_from(o.ndim)
            .ok()
            .filter(|n| *n <= crate::tables::CUSTOM_MAX_NDIM)
            .ok_or_else(|| {
                PluginError::invalid_argument(format!("shape out has ndim {}", o.ndim))
            })?;
        Ok(TensorType {
            dtype: DType::from_dl(o.dtype)?,
            shape: o.dims[..n].to_vec(),
        })
    }

    /// # Safety
    /// `v.shape` points at `v.ndim` readable sizes (or `ndim` is 0).
    pub unsafe fn from_value_info(v: &crate::tables::RlxValueInfo) -> PluginResult<TensorType> {
        let n = usize::try_from(v.ndim)
            .map_err(|_| PluginError::invalid_argument(format!("ndim {} < 0", v.ndim)))?;
        let shape = if n == 0 {
            Vec::new()
        } else if v.shape.is_null() {
            return Err(PluginError::invalid_argument("a value's shape is null"));
        } else {
            // SAFETY: the caller's promise.
            unsafe { std::slice::from_raw_parts(v.shape, n) }.to_vec()
        };
        Ok(TensorType {
            dtype: DType::from_dl(v.dtype)?,
            shape,
        })
    }

    /// An input record borrowing `self.shape`.
    pub fn value_info(&self) -> crate::tables::RlxValueInfo {
        crate::tables::RlxValueInfo {
            struct_size: <crate::tables::RlxValueInfo as crate::sized::AbiStruct>::STRUCT_SIZE,
            role: crate::tables::role::INPUT,
            name: crate::strings::RlxStr::from_static(""),
            dtype: self.dtype.to_dl(),
            ndim: self.shape.len() as i32,
            shape: self.shape.as_ptr(),
        }
    }
}

impl std::fmt::Display for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// A kernel that writes into outputs its caller allocated:
/// `(inputs, outputs, attrs)`.
pub type CustomKernel = Arc<
    dyn Fn(&[TensorView<'_>], &mut [TensorViewMut<'_>], &[u8]) -> PluginResult<()> + Send + Sync,
>;

/// A kernel that returns its outputs (the ABI's `kernel`, not `kernel_into`):
/// `(inputs, attrs)`.
pub type OwnedKernel =
    Arc<dyn Fn(&[TensorView<'_>], &[u8]) -> PluginResult<Vec<HostTensor>> + Send + Sync>;

/// A shape callback: `(inputs, attrs)` → the output's dtype and shape.
pub type ShapeFn = Arc<dyn Fn(&[TensorType], &[u8]) -> PluginResult<TensorType> + Send + Sync>;

/// Who registered an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Plugin,
    Host,
}

impl Origin {
    pub fn to_raw(self) -> u32 {
        match self {
            Origin::Plugin => crate::tables::origin::PLUGIN,
            Origin::Host => crate::tables::origin::HOST,
        }
    }
    pub fn from_raw(raw: u32) -> Origin {
        if raw == crate::tables::origin::HOST {
            Origin::Host
        } else {
            Origin::Plugin
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Origin::Plugin => "plugin",
            Origin::Host => "host",
        }
    }
}

/// How an op is carried out (what [`CustomImpl`] holds, without it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CustomKind {
    Kernel,
    Native,
    Composite,
}

impl CustomKind {
    pub fn to_raw(self) -> u32 {
        use crate::tables::custom_kind as k;
        match self {
            CustomKind::Kernel => k::KERNEL,
            CustomKind::Native => k::NATIVE,
            CustomKind::Composite => k::COMPOSITE,
        }
    }
    /// An unknown kind reads as a kernel, as an absent one does.
    pub fn from_raw(raw: u32) -> CustomKind {
        use crate::tables::custom_kind as k;
        match raw {
            k::NATIVE => CustomKind::Native,
            k::COMPOSITE => CustomKind::Composite,
            _ => CustomKind::Kernel,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            CustomKind::Kernel => "kernel",
            CustomKind::Native => "native",
            CustomKind::Composite => "composite",
        }
    }
}

/// How the output's dtype and shape follow from the inputs.
#[derive(Clone)]
pub enum ShapeRule {
    /// Not declared (an op registered without a rule, or through a desc too
    /// short to hold one).
    None,
    /// Dtype and shape of this input.
    SameAsInput(u32),
    /// NumPy broadcast of the inputs' shapes; dtype of input 0.
    Broadcast,
    Callback(ShapeFn),
    /// The composite body's output.
    Body,
}

/// [`ShapeRule`] without the callback, as it crosses the ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeRuleKind {
    None,
    SameAsInput(u32),
    Broadcast,
    Callback,
    Body,
}

impl ShapeRule {
    pub fn kind(&self) -> ShapeRuleKind {
        match self {
            ShapeRule::None => ShapeRuleKind::None,
            ShapeRule::SameAsInput(i) => ShapeRuleKind::SameAsInput(*i),
            ShapeRule::Broadcast => ShapeRuleKind::Broadcast,
            ShapeRule::Callback(_) => ShapeRuleKind::Callback,
            ShapeRule::Body => ShapeRuleKind::Body,
        }
    }
}

impl ShapeRuleKind {
    /// `(shape_rule, shape_input)` as the ABI writes them.
    pub fn to_raw(self) -> (u32, u32) {
        use crate::tables::shape_rule as r;
        match self {
            ShapeRuleKind::None => (r::NONE, 0),
            ShapeRuleKind::SameAsInput(i) => (r::SAME_AS_INPUT, i),
            ShapeRuleKind::Broadcast => (r::BROADCAST, 0),
            ShapeRuleKind::Callback => (r::CALLBACK, 0),
            ShapeRuleKind::Body => (r::BODY, 0),
        }
    }
    /// An unknown rule reads as none.
    pub fn from_raw(rule: u32, input: u32) -> ShapeRuleKind {
        use crate::tables::shape_rule as r;
        match rule {
            r::SAME_AS_INPUT => ShapeRuleKind::SameAsInput(input),
            r::BROADCAST => ShapeRuleKind::Broadcast,
            r::CALLBACK => ShapeRuleKind::Callback,
            r::BODY => ShapeRuleKind::Body,
            _ => ShapeRuleKind::None,
        }
    }
}

impl std::fmt::Display for ShapeRuleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShapeRuleKind::None => write!(f, "not declared"),
            ShapeRuleKind::SameAsInput(i) => write!(f, "same as input {i}"),
            ShapeRuleKind::Broadcast => write!(f, "broadcast of the inputs"),
            ShapeRuleKind::Callback => write!(f, "callback"),
            ShapeRuleKind::Body => write!(f, "from the body"),
        }
    }
}

/// What is known of a registered op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomOpInfo {
    pub name: String,
    pub description: String,
    pub n_inputs: u32,
    pub n_outputs: u32,
    pub origin: Origin,
    pub kind: CustomKind,
    pub shape_rule: ShapeRuleKind,
}

/// How an op runs.
#[derive(Clone)]
pub enum CustomImpl {
    Kernel(CustomKernel),
    Owned(OwnedKernel),
    /// The plugin lowers it by name.
    Native,
    /// `.rlxmodel` text of the body.
    Composite(Arc<str>),
}

/// A registered op.
pub struct CustomOp {
    pub info: CustomOpInfo,
    pub imp: CustomImpl,
    pub shape: ShapeRule,
    /// What the registering party handed over with the op (through the ABI,
    /// its kernel context): released with the op's last holder.
    pub owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl CustomOp {
    /// An op of `imp` with one output and no declared shape rule (set one
    /// with [`CustomOp::with_shape`]).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        n_inputs: u32,
        origin: Origin,
        imp: CustomImpl,
    ) -> CustomOp {
        let kind = match imp {
            CustomImpl::Kernel(_) | CustomImpl::Owned(_) => CustomKind::Kernel,
            CustomImpl::Native => CustomKind::Native,
            CustomImpl::Composite(_) => CustomKind::Composite,
        };
        let shape = match kind {
            CustomKind::Composite => ShapeRule::Body,
            _ => ShapeRule::None,
        };
        CustomOp {
            info: CustomOpInfo {
                name: name.into(),
                description: description.into(),
                n_inputs,
                n_outputs: 1,
                origin,
                kind,
                shape_rule: shape.kind(),
            },
            imp,
            shape,
            owner: None,
        }
    }
    pub fn with_owner(mut self, owner: Arc<dyn std::any::Any + Send + Sync>) -> CustomOp {
        self.owner = Some(owner);
        self
    }
    pub fn with_shape(mut self, shape: ShapeRule) -> CustomOp {
        self.info.shape_rule = shape.kind();
        self.shape = shape;
        self
    }
    pub fn with_outputs(mut self, n_outputs: u32) -> CustomOp {
        self.info.n_outputs = n_outputs;
        self
    }

    /// The output's dtype and shape for these inputs, by the op's rule.
    pub fn infer(
        &self,
        services: Option<&dyn CustomOpServices>,
        inputs: &[TensorType],
        attrs: &[u8],
    ) -> PluginResult<TensorType> {
        let name = &self.info.name;
        if inputs.len() != self.info.n_inputs as usize {
            return Err(PluginError::invalid_argument(format!(
                "custom op {name:?} takes {} inputs, got {}",
                self.info.n_inputs,
                inputs.len()
            )));
        }
        match &self.shape {
            ShapeRule::None => Err(PluginError::unsupported(format!(
                "custom op {name:?} declares no shape rule (ABI 1.5 added them), so its output \
                 type is known only from a graph node"
            ))),
            ShapeRule::SameAsInput(i) => inputs.get(*i as usize).cloned().ok_or_else(|| {
                PluginError::invalid_argument(format!(
                    "custom op {name:?}'s shape rule names input {i} of {}",
                    inputs.len()
                ))
            }),
            ShapeRule::Broadcast => broadcast(inputs)
                .map_err(|e| PluginError::invalid_argument(format!("custom op {name:?}: {e}"))),
            ShapeRule::Callback(f) => {
                f(inputs, attrs).map_err(|e| e.context(format!("custom op {name:?} shape rule")))
            }
            ShapeRule::Body => match (&self.imp, services) {
                (CustomImpl::Composite(body), Some(s)) => s
                    .body_shape(body, inputs)
                    .map_err(|e| e.context(format!("custom op {name:?}"))),
                _ => Err(PluginError::unsupported(format!(
                    "custom op {name:?}: this plugin cannot read composite bodies"
                ))),
            },
        }
    }
}

/// NumPy broadcasting; dtype of the first input.
pub fn broadcast(inputs: &[TensorType]) -> Result<TensorType, String> {
    let first = inputs
        .first()
        .ok_or("a broadcast needs at least one input")?;
    let rank = inputs.iter().map(|t| t.shape.len()).max().unwrap_or(0);
    let mut shape = vec![1i64; rank];
    for t in inputs {
        let off = rank - t.shape.len();
        for (i, &d) in t.shape.iter().enumerate() {
            let s = &mut shape[off + i];
            if d == *s || d == 1 {
                continue;
            }
            if *s == 1 {
                *s = d;
            } else {
                return Err(format!(
                    "shapes {:?} do not broadcast",
                    inputs.iter().map(|t| t.shape.clone()).collect::<Vec<_>>()
                ));
            }
        }
    }
    Ok(TensorType {
        dtype: first.dtype,
        shape,
    })
}

/// What only the plugin can do for its registry: read composite bodies and
/// run native and composite ops outside a graph. Set once, in `init`.
pub trait CustomOpServices: Send + Sync {
    /// Check a composite body at registration (it parses, has `n_inputs`
    /// inputs and one output, and uses only ops the plugin takes).
    fn check_composite(&self, op: &CustomOpInfo, body: &str) -> PluginResult<()>;
    /// The body's output for these inputs.
    fn body_shape(&self, body: &str, inputs: &[TensorType]) -> PluginResult<TensorType>;
    /// Run `op` on `inputs` (its output is `out`), as a graph of one node.
    fn run(
        &self,
        op: &CustomOp,
        inputs: &[HostTensor],
        attrs: &[u8],
        out: &TensorType,
    ) -> PluginResult<HostTensor>;
}

/// Thread-safe registry of custom ops, in name order.
#[derive(Default)]
pub struct CustomOpRegistry {
    ops: RwLock<BTreeMap<String, Arc<CustomOp>>>,
    services: OnceLock<Arc<dyn CustomOpServices>>,
}

impl CustomOpRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Give the registry the plugin's services (once; a second call is
    /// refused).
    pub fn set_services(&self, s: Arc<dyn CustomOpServices>) -> PluginResult<()> {
        self.services
            .set(s)
            .map_err(|_| PluginError::internal("custom-op services are already set"))
    }

    pub fn services(&self) -> Option<&dyn CustomOpServices> {
        self.services.get().map(|s| &**s)
    }

    /// Register an op. A taken name is refused (`AlreadyExists`); an empty
    /// name or one with whitespace, a shape rule on an op of more than one
    /// output, or a composite this plugin cannot read is refused
    /// (`InvalidArgument` / `Unsupported`).
    pub fn register(&self, op: CustomOp) -> PluginResult<()> {
        let info = &op.info;
        if info.name.is_empty() || info.name.chars().any(char::is_whitespace) {
            return Err(PluginError::invalid_argument(format!(
                "custom op name {:?} must be non-empty and contain no whitespace",
                info.name
            )));
        }
        let single =
            !matches!(op.imp, CustomImpl::Owned(_)) || !matches!(op.shape, ShapeRule::None);
        if single && info.n_outputs != 1 {
            return Err(PluginError::invalid_argument(format!(
                "custom op {:?}: ops with a shape rule, in-place kernels, native and \
                 composite ops have exactly one output (declared {})",
                info.name, info.n_outputs
            )));
        }
        if let ShapeRule::SameAsInput(i) = op.shape {
            if i >= info.n_inputs {
                return Err(PluginError::invalid_argument(format!(
                    "custom op {:?}: the shape rule copies input {i} of {}",
                    info.name, info.n_inputs
                )));
            }
        }
        if let CustomImpl::Composite(body) = &op.imp {
            let s = self.services().ok_or_else(|| {
                PluginError::unsupported(format!(
                    "custom op {:?}: this plugin does not take composite ops",
                    info.name
                ))
            })?;
            s.check_composite(info, body)
                .map_err(|e| e.context(format!("composite custom op {:?}", info.name)))?;
        }
        let mut ops = self.ops.write().unwrap_or_else(|e| e.into_inner());
        if ops.contains_key(&info.name) {
            return Err(PluginError::new(
                StatusCode::AlreadyExists,
                format!(
                    "custom op {:?} is already registered; unregister it first",
                    info.name
                ),
            ));
        }
        ops.insert(info.name.clone(), Arc::new(op));
        Ok(())
    }

    /// Remove an op. Executables that use it keep it until they are
    /// destroyed; new compiles no longer find it.
    pub fn unregister(&self, name: &str) -> PluginResult<()> {
        let removed = {
            let mut ops = self.ops.write().unwrap_or_else(|e| e.into_inner());
            ops.remove(name)
        };
        // Dropped outside the lock: the last reference runs the kernel
        // context's drop, which must not be able to deadlock the registry.
        removed
            .map(|_| ())
            .ok_or_else(|| PluginError::not_found(format!("no custom op named {name:?}")))
    }

    /// The op, to keep for as long as it is used.
    pub fn get(&self, name: &str) -> Option<Arc<CustomOp>> {
        let ops = self.ops.read().unwrap_or_else(|e| e.into_inner());
        ops.get(name).cloned()
    }

    /// The op, or `NotFound` listing the registered names.
    pub fn resolve(&self, name: &str) -> PluginResult<Arc<CustomOp>> {
        self.get(name).ok_or_else(|| {
            let names = self.names();
            PluginError::not_found(format!(
                "no custom op named {name:?} is registered ({})",
                if names.is_empty() {
                    "none are".to_string()
                } else {
                    format!("registered: {}", names.join(", "))
                }
            ))
        })
    }

    pub fn names(&self) -> Vec<String> {
        let ops = self.ops.read().unwrap_or_else(|e| e.into_inner());
        ops.keys().cloned().collect()
    }

    pub fn lookup(&self, name: &str) -> Option<CustomOpInfo> {
        self.get(name).map(|o| o.info.clone())
    }

    pub fn list(&self) -> Vec<CustomOpInfo> {
        let ops = self.ops.read().unwrap_or_else(|e| e.into_inner());
        ops.values().map(|e| e.info.clone()).collect()
    }

    /// The output type of op `name` for these inputs.
    pub fn infer_shape(
        &self,
        name: &str,
        inputs: &[TensorType],
        attrs: &[u8],
    ) -> PluginResult<TensorType> {
        self.resolve(name)?.infer(self.services(), inputs, attrs)
    }

    /// Run an op outside a graph, checking its arity on the way in and out.
    pub fn execute(
        &self,
        name: &str,
        inputs: &[HostTensor],
        attrs: &[u8],
    ) -> PluginResult<Vec<HostTensor>> {
        let op = self.resolve(name)?;
        let info = &op.info;
        if inputs.len() != info.n_inputs as usize {
            return Err(PluginError::invalid_argument(format!(
                "custom op {name:?} takes {} inputs, got {}",
                info.n_inputs,
                inputs.len()
            )));
        }
        let views: Vec<TensorView> = inputs.iter().map(TensorView::from).collect();
        let ctx = |e: PluginError| e.context(format!("custom op {name:?}"));
        let outs = match &op.imp {
            CustomImpl::Owned(k) => k(&views, attrs).map_err(ctx)?,
            CustomImpl::Kernel(k) => {
                let types: Vec<TensorType> = views.iter().map(TensorType::of).collect();
                let out = op.infer(self.services(), &types, attrs)?;
                let mut t = allocate(&out).map_err(ctx)?;
                let mut slot = [TensorViewMut {
                    dtype: t.dtype,
                    shape: &t.shape,
                    data: &mut t.data,
                }];
                k(&views, &mut slot, attrs).map_err(ctx)?;
                vec![t]
            }
            CustomImpl::Native | CustomImpl::Composite(_) => {
                let types: Vec<TensorType> = views.iter().map(TensorType::of).collect();
                let out = op.infer(self.services(), &types, attrs)?;
                let s = self.services().ok_or_else(|| {
                    PluginError::unsupported(format!("custom op {name:?} cannot run alone here"))
                })?;
                vec![s.run(&op, inputs, attrs, &out).map_err(ctx)?]
            }
        };
        if outs.len() != info.n_outputs as usize {
            return Err(PluginError::internal(format!(
                "custom op {name:?} declares {} outputs but its kernel returned {}",
                info.n_outputs,
                outs.len()
            )));
        }
        Ok(outs)
    }
}

/// A zeroed tensor of a fully known type.
pub fn allocate(t: &TensorType) -> PluginResult<HostTensor> {
    let shape = t
        .static_shape()
        .ok_or_else(|| PluginError::invalid_argument(format!("output {t} has unknown sizes")))?;
    let bytes = shape
        .iter()
        .try_fold(t.dtype.size_bytes(), |a, d| a.checked_mul(*d))
        .ok_or_else(|| PluginError::invalid_argument(format!("output {t} is too large")))?;
    let mut data = Vec::new();
    data.try_reserve_exact(bytes).map_err(|_| {
        PluginError::new(
            StatusCode::Internal,
            format!("cannot allocate {bytes} bytes for output {t}"),
        )
    })?;
    data.resize(bytes, 0);
    HostTensor::new(t.dtype, shape, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tt(shape: &[i64]) -> TensorType {
        TensorType {
            dtype: DType::F32,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn broadcast_follows_numpy() {
        assert_eq!(
            broadcast(&[tt(&[2, 1, 3]), tt(&[4, 1])]).unwrap(),
            tt(&[2, 4, 3])
        );
        assert_eq!(broadcast(&[tt(&[]), tt(&[5])]).unwrap(), tt(&[5]));
        assert!(broadcast(&[tt(&[2]), tt(&[3])]).is_err());
    }

    #[test]
    fn an_unregistered_op_lives_on_in_whoever_holds_it() {
        let r = CustomOpRegistry::new();
        let k: CustomKernel = Arc::new(|ins, outs, _| {
            outs[0].data.copy_from_slice(ins[0].data);
            Ok(())
        });
        r.register(
            CustomOp::new("t.copy", "", 1, Origin::Host, CustomImpl::Kernel(k))
                .with_shape(ShapeRule::SameAsInput(0)),
        )
        .unwrap();
        let held = r.get("t.copy").unwrap();
        r.unregister("t.copy").unwrap();
        assert!(r.get("t.copy").is_none());
        let e = r.resolve("t.copy").err().unwrap();
        assert!(e.message.contains("none are"), "{}", e.message);
        assert_eq!(held.info.name, "t.copy");
    }

    #[test]
    fn kernels_run_into_outputs_of_the_inferred_shape() {
        let r = CustomOpRegistry::new();
        let k: CustomKernel = Arc::new(|ins, outs, attrs| {
            let add = attrs.first().copied().unwrap_or(0) as f32;
            let x: Vec<f32> = ins[0]
                .data
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()) + add)
                .collect();
            for (o, v) in outs[0].data.chunks_mut(4).zip(x) {
                o.copy_from_slice(&v.to_le_bytes());
            }
            Ok(())
        });
        r.register(
            CustomOp::new(
                "t.add",
                "x + attrs[0]",
                1,
                Origin::Host,
                CustomImpl::Kernel(k),
            )
            .with_shape(ShapeRule::SameAsInput(0)),
        )
        .unwrap();
        let x = HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
        let y = r.execute("t.add", &[x], &[5]).unwrap();
        assert_eq!(y[0].to_f32_vec().unwrap(), vec![6.0, 7.0, 8.0]);
        // Two outputs with a shape rule cannot be described.
        let k2: CustomKernel = Arc::new(|_, _, _| Ok(()));
        let e = r
            .register(
                CustomOp::new("t.two", "", 1, Origin::Host, CustomImpl::Kernel(k2)).with_outputs(2),
            )
            .unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument);
    }
}
