//! The few whole graphs the kit compiles beyond its single-op cases: the
//! executable checks' `relu(x @ w) + b`, and check 9's graphs, built from
//! additions only (f32, small integers: every value exact, and any plugin that
//! claims `Binary` in f32 can run them).

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType as IrDType, Graph, Op, Shape};
use rlx_plugin_api::DType;
use rlx_plugin_loader::LoadedPlugin;

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, IrDType::F32)
}

pub fn text(g: &Graph) -> String {
    rlx_ir::rlxmodel::to_text(g).expect("the kit's graphs write as text")
}

/// `relu(x @ w) + b`: `x [m, k]` input, `w [k, n]` and `b [m, n]` params,
/// one output `y [m, n]`.
pub fn matmul_relu_add(m: usize, k: usize, n: usize) -> Graph {
    let mut g = Graph::new("matmul_relu_add");
    let x = g.input("x", f32s(&[m, k]));
    let w = g.param("w", f32s(&[k, n]));
    let b = g.param("b", f32s(&[m, n]));
    let mm = g.mm(x, w);
    let r = g.relu(mm);
    let y = g.add(r, b);
    g.set_named_outputs([("y", y)]);
    g
}

/// The counter's shape: every tensor of [`counter`] is f32[2, 3].
pub const COUNTER: [usize; 2] = [2, 3];

/// `next = x + s` (output 0, `"next"`: fed back into the state `s`) and
/// `y = next + w` (output 1, `"y"`; `w` a param): a running sum that
/// shows the state, and an output that shows which `w` a run used.
pub fn counter() -> Graph {
    let mut g = Graph::new("counter");
    let x = g.input("x", f32s(&COUNTER));
    let s = g.input("s", f32s(&COUNTER));
    let w = g.param("w", f32s(&COUNTER));
    let next = g.add(x, s);
    let y = g.add(next, w);
    g.set_named_outputs([("next", next), ("y", y)]);
    g
}

/// The cache of [`rows`]: `k` f32[1, 4, 2], 4 rows of 2.
pub const CACHE: [usize; 3] = [1, 4, 2];

/// A cache `k` (f32[1, 4, 2]) a step reads (output 1, `"kk"` = `k + k`)
/// and extends by a row (output 0, `"row"` = `t + t`, f32[1, 1, 2]; fed
/// `ROWS`): another shape than the cache, for the feed that must refuse it.
pub fn rows() -> Graph {
    let mut g = Graph::new("rows");
    let k = g.input("k", f32s(&CACHE));
    let t = g.input("t", f32s(&[1, 1, 2]));
    let row = g.add(t, t);
    let kk = g.add(k, k);
    g.set_named_outputs([("row", row), ("kk", kk)]);
    g
}

/// `RngUniform` in [0, 1) of f32[8], with no input.
pub fn uniform() -> Graph {
    let mut g = Graph::new("uniform");
    let op = Op::RngUniform {
        low: 0.0,
        high: 1.0,
        key: 3,
        op_seed: None,
    };
    let r = g.add_node(op, vec![], f32s(&[8]));
    g.set_named_outputs([("r", r)]);
    g
}

/// Does the plugin claim every op kind in f32?
pub fn claims_f32(p: &LoadedPlugin, kinds: &[&str]) -> bool {
    kinds.iter().all(|k| {
        p.supported_ops()
            .iter()
            .any(|o| o.op_kind == *k && o.dtypes.contains(&DType::F32))
    })
}

/// Why check 9's graphs cannot run, if the plugin lacks their ops.
pub fn additions_unclaimed(p: &LoadedPlugin) -> Option<String> {
    (!claims_f32(p, &["Input", "Param", "Binary"])).then(|| {
        "the kit's 1.9 graphs need Input, Param and Binary in f32, which the plugin does not claim"
            .to_string()
    })
}
