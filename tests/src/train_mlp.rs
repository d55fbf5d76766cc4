//! The MLP the training tests and benches train, `loss = mean((relu(x·w1 +
//! b1)·w2 + b2 - t)^2)`, at the sizes each asks for, and the deterministic
//! values they fill it with.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_runtime::train::TrainableParam;

/// The sizes of [`mse_mlp`]: rows, input, hidden and output width.
#[derive(Clone, Copy, Debug)]
pub struct MlpDims {
    pub batch: usize,
    pub d_in: usize,
    pub d_hid: usize,
    pub d_out: usize,
}

/// The graph `name` (inputs `x`, `t`; params `w1`, `b1`, `w2`, `b2`) and
/// the params to train, in that order.
pub fn mse_mlp(name: &str, d: MlpDims) -> (Graph, Vec<TrainableParam>) {
    let mut g = Graph::new(name);
    let x = g.input("x", Shape::new(&[d.batch, d.d_in], DType::F32));
    let t = g.input("t", Shape::new(&[d.batch, d.d_out], DType::F32));
    let mut wrt = Vec::new();
    let mut param = |g: &mut Graph, name: &str, dims: &[usize]| {
        let id = g.param(name, Shape::new(dims, DType::F32));
        wrt.push(TrainableParam {
            name: name.into(),
            node: id,
        });
        id
    };
    let w1 = param(&mut g, "w1", &[d.d_in, d.d_hid]);
    let b1 = param(&mut g, "b1", &[1, d.d_hid]);
    let w2 = param(&mut g, "w2", &[d.d_hid, d.d_out]);
    let b2 = param(&mut g, "b2", &[1, d.d_out]);
    let h = g.mm(x, w1);
    let h = g.add(h, b1);
    let h = g.relu(h);
    let y = g.mm(h, w2);
    let y = g.add(y, b2);
    let diff = g.sub(y, t);
    let sq = g.mul(diff, diff);
    let loss = g.mean(sq, vec![0, 1], false);
    g.set_outputs(vec![loss]);
    (g, wrt)
}

/// `n` deterministic values in [-scale, scale) (a multiplicative hash of
/// the index and `seed`).
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
