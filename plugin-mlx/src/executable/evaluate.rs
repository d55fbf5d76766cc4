//! The graph to MLX: every node lowered in order, built lazily, eagerly
//! (evaluated as it is built, so an error names it) or once on zeros (the
//! compile-time check); with the per-node fixes every lowering shares
//! (declared shape and dtype, float64 on the CPU stream).

use super::device::spin_us;
use super::explain;
use super::fusion::{Fusion, Item};
use crate::dtype::ir_to_mx;
use crate::graph_check::lowering_for;
use crate::graph_text::{describe, shape_str};
use crate::lower::custom_scope::CustomScope;
use crate::lower::param_writes::ParamWrites;
use crate::lower::{static_dims, Ctx, Eval, A};
use rlx_ir::{Graph, NodeId, Op};
use rlx_mlx_shim::{array, ops, Array};
use rlx_plugin_api::{PluginError, PluginResult};

/// What every node of one evaluation shares.
pub struct Env<'a> {
    pub rng: rlx_ir::RngOptions,
    pub custom: &'a CustomScope,
    pub how: Eval,
    pub writes: &'a ParamWrites,
    /// Called with each node built (and, eager, evaluated), its input
    /// arrays and its value: the per-node breakdown's hook. None in runs.
    pub observe: Option<Observer<'a>>,
    /// Compiled mode's elementwise regions of the graph evaluated
    /// (`fusion.rs`); a nested body or another graph ignores them.
    pub fusion: Option<&'a Fusion>,
}

impl<'a> Env<'a> {
    /// A lazy build (nothing evaluated, no observer), its param writes
    /// recorded in `writes`.
    pub fn lazy(rng: rlx_ir::RngOptions, custom: &'a CustomScope, writes: &'a ParamWrites) -> Self {
        Env {
            rng,
            custom,
            how: Eval::Lazy,
            writes,
            observe: None,
            fusion: None,
        }
    }
}

/// See [`Env::observe`].
pub type Observer<'a> = &'a dyn Fn(&rlx_ir::Node, &[&Array], &Array);

/// Which nodes one evaluation builds: those in `skip` are not built,
/// those in `given` come from `leaf` like Inputs and Params (either slice
/// may be empty: none), and `targets` are returned.
pub struct Select<'a> {
    pub given: &'a [bool],
    pub skip: &'a [bool],
    pub targets: &'a [NodeId],
}

/// Evaluate every node of `graph` in order. `leaf` supplies Input and Param
/// values. Returns the outputs (unevaluated unless `env.how` is eager).
pub fn evaluate(
    graph: &Graph,
    env: &Env,
    leaf: &dyn Fn(NodeId) -> PluginResult<A>,
) -> PluginResult<Vec<A>> {
    let select = Select {
        given: &[],
        skip: &[],
        targets: &graph.outputs,
    };
    evaluate_select(graph, env, leaf, &select)
}

/// [`evaluate`] of the nodes `select` names.
pub fn evaluate_select(
    graph: &Graph,
    env: &Env,
    leaf: &dyn Fn(NodeId) -> PluginResult<A>,
    select: &Select,
) -> PluginResult<Vec<A>> {
    let (rng, custom, how) = (env.rng, env.custom, env.how);
    let eager = how == Eval::Eager;
    let flag = |mask: &[bool], id: NodeId| mask.get(id.0 as usize).copied().unwrap_or(false);
    // Drop each intermediate after its last use.
    let mut uses = vec![0usize; graph.len()];
    for n in graph.nodes() {
        if flag(select.skip, n.id) || flag(select.given, n.id) {
            continue;
        }
        for i in &n.inputs {
            uses[i.0 as usize] += 1;
        }
    }
    for o in select.targets {
        uses[o.0 as usize] += 1;
    }
    let mut vals: Vec<Option<A>> = (0..graph.len()).map(|_| None).collect();
    let memo = crate::lower::Memo::default();
    let on_gpu = rlx_mlx_shim::array::thread_device_is_gpu();
    // One value fewer to keep for each read of it.
    let release = |vals: &mut Vec<Option<A>>, uses: &mut Vec<usize>, inputs: &[NodeId]| {
        for i in inputs {
            let k = i.0 as usize;
            uses[k] -= 1;
            if uses[k] == 0 {
                vals[k] = None;
            }
        }
    };
    // Regions apply to a lazy build of the graph they were planned for.
    let fusion = env
        .fusion
        .filter(|f| f.is_for(graph) && how == Eval::Lazy && env.observe.is_none());
    // The plan's order, else the graph's: no list is made for a run
    // without regions (every lazy and eager run).
    let (mut planned, mut plain);
    let order: &mut dyn Iterator<Item = Item> = match fusion {
        Some(f) => {
            planned = f.order.iter().copied();
            &mut planned
        }
        None => {
            plain = graph.nodes().iter().map(|n| Item::Node(n.id));
            &mut plain
        }
    };
    for item in order {
        let n = match item {
            Item::Node(id) => graph.node(id),
            Item::Region(r) => {
                let region = &fusion.expect("regions come with their plan").regions[r as usize];
                let args: Vec<&Array> = region
                    .inputs
                    .iter()
                    .map(|i| vals[i.0 as usize].as_deref().expect("inputs precede users"))
                    .collect();
                let outs = region.build(&args).map_err(|e| {
                    PluginError::internal(format!(
                        "{}: {e}",
                        describe(graph, graph.node(region.members[0]))
                    ))
                })?;
                for m in &region.members {
                    release(&mut vals, &mut uses, &graph.node(*m).inputs);
                }
                for ((id, _), v) in region.outputs.iter().zip(outs) {
                    vals[id.0 as usize] = Some(v);
                }
                continue;
            }
        };
        if flag(select.skip, n.id) {
            continue;
        }
        if flag(select.given, n.id) {
            vals[n.id.0 as usize] = Some(leaf(n.id)?);
            continue;
        }
        // MLX's GPU backends have no float64: such a node is built on the
        // CPU stream (MLX moves data between streams itself).
        let _cpu = if touches_f64(graph, n) {
            crate::lower::cpu_steps().map_err(|e| PluginError::internal(e.0))?
        } else {
            None
        };
        let v = match &n.op {
            Op::Input { .. } | Op::Param { .. } => leaf(n.id)?,
            _ => {
                let l = lowering_for(graph, n)?;
                let lower = l.lower.ok_or_else(|| {
                    PluginError::internal(format!("{}: no lowering function", describe(graph, n)))
                })?;
                let args: Vec<&Array> = n
                    .inputs
                    .iter()
                    .map(|i| vals[i.0 as usize].as_deref().expect("inputs precede users"))
                    .collect();
                let cx = Ctx {
                    graph,
                    node: n,
                    rng,
                    custom,
                    how,
                    writes: env.writes,
                    nested,
                    memo: &memo,
                };
                let out = lower(&cx, &args).map_err(|e| {
                    PluginError::new(
                        if e.0.contains("not lowered") || e.0.contains("not supported") {
                            rlx_plugin_api::StatusCode::Unsupported
                        } else {
                            rlx_plugin_api::StatusCode::InvalidArgument
                        },
                        format!("{}: {}", describe(graph, n), e.0),
                    )
                })?;
                conform(graph, n.id, out)?
            }
        };
        if eager {
            array::eval_spinning(&v, spin_us(on_gpu)).map_err(|e| {
                PluginError::internal(format!("{}: {}", describe(graph, n), explain(graph, e)))
            })?;
            custom.check()?;
        }
        if let Some(observe) = env.observe {
            let args: Vec<&Array> = n
                .inputs
                .iter()
                .filter_map(|i| vals[i.0 as usize].as_deref())
                .collect();
            observe(n, &args, &v);
        }
        release(&mut vals, &mut uses, &n.inputs);
        vals[n.id.0 as usize] = Some(v);
    }
    select
        .targets
        .iter()
        .map(|o| {
            let v = vals[o.0 as usize].as_deref().expect("targets are built");
            Ok(v.clone_handle())
        })
        .collect()
}

/// A nested graph (a loop's body, a composite's) built in the environment
/// of the node that holds it (`lower::NestedFn`): without the observer and
/// compiled mode's regions, which are the outer graph's.
fn nested(
    cx: &Ctx,
    body: &Graph,
    leaf: &dyn Fn(NodeId) -> PluginResult<A>,
) -> PluginResult<Vec<A>> {
    let env = Env {
        rng: cx.rng,
        custom: cx.custom,
        how: cx.how,
        writes: cx.writes,
        observe: None,
        fusion: None,
    };
    evaluate(body, &env, leaf)
}

/// Does the node read or make a float64 value?
fn touches_f64(graph: &Graph, n: &rlx_ir::Node) -> bool {
    std::iter::once(n.id)
        .chain(n.inputs.iter().copied())
        .any(|i| graph.shape(i).dtype() == rlx_ir::DType::F64)
}

/// Hold a lowering to the node's declared shape and dtype.
fn conform(graph: &Graph, id: NodeId, out: A) -> PluginResult<A> {
    let n = graph.node(id);
    let want = static_dims(graph.shape(id).dims());
    let got = out.shape();
    if got != want {
        return Err(PluginError::internal(format!(
            "{}: the lowering produced shape {got:?} but the node declares {}",
            describe(graph, n),
            shape_str(graph, id)
        )));
    }
    let dt = ir_to_mx(graph.shape(id).dtype()).expect("checked");
    if out.dtype() != dt {
        return ops::astype(&out, dt)
            .map_err(|e| PluginError::internal(format!("{}: {e}", describe(graph, n))));
    }
    Ok(out)
}

/// Zeros of a node's declared shape and dtype (for the compile-time trial).
pub(super) fn zeros_like(graph: &Graph, id: NodeId) -> PluginResult<A> {
    let dims = static_dims(graph.shape(id).dims());
    let dt = ir_to_mx(graph.shape(id).dtype()).expect("checked");
    array::full(&dims, 0.0, dt).map_err(|e| PluginError::internal(e.to_string()))
}
