//! Check 4: compile, signature, bind (copied and shared), run and destroy
//! a small graph the plugin claims, in every mode, against the CPU.

use super::cases::{case_leaves, cases_for};
use super::reference::{compare, cpu_reference, leaves, static_dims, Fill, Leaf};
use super::{code_name, Kit, Outcome};
use rlx_ir::{Graph, Op};
use rlx_plugin_api::{DType, HostTensor, Mode, Role, ValueInfo};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::sync::Arc;

/// The graph the executable checks (and the error checks) use.
pub(super) struct Base {
    pub graph: Graph,
    pub text: String,
    pub leaves: Vec<Leaf>,
    pub want: Vec<Vec<f32>>,
    /// What it computes, for messages.
    pub what: String,
}

impl Base {
    pub fn inputs(&self) -> Vec<(String, HostTensor)> {
        self.pick(false)
    }
    pub fn params(&self) -> Vec<(String, HostTensor)> {
        self.pick(true)
    }
    fn pick(&self, params: bool) -> Vec<(String, HostTensor)> {
        self.leaves
            .iter()
            .filter(|l| l.is_param == params)
            .map(|l| (l.name.clone(), l.tensor()))
            .collect()
    }
}

pub(super) fn refs(v: &[(String, HostTensor)]) -> Vec<(&str, &HostTensor)> {
    v.iter().map(|(n, t)| (n.as_str(), t)).collect()
}

/// `relu(x @ w) + b` (two params) when the plugin claims its ops in f32,
/// else the simplest generated case of the first claimed op.
pub(super) fn base(p: &LoadedPlugin) -> Result<Base, String> {
    let wanted = ["Input", "Param", "MatMul", "Activation", "Binary"];
    let (graph, what, leaves) = if crate::graphs::claims_f32(p, &wanted) {
        let g = crate::graphs::matmul_relu_add(2, 3, 4);
        let l = leaves(&g, &|_, _| Fill::Uniform(-1.0, 1.0), 11)?;
        (g, "relu(x @ w) + b".to_string(), l)
    } else {
        let c = p
            .supported_ops()
            .iter()
            .flat_map(|o| {
                // A case with inputs, so that the error checks have some.
                cases_for(&o.op_kind)
                    .into_iter()
                    .filter(|c| o.dtypes.contains(&c.dtype) && c.graph.nodes().len() > 1)
                    .take(1)
            })
            .next()
            .ok_or("the plugin claims no op the kit can generate a graph for")?;
        let l = case_leaves(&c)?;
        (c.graph.clone(), c.label(), l)
    };
    let text = rlx_ir::rlxmodel::to_text(&graph).map_err(|e| e.to_string())?;
    let want = cpu_reference(&graph, &leaves)
        .map_err(|e| format!("the CPU reference cannot run {what}: {e}"))?;
    Ok(Base {
        graph,
        text,
        leaves,
        want,
        what,
    })
}

const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];
const STEPS: [&str; 6] = [
    "compile",
    "signature",
    "bind_param + run",
    "run_into",
    "destroy",
    "bind_param_shared + run",
];

pub(super) fn run(kit: &mut Kit) {
    let base = crate::guard::catch_quiet(|| base(&kit.plugin))
        .unwrap_or_else(|e| Err(format!("the kit panicked: {e}")));
    let b = match base {
        Ok(b) => b,
        Err(why) => {
            for m in MODES {
                for s in STEPS {
                    kit.skip(format!("exec {}: {s}", m.name()), why.clone());
                }
            }
            return;
        }
    };
    for mode in MODES {
        mode_checks(kit, &b, mode);
    }
}

fn mode_checks(kit: &mut Kit, b: &Base, mode: Mode) {
    let m = mode.name();
    let mut exe = None;
    kit.record(format!("exec {m}: compile"), |p| {
        match p.compile(&b.text, mode) {
            Ok(e) => {
                exe = Some(e);
                Outcome::Ok
            }
            Err(e) => Outcome::Fail(format!(
                "compiling {}: {}: {}",
                b.what,
                code_name(e.code as u32),
                e.message
            )),
        }
    });
    let Some(mut exe) = exe else {
        for s in &STEPS[1..] {
            kit.skip(format!("exec {m}: {s}"), "compile failed");
        }
        return;
    };
    kit.record(format!("exec {m}: signature"), |_| {
        signature(exe.signature(), &b.graph).into()
    });
    kit.record(format!("exec {m}: bind_param + run"), |_| {
        bind_and_run(&mut exe, b).into()
    });
    kit.record(format!("exec {m}: run_into"), |p| {
        if !p.has_run_into() {
            return Outcome::Skip("no executable_run_into (ABI 1.8, optional)".into());
        }
        run_into(&mut exe, b).into()
    });
    kit.record(format!("exec {m}: destroy"), |_| {
        drop(exe);
        Outcome::Ok
    });
    kit.record(format!("exec {m}: bind_param_shared + run"), |p| {
        shared(p, b, mode)
    });
}

/// Inputs, then params, then outputs; each input and param as declared
/// (order within a role is the plugin's); outputs in order.
fn signature(sig: &[ValueInfo], g: &Graph) -> Result<(), String> {
    let rank = |r: Role| match r {
        Role::Input => 0,
        Role::Param => 1,
        Role::Output => 2,
        // Never in a signature (state lists only).
        Role::State => 3,
    };
    if let Some(v) = sig.iter().find(|v| v.role == Role::State) {
        return Err(format!("the signature lists {:?} as a state", v.name));
    }
    if sig.windows(2).any(|w| rank(w[0].role) > rank(w[1].role)) {
        return Err("values are not visited as inputs, then params, then outputs".into());
    }
    let mut want: Vec<(Role, String, DType, Vec<Option<usize>>)> = Vec::new();
    for n in g.nodes() {
        let (role, name) = match &n.op {
            Op::Input { name } => (Role::Input, name),
            Op::Param { name } => (Role::Param, name),
            _ => continue,
        };
        let (dtype, shape) = declared(g, n.id)?;
        want.push((role, name.clone(), dtype, shape));
    }
    for (role, name, dtype, shape) in &want {
        let v = sig
            .iter()
            .find(|v| v.role == *role && &v.name == name)
            .ok_or(format!("no {role:?} {name:?} in the signature"))?;
        if v.dtype != *dtype || &v.shape != shape {
            return Err(format!(
                "{name:?} is {}{:?}, the graph declares {dtype}{shape:?}",
                v.dtype, v.shape
            ));
        }
    }
    let count = |r| sig.iter().filter(|v| v.role == r).count();
    let leaves = |r| want.iter().filter(|w| w.0 == r).count();
    if count(Role::Input) != leaves(Role::Input) || count(Role::Param) != leaves(Role::Param) {
        return Err("the signature has inputs or params the graph does not declare".into());
    }
    outputs(sig, g)
}

fn declared(g: &Graph, id: rlx_ir::NodeId) -> Result<(DType, Vec<Option<usize>>), String> {
    let s = g.shape(id);
    let dtype = super::reference::abi_dtype(s.dtype()).ok_or("a dtype without an ABI dtype")?;
    Ok((dtype, static_dims(s)?.into_iter().map(Some).collect()))
}

fn outputs(sig: &[ValueInfo], g: &Graph) -> Result<(), String> {
    let outs: Vec<&ValueInfo> = sig.iter().filter(|v| v.role == Role::Output).collect();
    if outs.len() != g.outputs.len() {
        return Err(format!(
            "{} outputs in the signature, the graph has {}",
            outs.len(),
            g.outputs.len()
        ));
    }
    for (i, (v, id)) in outs.iter().zip(&g.outputs).enumerate() {
        let (dtype, shape) = declared(g, *id)?;
        if v.dtype != dtype || v.shape != shape {
            return Err(format!(
                "output {i} is {}{:?}, the graph declares {dtype}{shape:?}",
                v.dtype, v.shape
            ));
        }
        if let Some(name) = g.output_name(i) {
            if v.name != name {
                return Err(format!("output {i} is named {:?}, not {name:?}", v.name));
            }
        }
    }
    Ok(())
}

/// Bind copies of the params, run twice, compare both runs.
fn bind_and_run(exe: &mut PluginExecutable, b: &Base) -> Result<(), String> {
    for (name, t) in b.params() {
        exe.bind_param(&name, &t)
            .map_err(|e| format!("bind_param {name:?}: {e}"))?;
    }
    let inputs = b.inputs();
    for run in ["first", "second"] {
        let got = exe
            .run(&refs(&inputs))
            .map_err(|e| format!("{run} run: {e}"))?;
        compare(&b.graph, &got, &b.want).map_err(|e| format!("{run} run of {}: {e}", b.what))?;
    }
    Ok(())
}

/// The params bound above; the outputs of fixed shape written into buffers the
/// kit lends (filled with 0xAB first, so an element the plugin did not write
/// shows), the others handed over; against the CPU.
fn run_into(exe: &mut PluginExecutable, b: &Base) -> Result<(), String> {
    let outs: Vec<ValueInfo> = exe.values(Role::Output).cloned().collect();
    let mut bufs: Vec<Option<Vec<u8>>> = outs
        .iter()
        .map(|v| {
            let dims: Option<Vec<usize>> = v.shape.iter().copied().collect();
            dims.map(|d| vec![0xABu8; d.iter().product::<usize>() * v.dtype.size_bytes()])
        })
        .collect();
    let inputs = b.inputs();
    let named: Vec<(&str, rlx_plugin_api::HostTensorRef<'_>)> =
        inputs.iter().map(|(n, t)| (n.as_str(), t.into())).collect();
    let mut into: Vec<Option<&mut [u8]>> = bufs.iter_mut().map(|v| v.as_deref_mut()).collect();
    let handed = exe
        .run_refs_into(&named, &mut into, |t| {
            HostTensor::new(t.dtype, t.shape.to_vec(), t.to_compact_bytes()?)
        })
        .map_err(|e| format!("run_into: {e}"))?;
    let got = outs
        .iter()
        .zip(bufs)
        .zip(handed)
        .map(|((v, lent), handed)| match (lent, handed) {
            (Some(data), None) => {
                let shape = v.shape.iter().map(|d| d.unwrap_or(0)).collect();
                HostTensor::new(v.dtype, shape, data).map_err(|e| e.to_string())
            }
            (None, Some(t)) => Ok(t),
            _ => Err(format!("output {:?} both lent and handed over", v.name)),
        })
        .collect::<Result<Vec<_>, String>>()?;
    compare(&b.graph, &got, &b.want).map_err(|e| format!("run_into of {}: {e}", b.what))
}

/// Bind the params without a copy, run, destroy; afterwards nothing may
/// still hold the shared tensors.
fn shared(p: &Arc<LoadedPlugin>, b: &Base, mode: Mode) -> Outcome {
    let params: Vec<(String, Arc<HostTensor>)> = b
        .params()
        .into_iter()
        .map(|(n, t)| (n, Arc::new(t)))
        .collect();
    if params.is_empty() {
        return Outcome::Skip(format!("{} has no params", b.what));
    }
    let r = (|| -> Result<(), String> {
        let mut exe = p.compile(&b.text, mode).map_err(|e| e.to_string())?;
        for (name, t) in &params {
            exe.bind_param_shared(name, t.clone())
                .map_err(|e| format!("bind_param_shared {name:?}: {e}"))?;
        }
        let got = exe.run(&refs(&b.inputs())).map_err(|e| e.to_string())?;
        compare(&b.graph, &got, &b.want)
    })();
    if let Err(e) = r {
        return Outcome::Fail(e);
    }
    match params.iter().find(|(_, t)| Arc::strong_count(t) != 1) {
        Some((name, _)) => Outcome::Fail(format!(
            "{name:?} is still referenced after the executable was destroyed"
        )),
        None => Outcome::Ok,
    }
}
