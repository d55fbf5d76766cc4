//! Compiled mode's elementwise regions as planned on rlx's graph
//! (`rlx_mlx::executable::fusion`): which nodes one region holds, what it
//! reads and hands out, where it goes in the evaluation order, and the
//! regions not made (past MLX's 24 arrays a kernel; closing a cycle). The
//! kernels themselves are checked against f64 in
//! `tests/tests/mlx_fused_regions.rs`.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, NodeId, Shape};
use rlx_mlx::executable::fusion::{Fusion, Item};

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// `m' = m·b1 + g·c; p' = p - m'/s`: one region, two outputs (m' is
/// read by p' and returned), the constants and the scalar as operands.
#[test]
fn a_value_read_twice_stays_in_one_region_with_two_outputs() {
    let mut g = Graph::new("t");
    let m = g.input("m", f32s(&[4, 5]));
    let gr = g.input("g", f32s(&[4, 5]));
    let p = g.input("p", f32s(&[4, 5]));
    let sc = g.input("s", Shape::scalar(DType::F32));
    let b1 = g.constant(0.9, DType::F32);
    let c = g.constant(0.1, DType::F32);
    let md = g.mul(m, b1);
    let gs = g.mul(gr, c);
    let m2 = g.add(md, gs);
    let q = g.div(m2, sc);
    let p2 = g.sub(p, q);
    g.set_outputs(vec![p2, m2]);
    let f = Fusion::plan(&g, &|_| true).expect("a region");
    assert_eq!(f.regions.len(), 1);
    let r = &f.regions[0];
    assert_eq!(r.members, vec![md, gs, m2, q, p2]);
    let outs: Vec<NodeId> = r.outputs.iter().map(|(id, _)| *id).collect();
    assert_eq!(outs, vec![m2, p2]);
    assert_eq!(r.inputs, vec![m, b1, gr, c, sc, p]);
    assert_eq!(r.constant, vec![false, true, false, true, false, false]);
    // The region is one item of the order, after all its inputs.
    let at = |it: Item| f.order.iter().position(|x| *x == it).unwrap();
    for i in &r.inputs {
        assert!(at(Item::Node(*i)) < at(Item::Region(0)));
    }
    assert!(!f.order.contains(&Item::Node(md)));
}

/// A chain reading 30 inputs would need 31 arrays: left to MLX.
#[test]
fn a_region_of_more_than_24_arrays_is_not_made() {
    let mut g = Graph::new("wide");
    let mut acc = g.input("x0", f32s(&[8]));
    for k in 1..30 {
        let x = g.input(format!("x{k}"), f32s(&[8]));
        acc = g.add(acc, x);
    }
    g.set_outputs(vec![acc]);
    assert!(Fusion::plan(&g, &|_| true).is_none());
}

/// `y = x·w; z = y·sum(y)`: the region {y, z} would read its own
/// output through the sum: not made.
#[test]
fn a_region_that_would_close_a_cycle_is_not_made() {
    let mut g = Graph::new("cycle");
    let x = g.input("x", f32s(&[3, 4]));
    let w = g.input("w", f32s(&[3, 4]));
    let y = g.mul(x, w);
    let s = g.sum(y, vec![0, 1], false);
    let z = g.mul(y, s);
    g.set_outputs(vec![z]);
    assert!(Fusion::plan(&g, &|_| true).is_none());
}

/// `RLX_MLX_OP_COUNTS`' line: the graph, the mode, the total and each kind.
#[test]
fn an_op_count_line_counts_each_kind_and_the_total() {
    let ops: Vec<String> = ["Add", "Matmul", "Add", "Broadcast"]
        .map(String::from)
        .to_vec();
    let line = rlx_mlx::op_counts::line("g\"1", rlx_plugin_api::Mode::Lazy, &ops);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["graph"], "g\"1");
    assert_eq!(v["mode"], "lazy");
    assert_eq!(v["total"], 4);
    assert_eq!(v["ops"]["Add"], 2);
    assert_eq!(v["ops"]["Matmul"], 1);
    assert_eq!(v["ops"]["Broadcast"], 1);
}
