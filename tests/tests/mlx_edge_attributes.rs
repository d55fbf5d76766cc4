//! Integer attributes at the edges (0, 1, -1, 2^31 - 1, 2^31, 2^32 + 1,
//! i64::MIN, usize::MAX) of every op below that takes one, in every mode:
//! the plugin never panics, and a graph it runs gives outputs of the shape
//! rlx-ir's own inference gives the node (a wrapped size would give
//! another, or a wrong value of the right count). A case is either refused
//! (compile or run, with an error that is not a panic) or right-shaped.
//!
//! The bound that makes this hold is `plugin-mlx/src/bounds.rs`; this is
//! the table-driven counterpart of a fuzzer, small enough for every CI run.

use rlx_ir::infer_shape::infer_output_shape;
use rlx_ir::op::{PadMode, ReduceOp};
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_tests::edge::{outcome, Outcome};
use rlx_plugin_tests::parity::{mlx, MODES};

const EDGES_I64: [i64; 8] = [
    0,
    1,
    -1,
    i32::MAX as i64,
    i32::MAX as i64 + 1,
    (1 << 32) + 1,
    i64::MIN,
    i64::MAX,
];
const EDGES_USIZE: [usize; 7] = [
    0,
    1,
    2,
    i32::MAX as usize,
    i32::MAX as usize + 1,
    (1 << 32) + 1,
    usize::MAX,
];

/// The ops under test, for one edge value of each integer type, applied to
/// `x: f32[2, 3]`.
fn ops(i: i64, u: usize) -> Vec<Op> {
    vec![
        Op::Reshape {
            new_shape: vec![i, 6],
        },
        Op::Reshape { new_shape: vec![i] },
        Op::Expand {
            target_shape: vec![i, 2, 3],
        },
        Op::Transpose { perm: vec![u, 0] },
        Op::Narrow {
            axis: 1,
            start: u,
            len: 1,
        },
        Op::Narrow {
            axis: u,
            start: 0,
            len: 1,
        },
        Op::Slice {
            axis: 1,
            start: 0,
            len: u,
            step: i,
        },
        Op::Roll {
            shifts: vec![i],
            dims: vec![u],
        },
        Op::Reverse { axes: vec![u] },
        Op::Pad {
            pads: vec![[0, u], [u, 0]],
            mode: PadMode::Constant(0.0),
        },
        Op::Tile { reps: vec![u, 1] },
        Op::Trilu {
            upper: true,
            diagonal: i,
        },
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![u],
            keep_dim: false,
        },
        Op::Cumsum {
            axis: i as i32,
            exclusive: false,
        },
        Op::ArgMax {
            axis: u,
            keep_dim: true,
        },
        Op::Softmax { axis: i as i32 },
        Op::TopK { k: u },
        Op::Concat { axis: u },
    ]
}

/// The graph `op(x)`, the node declared at rlx-ir's inferred shape, or at
/// `f32[1]` where rlx-ir infers none (then the plugin must refuse it, or
/// run it to that shape). None where rlx-ir's inference itself panics.
fn graph(op: Op) -> Option<(Graph, Option<Shape>)> {
    let mut g = Graph::new("edge");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let placeholder = Shape::new(&[1], DType::F32);
    let y = g.add_node(op, vec![x], placeholder.clone());
    g.set_outputs(vec![y]);
    let inferred = std::panic::catch_unwind(|| infer_output_shape(&g, g.node(y))).ok()?;
    // The node as a user would write it: at the inferred shape.
    let mut h = Graph::new("edge");
    let x = h.input("x", Shape::new(&[2, 3], DType::F32));
    let node = g.node(y);
    let y = h.add_node(
        node.op.clone(),
        vec![x],
        inferred.clone().unwrap_or(placeholder),
    );
    h.set_outputs(vec![y]);
    Some((h, inferred))
}

#[test]
fn edge_attributes_are_refused_or_right_shaped_never_a_panic() {
    let plugin = mlx();
    let (mut ran, mut refused) = (0, 0);
    let cases: Vec<Op> = EDGES_I64
        .iter()
        .zip(EDGES_USIZE.iter().cycle())
        .flat_map(|(&i, &u)| ops(i, u))
        .chain(EDGES_USIZE.iter().flat_map(|&u| ops(u as i64, u)))
        .collect();
    for op in cases {
        let what = format!("{op:?}");
        let Some((g, inferred)) = graph(op) else {
            continue;
        };
        // rlx-ir's own writer and inference overflow (debug panics) on
        // some of these: such a case has no text to send.
        let Ok(Ok(text)) = std::panic::catch_unwind(|| rlx_ir::rlxmodel::to_text(&g)) else {
            continue;
        };
        let declared: Vec<usize> = g
            .shape(g.outputs[0])
            .dims()
            .iter()
            .map(|d| d.unwrap_static())
            .collect();
        for mode in MODES {
            let tag = format!("[{}] {what}", mode.name());
            match outcome(&plugin, &text, mode, &tag) {
                Outcome::Ran { shape, bits } => {
                    ran += 1;
                    assert_eq!(shape, declared, "{tag}: output shape");
                    assert_eq!(bits.len(), declared.iter().product::<usize>() * 4, "{tag}");
                    assert!(
                        inferred.is_some(),
                        "{tag}: ran although rlx-ir infers no shape for it"
                    );
                }
                Outcome::Refused => refused += 1,
            }
        }
    }
    eprintln!("{ran} runs, {refused} refusals");
    // Both outcomes happen: the table is not all refusals.
    assert!(ran > 20 && refused > 20, "ran {ran}, refused {refused}");
}
