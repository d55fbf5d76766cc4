//! Where a graph's run goes, per rlx node, on the MLX plugin's own
//! lowering (no ABI, no rlx-runtime around it):
//!
//! - **MLX ops**: how many MLX graph nodes the lowering of each rlx node
//!   builds (and which primitives), from one lazy build;
//! - **lazy**: what building each node costs (the lowering's host work),
//!   then the one evaluation of the whole graph;
//! - **eager**: what each node costs built and evaluated at once (one
//!   evaluation per node, as the plugin's eager mode does);
//! - **compiled**: the first call of the `mx::compile`d graph (trace,
//!   fusion, kernel build) and every call after it.
//!
//! Params and inputs are MLX arrays made once, as an executable binds its
//! params; every run builds from them. Run it with
//!
//! ```sh
//! cargo bench -p rlx-static-host --bench breakdown -- MODEL [--runs N] [--nodes]
//! ```
//!
//! where MODEL is a builtin of `rlx-host bench` (default `transformer`);
//! `--nodes` prints every node, not only the sums per op kind. The figures
//! are in `docs/PERFORMANCE.md` ("Where a small graph's time goes").

use rlx_ir::{Graph, NodeId, Op};
use rlx_mlx::executable::{evaluate, Env, Observer};
use rlx_mlx::lower::param_writes::ParamWrites;
use rlx_mlx::lower::Eval;
use rlx_mlx::lower::{static_dims, A};
use rlx_mlx_shim::{array, Array, ArrayList};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// The value after the flag `name`, if given.
fn flag(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != name);
    args.next().and(args.next())
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The node's op kind, as the lowering table names it.
fn kind(n: &rlx_ir::Node) -> String {
    format!("{:?}", n.op.kind())
}

/// An array of `id`'s declared shape and dtype with values in [0, 1):
/// token ids read as 0, every other value small and finite.
fn leaf_value(g: &Graph, id: NodeId, seed: &mut u64) -> A {
    let shape = g.shape(id);
    let dims = static_dims(shape.dims());
    let n: usize = dims.iter().map(|&d| d as usize).product();
    let vals: Vec<f32> = (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32) / (1u64 << 24) as f32
        })
        .collect();
    let a = Array::from_slice(&vals, &dims).expect("a leaf array");
    let dt = rlx_mlx::dtype::ir_to_mx(shape.dtype()).expect("a supported dtype");
    if a.dtype() == dt {
        a
    } else {
        rlx_mlx_shim::ops::astype(&a, dt).expect("cast")
    }
}

/// One node's line of the breakdown.
#[derive(Default, Clone)]
struct NodeRow {
    label: String,
    kind: String,
    mlx_ops: Vec<String>,
    lazy_build: Vec<f64>,
    eager: Vec<f64>,
}

/// One op kind's sums over its nodes.
#[derive(Default)]
struct KindRow {
    nodes: usize,
    ops: usize,
    lazy: f64,
    eager: f64,
    /// How many of each MLX primitive.
    prims: BTreeMap<String, usize>,
}

fn main() {
    let name = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-') && a.parse::<f64>().is_err())
        .unwrap_or_else(|| "transformer".into());
    let runs: usize = flag("--runs").map_or(200, |v| v.parse().expect("--runs takes a number"));
    let per_node = std::env::args().any(|a| a == "--nodes");
    let model = rlx_host::bench::builtins::builtin(&name)
        .unwrap_or_else(|| panic!("{name}: not a builtin of rlx-host bench"));
    let g = Arc::new(model.graph);
    let dev = rlx_mlx::devices::resolve(None).expect("a default device");
    let _on = rlx_mlx::executable::on_device(dev).expect("the default device");
    println!(
        "{name}: {} ({} nodes), {runs} runs, MLX {} on {}",
        model.description,
        g.len(),
        rlx_mlx_shim::mlx_version(),
        if rlx_mlx_shim::array::thread_device_is_gpu() {
            "gpu"
        } else {
            "cpu"
        }
    );

    let mut seed = 0x5eed_u64;
    let leaves: BTreeMap<u32, A> = g
        .nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Input { .. } | Op::Param { .. }))
        .map(|n| (n.id.0, leaf_value(&g, n.id, &mut seed)))
        .collect();
    array::eval_list(&ArrayList::from_arrays(leaves.values().map(|a| &**a))).unwrap();
    let custom = Arc::new(rlx_mlx::custom::resolve::resolve(&g).unwrap());
    let rows: RefCell<Vec<NodeRow>> = RefCell::new(
        g.nodes()
            .iter()
            .map(|n| NodeRow {
                label: rlx_mlx::graph_text::describe(&g, n),
                kind: kind(n),
                ..NodeRow::default()
            })
            .collect(),
    );

    // One evaluation of the graph in `how`, calling `observe` per node.
    let build = |how: Eval, observe: Option<Observer>| -> Vec<A> {
        let writes = ParamWrites::default();
        let env = Env {
            rng: Default::default(),
            custom: &custom,
            how,
            writes: &writes,
            observe,
            // Node by node: no fused regions.
            fusion: None,
        };
        evaluate(&g, &env, &|id| Ok(leaves[&id.0].clone_handle())).unwrap()
    };
    let eval = |outs: &[A]| {
        let list = ArrayList::from_arrays(outs.iter().map(|o| &**o as &Array));
        array::eval_list_spinning(&list, 50).unwrap();
    };

    // The MLX ops each node's lowering builds.
    let count = |n: &rlx_ir::Node, args: &[&Array], v: &Array| {
        let stop = ArrayList::from_arrays(args.iter().copied());
        rows.borrow_mut()[n.id.0 as usize].mlx_ops =
            array::graph_ops(&ArrayList::from_arrays([v]), &stop).unwrap();
    };
    drop(build(Eval::Lazy, Some(&count)));

    // Lazy and eager, timed per node: the time since the last node ended.
    let mut totals: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (mode, how) in [("lazy", Eval::Lazy), ("eager", Eval::Eager)] {
        for i in 0..runs + runs / 10 + 3 {
            let timed = i >= runs / 10 + 3;
            let last = RefCell::new(Instant::now());
            let start = *last.borrow();
            let lap = |n: &rlx_ir::Node, _: &[&Array], _: &Array| {
                let now = Instant::now();
                let us = (now - *last.borrow()).as_secs_f64() * 1e6;
                *last.borrow_mut() = now;
                if timed {
                    let mut r = rows.borrow_mut();
                    let row = &mut r[n.id.0 as usize];
                    if how == Eval::Lazy {
                        row.lazy_build.push(us);
                    } else {
                        row.eager.push(us);
                    }
                }
            };
            let outs = build(how, Some(&lap));
            let built = Instant::now();
            eval(&outs);
            let done = Instant::now();
            drop(outs);
            if timed {
                let us = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e6;
                let (build_key, eval_key) = if how == Eval::Lazy {
                    ("lazy build", "lazy eval")
                } else {
                    ("eager nodes", "eager outputs")
                };
                for (key, v) in [
                    (build_key, us(start, built)),
                    (eval_key, us(built, done)),
                    (mode, us(start, done)),
                ] {
                    totals.entry(key).or_default().push(v);
                }
            }
        }
    }

    // Compiled: the lowering traced once by mx::compile.
    let leaf_ids: Vec<u32> = leaves.keys().copied().collect();
    let (g2, custom2, ids2) = (g.clone(), custom.clone(), leaf_ids.clone());
    // Compiled mode's elementwise regions, planned as an executable plans
    // them (on the same graph object: a plan applies to the graph it was
    // made for).
    let regions = rlx_mlx::executable::fusion::Fusion::plan(&g2, &|_| true);
    let compiled = rlx_mlx_shim::compile(move |args: &ArrayList| {
        let writes = ParamWrites::default();
        let env = Env {
            rng: Default::default(),
            custom: &custom2,
            how: Eval::Lazy,
            writes: &writes,
            observe: None,
            fusion: regions.as_ref(),
        };
        let leaf = |id: NodeId| {
            let k = ids2.iter().position(|&i| i == id.0).expect("a leaf");
            Ok(args.get(k).expect("an argument"))
        };
        let outs = evaluate(&g2, &env, &leaf).map_err(|e| e.message)?;
        Ok(ArrayList::from_arrays(outs.iter().map(|o| &**o as &Array)))
    })
    .unwrap();
    let args: Vec<&Array> = leaf_ids.iter().map(|i| &*leaves[i]).collect();
    let t = Instant::now();
    let outs = compiled.call_arrays(&args).unwrap();
    eval(&outs);
    let first = t.elapsed().as_secs_f64() * 1e6;
    drop(outs);
    let mut calls = Vec::new();
    let mut evals = Vec::new();
    for i in 0..runs + runs / 10 + 3 {
        let t = Instant::now();
        let outs = compiled.call_arrays(&args).unwrap();
        let called = Instant::now();
        eval(&outs);
        if i >= runs / 10 + 3 {
            calls.push((called - t).as_secs_f64() * 1e6);
            evals.push(called.elapsed().as_secs_f64() * 1e6);
        }
    }

    let rows = rows.into_inner();
    let built: Vec<&NodeRow> = rows
        .iter()
        .filter(|r| !r.mlx_ops.is_empty() || !r.eager.is_empty())
        .collect();
    let ops_total: usize = rows.iter().map(|r| r.mlx_ops.len()).sum();
    let lowered = rows
        .iter()
        .zip(g.nodes())
        .filter(|(_, n)| !matches!(n.op, Op::Input { .. } | Op::Param { .. }))
        .count();
    println!();
    println!(
        "{lowered} rlx nodes lowered, {ops_total} MLX ops; evaluations per run: lazy 1, eager {lowered}, compiled 1"
    );
    println!();
    println!("per run, median us:");
    for (k, v) in &totals {
        println!("  {k:<14} {:>10.1}", median(v.clone()));
    }
    println!(
        "  compiled first call (trace, fuse, build kernels, run): {:.1}",
        first
    );
    println!("  compiled call   {:>10.1}", median(calls.clone()));
    println!("  compiled eval   {:>10.1}", median(evals.clone()));
    let both: Vec<f64> = calls.iter().zip(&evals).map(|(a, b)| a + b).collect();
    println!("  compiled        {:>10.1}", median(both));
    println!();

    // Per op kind: nodes, MLX ops, summed per-node medians.
    let mut by_kind: BTreeMap<String, KindRow> = BTreeMap::new();
    for r in &built {
        let e = by_kind.entry(r.kind.clone()).or_default();
        e.nodes += 1;
        e.ops += r.mlx_ops.len();
        e.lazy += median(r.lazy_build.clone());
        e.eager += median(r.eager.clone());
        for o in &r.mlx_ops {
            *e.prims.entry(o.clone()).or_default() += 1;
        }
    }
    let mut kinds: Vec<_> = by_kind.into_iter().collect();
    kinds.sort_by(|a, b| b.1.eager.total_cmp(&a.1.eager));
    println!(
        "| op kind | nodes | MLX ops | lazy build us | eager us | MLX primitives |\n|---|---:|---:|---:|---:|---|"
    );
    for (k, row) in kinds {
        let prims: Vec<String> = row
            .prims
            .iter()
            .map(|(p, c)| {
                if *c > 1 {
                    format!("{p} x{c}")
                } else {
                    p.clone()
                }
            })
            .collect();
        println!(
            "| {k} | {} | {} | {:.1} | {:.1} | {} |",
            row.nodes,
            row.ops,
            row.lazy,
            row.eager,
            prims.join(", ")
        );
    }
    if per_node {
        println!();
        println!("| node | MLX ops | lazy build us | eager us | MLX primitives |\n|---|---:|---:|---:|---|");
        for r in built {
            println!(
                "| {} | {} | {:.1} | {:.1} | {} |",
                r.label,
                r.mlx_ops.len(),
                median(r.lazy_build.clone()),
                median(r.eager.clone()),
                r.mlx_ops.join(" ")
            );
        }
    }
}
