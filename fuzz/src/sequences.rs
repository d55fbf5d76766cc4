//! Call sequences on executables and the custom-op registry, through the
//! host-side API: register (host kernels of several behaviours, composites)
//! and unregister ops, look them up, list and execute them; compile graphs
//! that use them, run, and drop those executables, in any order, across up
//! to four live executables. Ops a live executable uses may be unregistered
//! under it (the registry keeps them alive until the executable goes).
//!
//! Checked: no crash or hang; no PANIC status except from a step in which
//! one of this harness's kernels panicked on purpose; no empty error
//! message; a successful run returns one output of the graph's shape.
//! Shared with `tests/tests/fuzz_replay.rs`.

use arbitrary::{Arbitrary, Unstructured};
use rlx_ir::op::Activation;
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::host::{LoadedPlugin, PluginExecutable};
use rlx_plugin_api::{HostTensor, Mode, PluginError, PluginResult, StatusCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The names this harness registers (and removes again after each input).
const OPS: [&str; 3] = ["fuzz.a", "fuzz.b", "fuzz.c"];

/// Set by a kernel that panics on purpose; a PANIC status is then expected.
static PANICKED: AtomicBool = AtomicBool::new(false);

pub struct Finding(pub String);

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Behaviour {
    Identity,
    Fails,
    Panics,
    NoOutputs,
    WrongShape,
}

#[derive(Arbitrary, Debug)]
enum Step {
    Register { op: u8, behaviour: Behaviour },
    RegisterComposite { op: u8 },
    Unregister { op: u8 },
    Lookup { op: u8 },
    List,
    Execute { op: u8, len: u8 },
    Compile { op: u8, mode: u8, len: u8 },
    Run { slot: u8, len: u8 },
    Drop { slot: u8 },
}

fn kernel(b: Behaviour) -> impl Fn(&[HostTensor]) -> PluginResult<Vec<HostTensor>> + Send + Sync {
    move |ins: &[HostTensor]| match b {
        Behaviour::Identity => Ok(ins.to_vec()),
        Behaviour::Fails => Err(PluginError::invalid_argument(
            "this kernel fails on purpose",
        )),
        Behaviour::Panics => {
            PANICKED.store(true, Ordering::SeqCst);
            panic!("this kernel panics on purpose");
        }
        Behaviour::NoOutputs => Ok(Vec::new()),
        Behaviour::WrongShape => Ok(vec![HostTensor::from_f32(vec![1], &[0.0])?]),
    }
}

/// `exp(op(x))` for `x: f32[len]`.
fn graph(op: &str, len: usize) -> String {
    let s = Shape::new(&[len], DType::F32);
    let mut g = Graph::new("uses_custom");
    let x = g.input("x", s.clone());
    let c = g.add_node(
        Op::Custom {
            name: op.to_string(),
            num_inputs: 1,
            attrs: vec![],
        },
        vec![x],
        s.clone(),
    );
    let y = g.add_node(Op::Activation(Activation::Exp), vec![c], s);
    g.set_outputs(vec![y]);
    rlx_ir::rlxmodel::to_text(&g).expect("graph to text")
}

/// A composite body: `exp(x)` for `x: f32[4]`.
const BODY: &str = "rlxmodel 1\nopset 1\n\ngraph @body {\n  %x = input : f32[4]\n  \
%1 = Activation(Exp) %x : f32[4]\n  return %1\n}\n";

fn judge<T>(what: &str, r: PluginResult<T>) -> Result<Option<T>, Finding> {
    let panicked = PANICKED.swap(false, Ordering::SeqCst);
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == StatusCode::Panic && !panicked => {
            Err(Finding(format!("{what}: PANIC status: {}", e.message)))
        }
        Err(e) if e.message.is_empty() => {
            Err(Finding(format!("{what}: {} with no message", e.code)))
        }
        Err(_) => Ok(None),
    }
}

fn input(len: usize) -> HostTensor {
    let v: Vec<f32> = (0..len).map(|i| i as f32 * 0.25 - 0.5).collect();
    HostTensor::from_f32(vec![len], &v).expect("tensor")
}

/// One fuzz input: the steps it decodes to, then everything it made is
/// dropped and its ops unregistered.
pub fn one_input(p: &Arc<LoadedPlugin>, data: &[u8]) -> Result<(), Finding> {
    let Ok(steps) = Vec::<Step>::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    if !p.has_custom_ops() {
        return Ok(());
    }
    let mut slots: Vec<Option<(PluginExecutable, usize)>> = (0..4).map(|_| None).collect();
    let result = (|| {
        for step in steps.iter().take(16) {
            match step {
                Step::Register { op, behaviour } => {
                    let name = OPS[*op as usize % 3];
                    judge(
                        "register",
                        p.register_custom_op(name, "fuzz", 1, 1, kernel(*behaviour)),
                    )?;
                }
                Step::RegisterComposite { op } => {
                    let name = OPS[*op as usize % 3];
                    let op = rlx_plugin_api::CustomOp::new(
                        name,
                        "fuzz composite",
                        1,
                        rlx_plugin_api::Origin::Host,
                        rlx_plugin_api::CustomImpl::Composite(BODY.into()),
                    );
                    judge("register composite", p.register_op(op))?;
                }
                Step::Unregister { op } => {
                    judge("unregister", p.unregister_custom_op(OPS[*op as usize % 3]))?;
                }
                Step::Lookup { op } => {
                    judge("lookup", p.lookup_custom_op(OPS[*op as usize % 3]))?;
                }
                Step::List => {
                    judge("list", p.list_custom_ops())?;
                }
                Step::Execute { op, len } => {
                    let x = input(*len as usize % 6);
                    judge(
                        "execute",
                        p.execute_custom_op(OPS[*op as usize % 3], &[x], 1),
                    )?;
                }
                Step::Compile { op, mode, len } => {
                    let len = 1 + *len as usize % 5;
                    let mode = [Mode::Lazy, Mode::Eager][*mode as usize % 2];
                    let text = graph(OPS[*op as usize % 3], len);
                    if let Some(exe) = judge("compile", p.compile(&text, mode))? {
                        if let Some(free) = slots.iter_mut().find(|s| s.is_none()) {
                            *free = Some((exe, len));
                        }
                    }
                }
                Step::Run { slot, len } => {
                    let Some((exe, want)) = slots[*slot as usize % 4].as_mut() else {
                        continue;
                    };
                    let len = if *len % 4 == 0 {
                        *len as usize % 7
                    } else {
                        *want
                    };
                    let x = input(len);
                    if let Some(outs) = judge("run", exe.run(&[("x", &x)]))? {
                        if outs.len() != 1 || outs[0].shape != vec![*want] {
                            return Err(Finding(format!(
                                "a run returned {} outputs, the first of shape {:?}, for [{want}]",
                                outs.len(),
                                outs.first().map(|o| o.shape.clone())
                            )));
                        }
                    }
                }
                Step::Drop { slot } => {
                    slots[*slot as usize % 4] = None;
                }
            }
        }
        Ok(())
    })();
    drop(slots);
    for name in OPS {
        let _ = p.unregister_custom_op(name);
    }
    PANICKED.store(false, Ordering::SeqCst);
    result
}
