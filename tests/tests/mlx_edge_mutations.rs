//! Every integer attribute of every op the plugin claims, set to the edges
//! (0, 1, 2, -1, 2^31 - 1, 2^31, 2^32 + 1, i64::MIN, i64::MAX, u64::MAX),
//! in a graph that exercises that op: never a panic, and a graph the plugin
//! runs gives an output of the shape rlx-ir's own inference gives the node.
//! A case rlx-ir's shape rule rejects must be refused.
//! `mlx_edge_attributes.rs` holds a hand-written table of such cases; this
//! derives them from the fuzz corpus, for every op kind it holds.
//!
//! How a case is made: the smallest corpus graph with a node of the kind,
//! cut after that node (its only output); the node's op written through
//! rlx-ir's serde form, one integer in it replaced, read back (a value its
//! field's type cannot hold is refused by serde and not a case), the node's
//! shape inferred again by rlx-ir. Ops whose attributes nest graphs (If,
//! While, Scan...) have their bodies' integers mutated too.
//!
//! The release build: with `RLX_TEST_MLX_RELEASE_DIR` naming a release
//! build's plugin directory, every case also runs there, and the two builds
//! must agree (both refuse, or both run to the same shape and the same
//! values). The debug run alone answers for release arithmetic (a product
//! that overflows panics there, and rlx-ir keeps its overflow checks in
//! release: docs/RELIABILITY.md); the comparison adds eager mode and the
//! optimised C++.

use rlx_ir::infer_shape::infer_output_shape_reporting;
use rlx_ir::{Graph, NodeId, Op, OpKind};
use rlx_plugin_api::Mode;
use rlx_plugin_loader::{LoadedPlugin, PluginSet};
use rlx_plugin_tests::edge::{outcome, Outcome};
use rlx_plugin_tests::only_dir;
use rlx_plugin_tests::parity::mlx;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The edges, as JSON numbers serde reads into whatever integer type the
/// field has (or refuses).
fn edges() -> Vec<Value> {
    let signed: [i64; 9] = [
        0,
        1,
        2,
        -1,
        i32::MAX as i64,
        i32::MAX as i64 + 1,
        (1 << 32) + 1,
        i64::MIN,
        i64::MAX,
    ];
    let mut v: Vec<Value> = signed.iter().map(|&n| Value::from(n)).collect();
    v.push(Value::from(u64::MAX));
    v
}

/// Integers a case mutates per op, at most (the first ones in serde order).
const MAX_LEAVES: usize = 8;
/// The modes a case runs in when the release build is compared (compiled
/// mode builds a C++ kernel per new fused graph on the CPU: seconds each);
/// alone, the debug build runs lazy mode only (about half the time).
const MODES: [Mode; 2] = [Mode::Lazy, Mode::Eager];

/// The compile/run corpus, parsed, smallest first.
fn corpus() -> Vec<Graph> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/compile_run");
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|(_, p)| {
            let text = std::fs::read_to_string(p).ok()?;
            std::panic::catch_unwind(|| rlx_ir::rlxmodel::from_text(&text).ok())
                .ok()
                .flatten()
        })
        .filter(|g| !g.has_dynamic_dims())
        .collect()
}

/// Paths to every integer in a JSON value, in serde order.
fn integer_paths(v: &Value, at: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => out.push(at.clone()),
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                at.push(PathStep::Index(i));
                integer_paths(x, at, out);
                at.pop();
            }
        }
        Value::Object(map) => {
            for (k, x) in map {
                at.push(PathStep::Key(k.clone()));
                integer_paths(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Index(usize),
    Key(String),
}

fn at_path<'a>(v: &'a mut Value, path: &[PathStep]) -> &'a mut Value {
    path.iter().fold(v, |v, s| match s {
        PathStep::Index(i) => &mut v[*i],
        PathStep::Key(k) => &mut v[k.as_str()],
    })
}

/// What rlx-ir's shape rule makes of a node.
enum Rule {
    /// The shape its attributes and operands give.
    Gives(rlx_ir::Shape),
    /// The rule rejects them (or overflows on them).
    Rejects,
    /// rlx-ir has no rule for it.
    None,
}

/// `g` cut after `id` (nodes are in order: each reads earlier ones), with
/// `id`'s op replaced by `op`, declared at the shape rlx-ir's rule gives it
/// (the original's shape where there is none).
fn cut(g: &Graph, id: NodeId, op: Op) -> (Graph, Rule) {
    let mut h = Graph::new("edge");
    for n in &g.nodes()[..id.0 as usize] {
        h.append_node(
            n.op.clone(),
            n.inputs.clone(),
            n.shape.clone(),
            n.name.clone(),
        );
    }
    let n = g.node(id);
    let y = h.append_node(op, n.inputs.clone(), n.shape.clone(), n.name.clone());
    h.set_outputs(vec![y]);
    let rule = match std::panic::catch_unwind(|| infer_output_shape_reporting(&h, h.node(y))) {
        Ok((Some(s), _)) => Rule::Gives(s),
        Ok((None, None)) => Rule::None,
        Ok((None, Some(_))) | Err(_) => Rule::Rejects,
    };
    if let Rule::Gives(s) = &rule {
        h.node_mut(y).shape = s.clone();
    }
    (h, rule)
}

/// The release build's plugin, when `RLX_TEST_MLX_RELEASE_DIR` names its
/// directory.
fn release_plugin() -> Option<Arc<LoadedPlugin>> {
    let dir = std::env::var_os("RLX_TEST_MLX_RELEASE_DIR")?;
    let set = PluginSet::load(&only_dir(Path::new(&dir)));
    let p = set
        .select("mlx")
        .unwrap_or_else(|| panic!("no mlx plugin loads from {dir:?}"));
    eprintln!("comparing with the release build in {dir:?}");
    Some(p)
}

#[test]
fn every_claimed_ops_integers_at_the_edges() {
    // Sizes past what a test machine holds are refused, not allocated.
    std::env::set_var("RLX_MLX_MEMORY_LIMIT", "16M");
    std::env::set_var("RLX_MLX_WHILE_LIMIT", "10000");
    let debug = mlx();
    let release = release_plugin();
    if release.is_none() {
        eprintln!(
            "RLX_TEST_MLX_RELEASE_DIR is not set: the release build is not compared \
             (docs/RELIABILITY.md says how)"
        );
    }
    let graphs = corpus();
    let claimed: Vec<String> = debug
        .supported_ops()
        .iter()
        .map(|o| o.op_kind.clone())
        .collect();
    let (mut cases, mut ran, mut refused, mut compared) = (0usize, 0usize, 0usize, 0usize);
    let mut untested = Vec::new();
    for kind in &claimed {
        // The smallest graph with a node of this kind that carries integers.
        let found = graphs.iter().find_map(|g| {
            g.nodes().iter().find_map(|n| {
                let k: OpKind = n.op.kind();
                if format!("{k:?}") != *kind {
                    return None;
                }
                let v = serde_json::to_value(&n.op).ok()?;
                let mut paths = Vec::new();
                integer_paths(&v, &mut Vec::new(), &mut paths);
                (!paths.is_empty()).then_some((g, n.id, v, paths))
            })
        });
        let Some((g, id, value, paths)) = found else {
            untested.push(kind.as_str());
            continue;
        };
        for path in paths.iter().take(MAX_LEAVES) {
            for edge in edges() {
                let mut v = value.clone();
                *at_path(&mut v, path) = edge.clone();
                let Ok(op) = serde_json::from_value::<Op>(v) else {
                    continue;
                };
                let (h, rule) = cut(g, id, op);
                // rlx-ir's writer overflows (debug panics) on some values:
                // such a case has no text to send.
                let Ok(Ok(text)) = std::panic::catch_unwind(|| rlx_ir::rlxmodel::to_text(&h))
                else {
                    continue;
                };
                cases += 1;
                let declared: Vec<usize> = h
                    .shape(h.outputs[0])
                    .dims()
                    .iter()
                    .map(|d| d.unwrap_static())
                    .collect();
                let modes = if release.is_some() {
                    &MODES[..]
                } else {
                    &MODES[..1]
                };
                for &mode in modes {
                    let tag = format!("[{}] {kind} {path:?} = {edge}", mode.name());
                    let got = outcome(&debug, &text, mode, &tag);
                    if let Outcome::Ran { shape, .. } = &got {
                        ran += 1;
                        assert!(
                            !matches!(rule, Rule::Rejects),
                            "{tag}: ran although rlx-ir's shape rule rejects it"
                        );
                        assert_eq!(shape, &declared, "{tag}: output shape");
                    } else {
                        refused += 1;
                    }
                    if let Some(r) = &release {
                        let theirs = outcome(r, &text, mode, &format!("{tag} (release)"));
                        assert!(
                            outcomes_agree(&got, &theirs),
                            "{tag}: the debug build gave {} and the release build {}",
                            summary(&got),
                            summary(&theirs)
                        );
                        compared += 1;
                    }
                }
            }
        }
    }
    eprintln!(
        "{} op kinds claimed, {} without a corpus graph that sets an integer ({}); \
         {cases} cases: {ran} runs, {refused} refusals, {compared} compared with the release build",
        claimed.len(),
        untested.len(),
        untested.join(", ")
    );
    // Both outcomes, many times: the cases are not all refusals.
    assert!(ran > 40 && refused > 200, "ran {ran}, refused {refused}");
}

/// Equal outcomes; NaNs of any payload are equal, as the bits of values
/// computed the same way may differ only there.
fn outcomes_agree(a: &Outcome, b: &Outcome) -> bool {
    match (a, b) {
        (Outcome::Refused, Outcome::Refused) => true,
        (
            Outcome::Ran {
                shape: s1,
                bits: b1,
            },
            Outcome::Ran {
                shape: s2,
                bits: b2,
            },
        ) => s1 == s2 && (b1 == b2 || same_f32_up_to_nan(b1, b2)),
        _ => false,
    }
}

fn same_f32_up_to_nan(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.len().is_multiple_of(4)
        && a.chunks_exact(4).zip(b.chunks_exact(4)).all(|(x, y)| {
            let (x, y) = (
                f32::from_le_bytes(x.try_into().unwrap()),
                f32::from_le_bytes(y.try_into().unwrap()),
            );
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        })
}

fn summary(o: &Outcome) -> String {
    match o {
        Outcome::Refused => "a refusal".into(),
        Outcome::Ran { shape, .. } => format!("a run to {shape:?}"),
    }
}
