//! The MLP that `train` (and the `op_counts` bench) trains, and the
//! deterministic values it starts from.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::train::TrainableParam;
use std::collections::HashMap;

pub const BATCH: usize = 256;
pub const D_IN: usize = 1024;
pub const D_HID: usize = 4096;
pub const D_OUT: usize = 1024;

/// `loss = mean((relu(x·w1 + b1)·w2 + b2 - t)^2)`.
pub fn mlp() -> (Graph, Vec<TrainableParam>) {
    let mut g = Graph::new("mlp_train");
    let x = g.input("x", Shape::new(&[BATCH, D_IN], DType::F32));
    let t = g.input("t", Shape::new(&[BATCH, D_OUT], DType::F32));
    let mut wrt = Vec::new();
    let mut param = |g: &mut Graph, name: &str, dims: &[usize]| {
        let id = g.param(name, Shape::new(dims, DType::F32));
        wrt.push(TrainableParam {
            name: name.into(),
            node: id,
        });
        id
    };
    let w1 = param(&mut g, "w1", &[D_IN, D_HID]);
    let b1 = param(&mut g, "b1", &[1, D_HID]);
    let w2 = param(&mut g, "w2", &[D_HID, D_OUT]);
    let b2 = param(&mut g, "b2", &[1, D_OUT]);
    let h = g.mm(x, w1);
    let h = g.add(h, b1);
    let h = g.relu(h);
    let y = g.mm(h, w2);
    let y = g.add(y, b2);
    let d = g.sub(y, t);
    let sq = g.mul(d, d);
    let loss = g.mean(sq, vec![0, 1], false);
    g.set_outputs(vec![loss]);
    (g, wrt)
}

pub fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            ((h >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The initial parameters, by name.
pub fn initial() -> HashMap<String, Vec<f32>> {
    [
        ("w1", values(D_IN * D_HID, 1, 0.03)),
        ("b1", vec![0.0; D_HID]),
        ("w2", values(D_HID * D_OUT, 2, 0.015)),
        ("b2", vec![0.0; D_OUT]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// One batch: inputs `x` and targets `t`.
pub fn batch() -> (Vec<f32>, Vec<f32>) {
    (values(BATCH * D_IN, 3, 1.0), values(BATCH * D_OUT, 4, 1.0))
}
