//! The graphs the state steps of `sequences` compile, and their run inputs.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType as IrDType, Graph, Op, Shape};
use rlx_plugin_api::{DType, HostTensor, HostTensorRef};

pub fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, IrDType::F32)
}

/// The graphs, by `Kind::Graph` index: a counter (`s` fed from `next`),
/// a cache (`k` fed rows of `row`), an f16 accumulator, random draws.
pub fn graph(i: u8) -> String {
    let mut g = Graph::new("state");
    match i % 4 {
        0 => {
            let x = g.input("x", f32s(&[2, 3]));
            let s = g.input("s", f32s(&[2, 3]));
            let w = g.param("w", f32s(&[2, 3]));
            let next = g.add(x, s);
            let y = g.mul(next, w);
            g.set_named_outputs([("next", next), ("y", y)]);
        }
        1 => {
            let k = g.input("k", f32s(&[1, 4, 2]));
            let t = g.input("t", f32s(&[1, 1, 2]));
            let row = g.add(t, t);
            let kk = g.sum(k, vec![1], false);
            g.set_named_outputs([("row", row), ("kk", kk)]);
        }
        2 => {
            let half = Shape::new(&[3], IrDType::F16);
            let h = g.input("h", half.clone());
            let u = g.input("u", half.clone());
            let w = g.param("w", half);
            let out = g.add(h, u);
            let y = g.add(out, w);
            g.set_named_outputs([("out", out), ("y", y)]);
        }
        _ => {
            let op = Op::RngUniform {
                low: 0.0,
                high: 1.0,
                key: 5,
                op_seed: None,
            };
            let r = g.add_node(op, vec![], f32s(&[4]));
            let x = g.input("x", f32s(&[4]));
            let y = g.add(r, x);
            g.set_named_outputs([("r", r), ("y", y)]);
        }
    }
    rlx_ir::rlxmodel::to_text(&g).expect("graph to text")
}

/// The inputs of graph `i`: the run's own, its state input when asked,
/// of another shape when `wrong`.
pub fn inputs(i: u8, give_state: bool, wrong: bool) -> Vec<(&'static str, HostTensor)> {
    let t = |dtype: DType, shape: &[usize]| {
        let shape = if wrong {
            vec![shape.iter().product::<usize>() + 1]
        } else {
            shape.to_vec()
        };
        let n: usize = shape.iter().product();
        HostTensor::new(dtype, shape, vec![0x3c; n * dtype.size_bytes()]).expect("sized")
    };
    let (own, state) = match i % 4 {
        0 => (
            ("x", t(DType::F32, &[2, 3])),
            Some(("s", t(DType::F32, &[2, 3]))),
        ),
        1 => (
            ("t", t(DType::F32, &[1, 1, 2])),
            Some(("k", t(DType::F32, &[1, 4, 2]))),
        ),
        2 => (("u", t(DType::F16, &[3])), Some(("h", t(DType::F16, &[3])))),
        _ => (("x", t(DType::F32, &[4])), None),
    };
    let mut v = vec![own];
    v.extend(state.filter(|_| give_state));
    v
}

pub fn refs<'a>(v: &'a [(&'static str, HostTensor)]) -> Vec<(&'static str, HostTensorRef<'a>)> {
    v.iter()
        .map(|(n, t)| (*n, HostTensorRef::from(t)))
        .collect()
}
