//! Call sequences on executables and the custom-op registry, through the
//! host-side API: register (host kernels of several behaviours, composites) and
//! unregister ops, look them up, list and execute them; compile graphs that use
//! them, run, and drop those executables, in any order, across up to six live
//! executables. Ops a live executable uses may be unregistered under it (the
//! registry keeps them alive until the executable goes). Interleaved with them,
//! the steps of `state_steps.rs` (state, clones, shared params, submitted runs,
//! param ranges, RNG, extents) on the same slots, and on the handles of the
//! executables dropped so far.
//!
//! Checked: no crash or hang; no PANIC status except from a step in which
//! one of this harness's kernels panicked on purpose; no empty error
//! message; a successful run of a custom-op graph returns one output of
//! the graph's shape. Shared with `tests/tests/fuzz_replay.rs`.

use arbitrary::{Arbitrary, Unstructured};
use rlx_ir::op::Activation;
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::tables::RlxExecutable;
use rlx_plugin_api::{HostTensor, Mode, PluginError, PluginResult, StatusCode};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

/// The names this harness registers (and removes again after each input).
const OPS: [&str; 3] = ["fuzz.a", "fuzz.b", "fuzz.c"];

/// Set by a kernel that panics on purpose; a PANIC status is then expected.
static PANICKED: AtomicBool = AtomicBool::new(false);

pub struct Finding(pub String);

#[path = "state_steps.rs"]
mod state_steps;

/// What a slot's executable was compiled from.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// `exp(op(x))` for `x: f32[len]`.
    Custom(usize),
    /// One of `state_steps`'s graphs, by index.
    Graph(u8),
}

pub struct Slot {
    pub exe: PluginExecutable,
    pub kind: Kind,
}

const SLOTS: usize = 6;

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
    State(state_steps::StateStep),
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

/// libFuzzer's extra counters (it reads this section between inputs; in
/// the replay test it is plain data): one per (step, status code).
/// Coverage is this harness's and the host glue's, not the plugin's, so
/// without them a call the plugin accepts looks like one it refuses, and
/// the fuzzer is never led to the calls that get past its checks (a read
/// of a state that is bound).
#[used]
#[link_section = "__libfuzzer_extra_counters"]
static OUTCOMES: [AtomicU8; 4096] = [const { AtomicU8::new(0) }; 4096];

/// Count what became of a step (`code` 0: success) in [`OUTCOMES`].
fn count(what: &str, code: u32) {
    let h = what.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    });
    OUTCOMES[(h as usize % 256) * 16 + code as usize % 16].fetch_add(1, Ordering::Relaxed);
}

/// With `RLX_FUZZ_TRACE` set, each step's outcome on stderr: to see
/// which calls the plugin accepts (a harness whose calls are all refused
/// fuzzes only the refusals).
fn trace<T>(what: &str, r: &PluginResult<T>) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var_os("RLX_FUZZ_TRACE").is_some()) {
        return;
    }
    match r {
        Ok(_) => eprintln!("trace {what}: ok"),
        Err(e) => eprintln!("trace {what}: {}: {}", e.code, e.message),
    }
}

fn judge<T>(what: &str, r: PluginResult<T>) -> Result<Option<T>, Finding> {
    count(what, r.as_ref().err().map_or(0, |e| e.code as u32));
    trace(what, &r);
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
    let mut slots: Vec<Option<Slot>> = (0..SLOTS).map(|_| None).collect();
    // Handles of the executables dropped so far, for the state steps.
    let mut dead: Vec<*mut RlxExecutable> = Vec::new();
    let result = (|| {
        for step in steps.iter().take(24) {
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
                            *free = Some(Slot {
                                exe,
                                kind: Kind::Custom(len),
                            });
                        }
                    }
                }
                Step::Run { slot, len } => {
                    let Some(Slot {
                        exe,
                        kind: Kind::Custom(want),
                    }) = slots[*slot as usize % SLOTS].as_mut()
                    else {
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
                    if let Some(s) = slots[*slot as usize % SLOTS].take() {
                        dead.push(s.exe.raw_handle());
                    }
                }
                Step::State(s) => state_steps::step(p, s, &mut slots, &dead)?,
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
