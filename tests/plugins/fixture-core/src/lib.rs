//! The fixture backend: a tiny f32 interpreter over `.rlxmodel` graphs for
//! Input, Param, Constant, Binary (Add/Sub/Mul/Div), Activation (Relu) and
//! 2-D MatMul, with one custom op of its own (`fixture.scale2`, x * 2).
//! Test plugins build on it with different names, versions and faults.

use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{Graph, Op};
use rlx_plugin_api::{
    BoundParam, CompileOptions, CustomImpl, CustomOp, CustomOpRegistry, DType, Descriptor,
    Executable, HostTensor, LoweringEntry, Origin, OwnedKernel, Plugin, PluginError, PluginResult,
    Role, ShapeRule, Strategy, TensorRef, TensorView, ValueInfo,
};
use std::collections::HashMap;
use std::sync::Arc;

/// A setting the fixture reads at each compile, through the host table's
/// `setting` when the host offers it, and logs at info level when it is set.
pub const FIXTURE_SETTING: &str = "RLX_FIXTURE_SETTING";

/// What a fixture plugin looks like and which fault it has.
#[derive(Clone, Debug)]
pub struct FixtureConfig {
    pub name: &'static str,
    pub version: &'static str,
    /// `init` (registration) fails with this message.
    pub fail_init: Option<&'static str>,
    /// Fault injection: a graph named `fault_wrong_dtype`,
    /// `fault_wrong_shape`, `fault_extra_output` or `fault_empty_output`
    /// runs, then returns its outputs malformed that way; a graph named
    /// `fault_<entry>_<kind>` faults at that entry (see [`EntryFault`]).
    pub faults: bool,
    /// How a `cxx` fault fails: a call into C++ that throws, caught at the
    /// language boundary the way the MLX shim's are (cxx turns the
    /// exception into an `Err`). Set by a plugin that links such code.
    pub throw_cxx: Option<ThrowCxx>,
}

/// Calls C++ code that throws `what`; the caught exception's message.
pub type ThrowCxx = fn(&str) -> Result<(), String>;

/// Executables of any fixture plugin alive now: compile makes one, drop
/// ends one (the faulty plugin's `faulty.live_executables` op reads it,
/// so tests can see that no failing path leaks one).
pub static LIVE_EXECUTABLES: std::sync::atomic::AtomicIsize =
    std::sync::atomic::AtomicIsize::new(0);

/// The ABI entries a `fault_<entry>_<kind>` graph can fault at, and how.
///
/// Entries: `compile`, `signature` (panics only: it cannot fail),
/// `device` (asked at compile; panics only), `bind`, `run`, `drop`
/// (panics only). Kinds: `panic`, `error` (an `INTERNAL` error naming the
/// entry), `cxx` (a C++ exception through the boundary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryFault {
    pub entry: &'static str,
    pub kind: &'static str,
}

impl EntryFault {
    pub const ENTRIES: [&'static str; 6] =
        ["compile", "signature", "device", "bind", "run", "drop"];
    pub const KINDS: [&'static str; 3] = ["panic", "error", "cxx"];

    fn of(graph: &str) -> Option<EntryFault> {
        let rest = graph.strip_prefix("fault_")?;
        let (entry, kind) = rest.split_once('_')?;
        let entry = *Self::ENTRIES.iter().find(|e| **e == entry)?;
        let kind = *Self::KINDS.iter().find(|k| **k == kind)?;
        Some(EntryFault { entry, kind })
    }

    /// Fail now if this fault is for `entry`.
    fn fire(
        this: Option<EntryFault>,
        entry: &str,
        cfg_throw: Option<ThrowCxx>,
    ) -> PluginResult<()> {
        let Some(f) = this.filter(|f| f.entry == entry) else {
            return Ok(());
        };
        match f.kind {
            "panic" => panic!("injected panic in {entry}"),
            "error" => Err(PluginError::internal(format!("injected error in {entry}"))),
            _ => match cfg_throw {
                Some(t) => t(&format!("injected C++ exception in {entry}"))
                    .map_err(|e| PluginError::internal(format!("C++ exception: {e}"))),
                None => Err(PluginError::unsupported("this plugin links no C++")),
            },
        }
    }
}

impl Default for FixtureConfig {
    fn default() -> Self {
        FixtureConfig {
            name: "fixture",
            version: "0.1.0",
            fail_init: None,
            faults: false,
            throw_cxx: None,
        }
    }
}

pub struct FixturePlugin {
    cfg: FixtureConfig,
}

impl FixturePlugin {
    pub fn new(cfg: FixtureConfig) -> Self {
        FixturePlugin { cfg }
    }
}

fn eager(graph_text: &str, inputs: &[HostTensor]) -> PluginResult<Vec<HostTensor>> {
    let mut exe = FixtureExecutable::parse(graph_text)?;
    let names: Vec<String> = exe.inputs.iter().map(|(n, _)| n.clone()).collect();
    if names.len() != inputs.len() {
        return Err(PluginError::invalid_argument(format!(
            "the node takes {} inputs, got {}",
            names.len(),
            inputs.len()
        )));
    }
    let borrowed = rlx_plugin_api::tensor::borrow_all(inputs);
    let refs: Vec<TensorRef> = borrowed
        .raws
        .iter()
        .map(|r| unsafe { TensorRef::from_raw(r) })
        .collect::<PluginResult<_>>()?;
    let named: Vec<(&str, TensorRef)> = names.iter().map(String::as_str).zip(refs).collect();
    exe.run(&named)
}

impl Plugin for FixturePlugin {
    fn descriptor(&self) -> Descriptor {
        Descriptor {
            name: self.cfg.name.into(),
            version: self.cfg.version.into(),
            description: "pure-Rust f32 test backend".into(),
            devices: vec!["cpu".into()],
            build_info: vec![("backend".into(), "fixture interpreter".into())],
            opsets: vec![1],
            device_infos: vec![rlx_plugin_api::DeviceInfo {
                kind: rlx_plugin_api::DeviceKind::Cpu,
                ordinal: 0,
                name: "cpu".into(),
                memory_bytes: 0,
            }],
        }
    }

    fn init(&self, custom_ops: &'static CustomOpRegistry) -> PluginResult<Vec<LoweringEntry>> {
        if let Some(msg) = self.cfg.fail_init {
            log::error!("fixture registration is set up to fail");
            return Err(PluginError::internal(msg));
        }
        let scale2: OwnedKernel = Arc::new(|ins: &[TensorView], _attrs: &[u8]| {
            let x = ins[0].to_host()?;
            let v: Vec<f32> = x.to_f32_vec()?.iter().map(|x| x * 2.0).collect();
            Ok(vec![HostTensor::from_f32(x.shape.clone(), &v)?])
        });
        custom_ops.register(
            CustomOp::new(
                "fixture.scale2",
                "x * 2",
                1,
                Origin::Plugin,
                CustomImpl::Owned(scale2),
            )
            .with_shape(ShapeRule::SameAsInput(0)),
        )?;
        if self.cfg.faults {
            register_faulty_ops(custom_ops, self.cfg.throw_cxx)?;
        }
        let exec: rlx_plugin_api::ExecuteOp = Arc::new(eager);
        let row = |op: &str, strategy, note: &str, eager: bool| LoweringEntry {
            op_kind: op.into(),
            dtypes: vec![DType::F32],
            strategy,
            note: note.into(),
            execute: eager.then(|| exec.clone()),
        };
        let table = vec![
            row("Input", Strategy::Native, "graph input", false),
            row("Param", Strategy::Native, "bound weight", false),
            row("Constant", Strategy::Native, "inline data", false),
            row("Binary", Strategy::Native, "Add, Sub, Mul, Div", true),
            row("Activation", Strategy::Native, "Relu", true),
            row("MatMul", Strategy::Native, "2-D", true),
        ];
        log::info!("fixture registered {} lowerings", table.len());
        log::debug!("fixture lowerings: Input Param Constant Binary Activation MatMul");
        log::trace!("fixture trace record");
        Ok(table)
    }

    fn compile(&self, graph: &str, options: &CompileOptions) -> PluginResult<Box<dyn Executable>> {
        log::debug!("fixture compiling a graph in {} mode", options.mode.name());
        // A setting read through the host (tests/abi_tables.rs).
        if let Some(v) = rlx_plugin_api::setting(FIXTURE_SETTING) {
            log::info!("fixture setting {FIXTURE_SETTING} = {v:?}");
        }
        let mut exe = FixtureExecutable::parse(graph)?;
        exe.faults = self.cfg.faults;
        if exe.faults {
            exe.entry_fault = EntryFault::of(&exe.graph.name);
            exe.throw_cxx = self.cfg.throw_cxx;
            EntryFault::fire(exe.entry_fault, "compile", exe.throw_cxx)?;
        }
        Ok(Box::new(exe))
    }
}

/// The faulty plugin's own custom ops: kernels that panic, fail, throw a
/// C++ exception or return the wrong number of outputs when the registry
/// executes them, and `faulty.live_executables` (takes any f32[1], returns
/// the count of live executables as f32[1]).
fn register_faulty_ops(
    custom_ops: &'static CustomOpRegistry,
    throw_cxx: Option<ThrowCxx>,
) -> PluginResult<()> {
    type K = fn(&[TensorView], &[u8], Option<ThrowCxx>) -> PluginResult<Vec<HostTensor>>;
    let ops: [(&str, K); 5] = [
        ("faulty.kernel_panics", |_, _, _| {
            panic!("injected panic in a custom-op kernel")
        }),
        ("faulty.kernel_errors", |_, _, _| {
            Err(PluginError::internal(
                "injected error in a custom-op kernel",
            ))
        }),
        ("faulty.kernel_throws", |_, _, t| {
            t.ok_or_else(|| PluginError::unsupported("no C++"))?(
                "injected C++ exception in a custom-op kernel",
            )
            .map_err(|e| PluginError::internal(format!("C++ exception: {e}")))?;
            Ok(vec![])
        }),
        ("faulty.kernel_two_outputs", |ins, _, _| {
            let x = ins[0].to_host()?;
            Ok(vec![x.clone(), x])
        }),
        ("faulty.live_executables", |_, _, _| {
            let n = LIVE_EXECUTABLES.load(std::sync::atomic::Ordering::SeqCst);
            Ok(vec![HostTensor::from_f32(vec![1], &[n as f32])?])
        }),
    ];
    for (name, k) in ops {
        let kernel: OwnedKernel =
            Arc::new(move |ins: &[TensorView], attrs: &[u8]| k(ins, attrs, throw_cxx));
        let shape = ShapeRule::SameAsInput(0);
        custom_ops.register(
            CustomOp::new(
                name,
                "fault injection",
                1,
                Origin::Plugin,
                CustomImpl::Owned(kernel),
            )
            .with_shape(shape),
        )?;
    }
    Ok(())
}

struct FixtureExecutable {
    faults: bool,
    entry_fault: Option<EntryFault>,
    throw_cxx: Option<ThrowCxx>,
    graph: Graph,
    inputs: Vec<(String, Vec<usize>)>,
    params: HashMap<String, (Vec<usize>, Option<Vec<f32>>)>,
}

fn static_dims(g: &Graph, id: rlx_ir::NodeId) -> PluginResult<Vec<usize>> {
    g.shape(id)
        .dims()
        .iter()
        .map(|d| match d {
            rlx_ir::Dim::Static(n) => Ok(*n),
            rlx_ir::Dim::Dynamic(_) => Err(PluginError::unsupported(
                "the fixture backend needs static shapes",
            )),
        })
        .collect()
}

impl FixtureExecutable {
    fn parse(text: &str) -> PluginResult<FixtureExecutable> {
        // An op this rlx-ir does not know, or a newer format, is
        // UNSUPPORTED (docs/ABI.md §6); malformed text INVALID_ARGUMENT.
        let graph = rlx_ir::rlxmodel::from_text(text).map_err(|e| {
            use rlx_ir::rlxmodel::RlxModelError as E;
            let unknown = matches!(&e, E::Value(v) if v.to_string().contains("unknown variant"));
            if unknown || matches!(e, E::Version(_)) {
                PluginError::unsupported(e.to_string())
            } else {
                PluginError::invalid_argument(e.to_string())
            }
        })?;
        let mut inputs = Vec::new();
        let mut params = HashMap::new();
        for n in graph.nodes() {
            match &n.op {
                Op::Input { name } => inputs.push((name.clone(), static_dims(&graph, n.id)?)),
                Op::Param { name } => {
                    params.insert(name.clone(), (static_dims(&graph, n.id)?, None));
                }
                Op::Constant { .. }
                | Op::Binary(_)
                | Op::Activation(Activation::Relu)
                | Op::MatMul => {}
                other => {
                    return Err(PluginError::unsupported(format!(
                        "node {} ({:?}): the fixture backend does not lower this op",
                        n.id,
                        other.kind()
                    )))
                }
            }
            if graph.shape(n.id).dtype() != rlx_ir::DType::F32 {
                return Err(PluginError::unsupported(format!(
                    "node {}: the fixture backend is f32 only",
                    n.id
                )));
            }
        }
        LIVE_EXECUTABLES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(FixtureExecutable {
            faults: false,
            entry_fault: None,
            throw_cxx: None,
            graph,
            inputs,
            params,
        })
    }
}

fn binary(op: BinaryOp, a: &[f32], b: &[f32]) -> PluginResult<Vec<f32>> {
    let f: fn(f32, f32) -> f32 = match op {
        BinaryOp::Add => |x, y| x + y,
        BinaryOp::Sub => |x, y| x - y,
        BinaryOp::Mul => |x, y| x * y,
        BinaryOp::Div => |x, y| x / y,
        other => return Err(PluginError::unsupported(format!("Binary {other:?}"))),
    };
    Ok(match (a.len(), b.len()) {
        (n, m) if n == m => a.iter().zip(b).map(|(x, y)| f(*x, *y)).collect(),
        (_, 1) => a.iter().map(|x| f(*x, b[0])).collect(),
        (1, _) => b.iter().map(|y| f(a[0], *y)).collect(),
        (n, m) => {
            return Err(PluginError::unsupported(format!(
                "the fixture backend broadcasts only scalars ({n} vs {m} elements)"
            )))
        }
    })
}

impl Drop for FixtureExecutable {
    fn drop(&mut self) {
        LIVE_EXECUTABLES.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        if self.entry_fault.is_some_and(|f| f.entry == "drop") {
            panic!("injected panic in drop");
        }
    }
}

impl Executable for FixtureExecutable {
    fn device(&self) -> Option<rlx_plugin_api::DeviceInfo> {
        if self.entry_fault.is_some_and(|f| f.entry == "device") {
            panic!("injected panic in device");
        }
        None
    }

    fn signature(&self) -> Vec<ValueInfo> {
        if self.entry_fault.is_some_and(|f| f.entry == "signature") {
            panic!("injected panic in signature");
        }
        let dims = |d: &[usize]| d.iter().map(|x| Some(*x)).collect();
        let mut v: Vec<ValueInfo> = self
            .inputs
            .iter()
            .map(|(n, d)| ValueInfo {
                role: Role::Input,
                name: n.clone(),
                dtype: DType::F32,
                shape: dims(d),
            })
            .collect();
        let mut params: Vec<_> = self.params.iter().collect();
        params.sort_by(|a, b| a.0.cmp(b.0));
        v.extend(params.into_iter().map(|(n, (d, _))| ValueInfo {
            role: Role::Param,
            name: n.clone(),
            dtype: DType::F32,
            shape: dims(d),
        }));
        v.extend(self.graph.outputs.iter().enumerate().map(|(i, id)| {
            ValueInfo {
                role: Role::Output,
                name: self
                    .graph
                    .output_name(i)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("output{i}")),
                dtype: DType::F32,
                shape: static_dims(&self.graph, *id)
                    .unwrap_or_default()
                    .iter()
                    .map(|x| Some(*x))
                    .collect(),
            }
        }));
        v
    }

    fn bind_param(&mut self, name: &str, p: BoundParam) -> PluginResult<()> {
        EntryFault::fire(self.entry_fault, "bind", self.throw_cxx)?;
        let (dims, slot) = self.params.get_mut(name).ok_or_else(|| {
            PluginError::not_found(format!("the graph has no param named {name:?}"))
        })?;
        if p.shape != *dims || p.dtype != DType::F32 {
            return Err(PluginError::invalid_argument(format!(
                "param {name:?} is f32{dims:?}, got {}{:?}",
                p.dtype, p.shape
            )));
        }
        *slot = Some(rlx_plugin_api::convert::bytes_to_f32(p.dtype, p.bytes())?);
        Ok(())
    }

    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> PluginResult<Vec<HostTensor>> {
        EntryFault::fire(self.entry_fault, "run", self.throw_cxx)?;
        let g = &self.graph;
        let mut vals: HashMap<u32, Vec<f32>> = HashMap::new();
        for n in g.nodes() {
            let arg = |i: usize| -> &Vec<f32> { &vals[&n.inputs[i].0] };
            let v = match &n.op {
                Op::Input { name } => {
                    let (_, t) = inputs.iter().find(|(k, _)| k == name).ok_or_else(|| {
                        PluginError::invalid_argument(format!("missing input {name:?}"))
                    })?;
                    let want = static_dims(g, n.id)?;
                    if t.shape[..] != want[..] || t.dtype != DType::F32 {
                        return Err(PluginError::invalid_argument(format!(
                            "input {name:?} is f32{want:?}, got {}{:?}",
                            t.dtype, t.shape
                        )));
                    }
                    rlx_plugin_api::convert::bytes_to_f32(t.dtype, &t.to_compact_bytes()?)?
                }
                Op::Param { name } => self.params[name].1.clone().ok_or_else(|| {
                    PluginError::invalid_argument(format!("param {name:?} is not bound"))
                })?,
                Op::Constant { data } => rlx_plugin_api::convert::bytes_to_f32(DType::F32, data)?,
                Op::Binary(op) => binary(*op, arg(0), arg(1))?,
                Op::Activation(_) => arg(0).iter().map(|x| x.max(0.0)).collect(),
                Op::MatMul => {
                    let (a, b) = (static_dims(g, n.inputs[0])?, static_dims(g, n.inputs[1])?);
                    if a.len() != 2 || b.len() != 2 || a[1] != b[0] {
                        return Err(PluginError::unsupported(format!(
                            "MatMul {a:?} x {b:?}: 2-D only"
                        )));
                    }
                    let (m, k, nn) = (a[0], a[1], b[1]);
                    let (x, w) = (arg(0), arg(1));
                    let mut out = vec![0f32; m * nn];
                    for i in 0..m {
                        for j in 0..nn {
                            out[i * nn + j] = (0..k).map(|p| x[i * k + p] * w[p * nn + j]).sum();
                        }
                    }
                    out
                }
                _ => unreachable!("rejected in parse"),
            };
            vals.insert(n.id.0, v);
        }
        let mut outs: Vec<HostTensor> = g
            .outputs
            .iter()
            .map(|id| HostTensor::from_f32(static_dims(g, *id)?, &vals[&id.0]))
            .collect::<PluginResult<_>>()?;
        if self.faults {
            inject(&g.name, &mut outs)?;
        }
        Ok(outs)
    }
}

/// The fault a `fault_*` graph asks for, applied to its outputs.
fn inject(graph: &str, outs: &mut Vec<HostTensor>) -> PluginResult<()> {
    let first = outs[0].clone();
    match graph {
        "fault_wrong_dtype" => {
            let halves = first.data[..first.data.len() / 2].to_vec();
            outs[0] = HostTensor::new(DType::F16, first.shape.clone(), halves)?;
        }
        "fault_wrong_shape" => {
            outs[0] = HostTensor::new(DType::F32, vec![first.numel()], first.data.clone())?;
        }
        "fault_extra_output" => outs.push(first),
        "fault_empty_output" => outs[0] = HostTensor::new(DType::F32, vec![0], Vec::new())?,
        _ => {}
    }
    Ok(())
}
