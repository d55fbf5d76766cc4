//! The 8x8 handwritten digits (`tests/data/digits`, scikit-learn's
//! `digits.csv.gz`) and the MLP classifier trained on them: data, split,
//! graphs, initial params and accuracy, shared by the distributed training
//! command (`rlx-host dist train`) and the tests.

use crate::models::mean_softmax_cross_entropy;
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};
use rlx_runtime::{Device, Session};
use std::io::Read;
use std::path::Path;

/// Images, pixels per image (8x8), classes.
pub const ROWS: usize = 1797;
pub const D: usize = 64;
pub const C: usize = 10;
/// Held-out images (a fifth, rounded down) and the training rows.
pub const TEST: usize = 360;
pub const TRAIN: usize = ROWS - TEST;
/// Hidden units.
pub const H: usize = 64;
/// Seeds: the train / held-out split, the initial params.
pub const SPLIT_SEED: u64 = 1797;
pub const INIT_SEED: u64 = 64;

/// The data file in this repository.
pub fn default_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/digits/digits.csv.gz")
}

/// Rows of images `x [n, D]` scaled to [0, 1] and labels as f32 class
/// indices (what SoftmaxCrossEntropyWithLogits takes).
#[derive(Clone, Debug)]
pub struct Part {
    pub x: Vec<f32>,
    pub labels: Vec<f32>,
}

impl Part {
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    /// Rows `rows` of this part, in that order.
    pub fn rows(&self, rows: impl IntoIterator<Item = usize>) -> Part {
        let mut p = Part {
            x: Vec::new(),
            labels: Vec::new(),
        };
        for r in rows {
            p.x.extend_from_slice(&self.x[r * D..(r + 1) * D]);
            p.labels.push(self.labels[r]);
        }
        p
    }
}

/// The digits as `(pixels [ROWS * D] in 0..16, labels [ROWS] in 0..9)`,
/// read from the gzipped CSV and checked: 1,797 rows of 64 integer pixels
/// in 0..=16 and an integer label in 0..=9.
pub fn load(path: &Path) -> Result<(Vec<f32>, Vec<usize>), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut pixels = Vec::with_capacity(ROWS * D);
    let mut labels = Vec::with_capacity(ROWS);
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != D + 1 {
            return Err(format!(
                "row {i}: {} fields, not 64 pixels and a label",
                fields.len()
            ));
        }
        for f in &fields[..D] {
            let v: u32 = f.parse().map_err(|e| format!("row {i}: {f:?}: {e}"))?;
            if v > 16 {
                return Err(format!("row {i}: pixel {v} outside 0..16"));
            }
            pixels.push(v as f32);
        }
        let label: usize = fields[D]
            .parse()
            .map_err(|e| format!("row {i}: label {:?}: {e}", fields[D]))?;
        if label >= C {
            return Err(format!("row {i}: label {label}"));
        }
        labels.push(label);
    }
    if labels.len() != ROWS {
        return Err(format!("{} rows, expected {ROWS}", labels.len()));
    }
    Ok((pixels, labels))
}

/// `(train, held-out)`: a seeded shuffle of the row indices, the first
/// TEST held out, the rest the training rows. Pixels scaled by 1/16
/// (exact in f32).
pub fn split(pixels: &[f32], labels: &[usize]) -> (Part, Part) {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut order: Vec<usize> = (0..ROWS).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(SPLIT_SEED));
    let part = |rows: &[usize]| Part {
        x: rows
            .iter()
            .flat_map(|&r| pixels[r * D..(r + 1) * D].iter().map(|p| p / 16.0))
            .collect(),
        labels: rows.iter().map(|&r| labels[r] as f32).collect(),
    };
    (part(&order[TEST..]), part(&order[..TEST]))
}

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

/// `x [batch, D] -> relu(x w1 + b1) w2 + b2`: the logits, with the graph
/// and the params `[w1, b1, w2, b2]` (in [`init`]'s order).
pub fn mlp(name: &str, batch: usize) -> (Graph, NodeId, Vec<NodeId>) {
    crate::models::relu_mlp(name, batch, D, H, C)
}

/// The training forward on `batch` rows: input `labels [batch]`, output
/// the mean cross-entropy `[1]`; with its params for `grad_with_loss`.
pub fn loss_graph(batch: usize) -> (Graph, Vec<NodeId>) {
    let (mut g, logits, params) = mlp("digits_forward", batch);
    let labels = g.input("labels", f32s(&[batch]));
    let loss = mean_softmax_cross_entropy(&mut g, logits, labels, batch);
    g.set_outputs(vec![loss]);
    (g, params)
}

/// One data-parallel replica's training forward, for
/// `rlx_runtime::train::ResidentTrainer` on the MLX plugin: [`loss_graph`]
/// with the params read through one `mlx.grad_sum` (the identity whose
/// gradient is the sum over the workers' MLX group) of all of them
/// flattened and concatenated, so the backward sums every gradient in one
/// collective a step; and the loss divided by `workers`, so that sum is the
/// gradient of the mean loss over all workers' rows. The params keep their
/// names and nodes (the trainer binds and updates them). Needs the
/// plugin's custom ops registered with rlx-ir.
pub fn replica_loss_graph(batch: usize, workers: usize) -> (Graph, Vec<NodeId>) {
    use rlx_ir::infer::GraphExt;
    let mut g = Graph::new("digits_replica");
    let x = g.input("x", f32s(&[batch, D]));
    let dims: [&[usize]; 4] = [&[D, H], &[H], &[H, C], &[C]];
    let params: Vec<NodeId> = ["w1", "b1", "w2", "b2"]
        .iter()
        .zip(dims)
        .map(|(n, d)| g.param(*n, f32s(d)))
        .collect();
    let sizes: Vec<usize> = dims.iter().map(|d| d.iter().product()).collect();
    let flat: Vec<NodeId> = params
        .iter()
        .zip(&sizes)
        .map(|(&p, &n)| g.reshape_(p, vec![n as i64]))
        .collect();
    let bucket = g.concat_(flat, 0);
    let summed = g.custom_op("mlx.grad_sum", vec![], vec![bucket]);
    let mut at = 0;
    let p: Vec<NodeId> = sizes
        .iter()
        .zip(dims)
        .map(|(&n, d)| {
            let part = g.narrow_(summed, 0, at, n);
            at += n;
            g.reshape_(part, d.iter().map(|&v| v as i64).collect())
        })
        .collect();
    let xw = g.add_node(Op::MatMul, vec![x, p[0]], f32s(&[batch, H]));
    let h = g.add_node(Op::Binary(BinaryOp::Add), vec![xw, p[1]], f32s(&[batch, H]));
    let r = g.add_node(Op::Activation(Activation::Relu), vec![h], f32s(&[batch, H]));
    let rw = g.add_node(Op::MatMul, vec![r, p[2]], f32s(&[batch, C]));
    let logits = g.add_node(Op::Binary(BinaryOp::Add), vec![rw, p[3]], f32s(&[batch, C]));
    let labels = g.input("labels", f32s(&[batch]));
    let loss = mean_softmax_cross_entropy(&mut g, logits, labels, batch);
    let scale = g.constant(1.0 / workers as f64, DType::F32);
    let loss = g.mul(loss, scale);
    g.set_outputs(vec![loss]);
    (g, params)
}

/// rlx-opt's `grad_with_loss` of [`loss_graph`]: outputs `[loss, dw1,
/// db1, dw2, db2]`, fed `d_output = [1.0]`.
pub fn train_graph(batch: usize) -> Graph {
    let (forward, wrt) = loss_graph(batch);
    rlx_opt::grad_with_loss(&forward, &wrt)
}

/// The evaluation forward: logits `[rows, C]`.
pub fn eval_graph(rows: usize) -> Graph {
    let (mut g, logits, _) = mlp("digits_eval", rows);
    g.set_outputs(vec![logits]);
    g
}

/// Initial params `(name, values)`: He-uniform w1 (±sqrt(6 / fan_in), a
/// ReLU follows), uniform ±1/sqrt(fan_in) w2, zero biases.
pub fn init() -> Vec<(&'static str, Vec<f32>)> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(INIT_SEED);
    let mut w = |n: usize, bound: f32| -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(-bound..bound)).collect()
    };
    let w1 = w(D * H, (6.0 / D as f32).sqrt());
    let w2 = w(H * C, 1.0 / (H as f32).sqrt());
    vec![
        ("w1", w1),
        ("b1", vec![0.0; H]),
        ("w2", w2),
        ("b2", vec![0.0; C]),
    ]
}

/// Accuracy of `params` on `part`, run on `device` (argmax of the logits,
/// the first maximum on a tie).
pub fn accuracy(device: Device, params: &[(String, Vec<f32>)], part: &Part) -> f64 {
    let mut compiled = Session::new(device).compile(eval_graph(part.len()));
    for (name, v) in params {
        compiled.set_param(name, v);
    }
    let outs = compiled.run(&[("x", &part.x)]);
    let correct = outs[0]
        .chunks(C)
        .zip(&part.labels)
        .filter(|(z, &label)| {
            let best = z
                .iter()
                .enumerate()
                .fold(0, |b, (c, v)| if *v > z[b] { c } else { b });
            best == label as usize
        })
        .count();
    correct as f64 / part.len() as f64
}
