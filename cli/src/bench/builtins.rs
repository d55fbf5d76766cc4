//! The builtin benchmark models, and resolving the MODEL argument (a
//! builtin name or a `.rlxmodel` file) to a graph.
//!
//! The sizes are fixed so that figures taken on different machines, and
//! by `scripts/bench_peers.py` (which builds the same graphs in Python),
//! time the same work.

use crate::models::{self, MlpConfig, TransformerConfig};
use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use std::path::Path;

/// The names `bench` accepts besides a file path.
pub const NAMES: [&str; 17] = [
    "mlp",
    "mlp-bf16",
    "matmuls",
    "gelu",
    "add-broadcast",
    "exp4",
    "transformer",
    "decoder-s1",
    "decoder-s128",
    "lstm",
    "scan1000",
    "mlp-train",
    "params-1g",
    "pocketfft",
    "pocketfft-op",
    "pocketfft-rows",
    "transfer",
];

/// Rows of the MLP's input.
const BATCH: usize = 256;
/// The MLP's input and output width.
const D_MODEL: usize = 1024;
/// The MLP's hidden width.
const D_HIDDEN: usize = 4096;

/// A model to benchmark.
pub struct BenchModel {
    pub graph: Graph,
    /// The builtin's name or the file's path, as given.
    pub name: String,
    /// True for a builtin (the Python peers can only time those).
    pub builtin: bool,
    /// One line saying what it is.
    pub description: String,
}

/// The builtin called `name`.
pub fn builtin(name: &str) -> Option<BenchModel> {
    let (graph, description) = match name {
        "mlp" => {
            let m = models::mlp(&mlp_config());
            (m.graph, format!("{}, f32", m.description))
        }
        "mlp-bf16" => (
            mlp_typed(DType::BF16),
            format!("2-layer MLP ({D_MODEL} -> {D_HIDDEN} -> {D_MODEL}, gelu), batch {BATCH}, bf16"),
        ),
        "matmuls" => (
            matmuls(),
            format!("x [{BATCH}, {D_MODEL}] @ w1 [{D_MODEL}, {D_HIDDEN}] @ w2 [{D_HIDDEN}, {D_MODEL}], f32 (the MLP without bias and GELU)"),
        ),
        "gelu" => (
            unary(&[BATCH, D_HIDDEN], |g, x| g.gelu(x)),
            format!("GELU (erf form) of x [{BATCH}, {D_HIDDEN}], f32"),
        ),
        "add-broadcast" => (
            add_broadcast(),
            format!("x [{BATCH}, {D_HIDDEN}] + b [{D_HIDDEN}], f32"),
        ),
        "exp4" => (
            unary(&[4], |g, x| g.exp(x)),
            "exp of x [4], f32 (per-run overhead)".to_string(),
        ),
        "transformer" => {
            let m = models::transformer(&TransformerConfig::default());
            (m.graph, format!("{} (the demo's)", m.description))
        }
        "decoder-s1" | "decoder-s128" => {
            let seq = if name == "decoder-s1" { 1 } else { 128 };
            let m = models::transformer(&TransformerConfig::decoder(seq));
            (m.graph, m.description)
        }
        "lstm" => (
            lstm(),
            "LSTM over x [8, 256, 64], hidden 128, one layer, f32".to_string(),
        ),
        "scan1000" => (
            scan1000(),
            "Scan of 1,000 steps: c = tanh(c * w + x_t), c [64], f32".to_string(),
        ),
        "mlp-train" => (
            mlp_train(),
            "one training step (forward + rlx-opt autodiff backward) of an MLP 784 -> 256 -> 10, ReLU, softmax cross-entropy, batch 256, f32".to_string(),
        ),
        "params-1g" => (
            params_1g(),
            format!("x [1, {PARAMS_1G_WIDTH}] @ w [{PARAMS_1G_WIDTH}, {PARAMS_1G_WIDTH}], f32: 1 GiB of params (BIND MS is the figure)"),
        ),
        "pocketfft" => (
            pocketfft(),
            format!(
                "pocketfft, rows={POCKETFFT_ROWS} n={POCKETFFT_N}, f32, as rlx lowers it for a backend \
                 without a pocketfft kernel: thousands of tiny elementwise, slice and concat nodes"
            ),
        ),
        "pocketfft-op" => (
            pocketfft_op(POCKETFFT_ROWS, POCKETFFT_N),
            format!(
                "pocketfft, rows={POCKETFFT_ROWS} n={POCKETFFT_N}, f32, as one Fft node with \
                 pocketfft's rounding (a backend with the kernel runs it whole; rlx-runtime \
                 replays it in elementwise nodes for one without)"
            ),
        ),
        "pocketfft-rows" => (
            pocketfft_op(POCKETFFT_BATCH_ROWS, POCKETFFT_BATCH_N),
            format!(
                "pocketfft, rows={POCKETFFT_BATCH_ROWS} n={POCKETFFT_BATCH_N}, f32, as one Fft node \
                 (the example's batched case below the plugin's thread split)"
            ),
        ),
        "transfer" => (
            unary(&[TRANSFER_ROWS, D_MODEL], |g, x| g.exp(x)),
            format!(
                "exp of x [{TRANSFER_ROWS}, {D_MODEL}], f32: 1.3 MB in and out, little work \
                 (on a GPU a run is mostly its two copies across the bus)"
            ),
        ),
        _ => return None,
    };
    Some(BenchModel {
        graph,
        name: name.to_string(),
        builtin: true,
        description,
    })
}

/// MODEL as given on the command line: an existing file is read as
/// `.rlxmodel` text; otherwise it must be a builtin name.
pub fn resolve(model: &str) -> Result<BenchModel, String> {
    let path = Path::new(model);
    if path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read model {}: {e}", path.display()))?;
        rlx_plugin_api::graph_text::check_nesting(&text).map_err(|e| format!("{model}: {e}"))?;
        let graph = rlx_ir::rlxmodel::from_text(&text).map_err(|e| {
            format!(
                "{}: not a valid .rlxmodel: {}",
                path.display(),
                e.to_string().replace('\n', " ")
            )
        })?;
        let description = format!("{} ({} nodes)", path.display(), graph.len());
        return Ok(BenchModel {
            graph,
            name: model.to_string(),
            builtin: false,
            description,
        });
    }
    builtin(model).ok_or_else(|| {
        format!(
            "model {model:?} is neither a file nor a builtin model (builtins: {})",
            NAMES.join(", ")
        )
    })
}

fn mlp_config() -> MlpConfig {
    MlpConfig {
        batch: BATCH,
        d_in: D_MODEL,
        d_hidden: D_HIDDEN,
        d_out: D_MODEL,
    }
}

/// [`models::mlp`]'s graph (same nodes in the same order) with every
/// input, param and output in `dtype`; that builder is f32 only.
fn mlp_typed(dtype: DType) -> Graph {
    let s = |d: &[usize]| Shape::new(d, dtype);
    let mut g = Graph::new("mlp");
    let x = g.input("x", s(&[BATCH, D_MODEL]));
    let w1 = g.param("w1", s(&[D_MODEL, D_HIDDEN]));
    let b1 = g.param("b1", s(&[D_HIDDEN]));
    let w2 = g.param("w2", s(&[D_HIDDEN, D_MODEL]));
    let b2 = g.param("b2", s(&[D_MODEL]));
    let h = g.mm(x, w1);
    let h = g.add(h, b1);
    let h = g.gelu(h);
    let y = g.mm(h, w2);
    let y = g.add(y, b2);
    g.set_named_outputs([("y", y)]);
    g
}

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

fn matmuls() -> Graph {
    let mut g = Graph::new("matmuls");
    let x = g.input("x", f32s(&[BATCH, D_MODEL]));
    let w1 = g.param("w1", f32s(&[D_MODEL, D_HIDDEN]));
    let w2 = g.param("w2", f32s(&[D_HIDDEN, D_MODEL]));
    let h = g.mm(x, w1);
    let y = g.mm(h, w2);
    g.set_named_outputs([("y", y)]);
    g
}

/// `y = op(x)` for one f32 input `x` of shape `dims`.
fn unary(dims: &[usize], op: impl FnOnce(&mut Graph, rlx_ir::NodeId) -> rlx_ir::NodeId) -> Graph {
    let mut g = Graph::new("unary");
    let x = g.input("x", f32s(dims));
    let y = op(&mut g, x);
    g.set_named_outputs([("y", y)]);
    g
}

/// Rows of `transfer`'s input: 320 x 1024 f32 is 1.3 MB, the size of
/// the resident training step's batch.
const TRANSFER_ROWS: usize = 320;

/// The width of `params-1g`'s square param: 16384^2 f32 = 1 GiB.
const PARAMS_1G_WIDTH: usize = 16384;

/// One matrix-vector product with a 1 GiB param: what binding a large
/// model's params costs (BIND MS), and what it leaves resident (PEAK RSS).
fn params_1g() -> Graph {
    let mut g = Graph::new("params_1g");
    let x = g.input("x", f32s(&[1, PARAMS_1G_WIDTH]));
    let w = g.param("w", f32s(&[PARAMS_1G_WIDTH, PARAMS_1G_WIDTH]));
    let y = g.mm(x, w);
    g.set_named_outputs([("y", y)]);
    g
}

fn add_broadcast() -> Graph {
    let mut g = Graph::new("add_broadcast");
    let x = g.input("x", f32s(&[BATCH, D_HIDDEN]));
    // A param, as a bias is: bound once, not sent with every run.
    let b = g.param("b", f32s(&[D_HIDDEN]));
    let y = g.add(x, b);
    g.set_named_outputs([("y", y)]);
    g
}

/// `[loss, dw1, db1, dw2, db2]` of a classifier MLP, as
/// `rlx_opt::grad_with_loss` builds it (inputs x, labels and the seed
/// `d_output`): what one SGD step of a training loop runs.
fn mlp_train() -> Graph {
    use rlx_ir::op::{Activation, BinaryOp};
    use rlx_ir::Op;
    let (b, d, h, c) = (256, 784, 256, 10);
    let mut g = Graph::new("mlp_train");
    let x = g.input("x", f32s(&[b, d]));
    let labels = g.input("labels", f32s(&[b]));
    let w1 = g.param("w1", f32s(&[d, h]));
    let b1 = g.param("b1", f32s(&[h]));
    let w2 = g.param("w2", f32s(&[h, c]));
    let b2 = g.param("b2", f32s(&[c]));
    let xw = g.add_node(Op::MatMul, vec![x, w1], f32s(&[b, h]));
    let hb = g.add_node(Op::Binary(BinaryOp::Add), vec![xw, b1], f32s(&[b, h]));
    let r = g.add_node(Op::Activation(Activation::Relu), vec![hb], f32s(&[b, h]));
    let rw = g.add_node(Op::MatMul, vec![r, w2], f32s(&[b, c]));
    let logits = g.add_node(Op::Binary(BinaryOp::Add), vec![rw, b2], f32s(&[b, c]));
    let loss = models::mean_softmax_cross_entropy(&mut g, logits, labels, b);
    g.set_outputs(vec![loss]);
    rlx_opt::grad_with_loss(&g, &[w1, b1, w2, b2])
}

/// One LSTM layer as a model holds it: packed weights as params.
fn lstm() -> Graph {
    let (b, t, i, h) = (8, 256, 64, 128);
    let mut g = Graph::new("lstm");
    let x = g.input("x", f32s(&[b, t, i]));
    let w_ih = g.param("w_ih", f32s(&[4 * h, i]));
    let w_hh = g.param("w_hh", f32s(&[4 * h, h]));
    let bias = g.param("bias", f32s(&[4 * h]));
    let y = g.add_node(
        rlx_ir::Op::Lstm {
            hidden_size: h,
            num_layers: 1,
            bidirectional: false,
            carry: false,
        },
        vec![x, w_ih, w_hh, bias],
        f32s(&[b, t, h]),
    );
    g.set_named_outputs([("y", y)]);
    g
}

/// A long scan: its compile time shows whether the body is unrolled well.
fn scan1000() -> Graph {
    let (len, n) = (1000, 64);
    let mut body = Graph::new("step");
    let c = body.input("carry", f32s(&[n]));
    let w = body.input("w", f32s(&[n]));
    let xt = body.input("x_t", f32s(&[n]));
    let cw = body.mul(c, w);
    let s = body.add(cw, xt);
    let y = body.tanh(s);
    body.set_outputs(vec![y]);
    let mut g = Graph::new("scan1000");
    let init = g.input("init", f32s(&[n]));
    let w = g.param("w", f32s(&[n]));
    let xs = g.input("xs", f32s(&[len, n]));
    let y = g.add_node(
        rlx_ir::Op::Scan {
            body: Box::new(body),
            length: len as u32,
            save_trajectory: false,
            num_bcast: 1,
            num_xs: 1,
            num_checkpoints: 0,
        },
        vec![init, w, xs],
        f32s(&[n]),
    );
    g.set_named_outputs([("y", y)]);
    g
}

const POCKETFFT_ROWS: usize = 1;
const POCKETFFT_N: usize = 4099;
/// rlx-runtime's `fft_algo_bench` case rows=16 n=1000: rows the plugin's
/// kernel runs on one thread, as the CPU backend's does.
const POCKETFFT_BATCH_ROWS: usize = 16;
const POCKETFFT_BATCH_N: usize = 1000;

/// rlx's decomposed FFT (rlx-fusion's `lower_pocketfft`, the pass
/// rlx-runtime applies for a backend without a pocketfft kernel): one node
/// per scalar operation of each FFTPACK pass, vectorised over the rows.
/// rlx-runtime's `examples/fft_algo_bench.rs` times the same graphs.
fn pocketfft() -> Graph {
    rlx_fusion::rewriter::apply_match_rewrite(
        &rlx_fusion::lower_pocketfft::LowerPocketFft,
        pocketfft_op(POCKETFFT_ROWS, POCKETFFT_N),
    )
    .graph
}

/// The transform of `rows` rows of `n` points as one `Fft` node (`pocketfft`
/// before lowering, for rows=1 n=4099).
fn pocketfft_op(rows: usize, n: usize) -> Graph {
    let mut g = Graph::new("pocketfft");
    let x = g.input("x", f32s(&[rows, 2 * n]));
    let y = g.fft_algo(
        x,
        false,
        rlx_ir::fft::FftNorm::Backward,
        rlx_ir::fft::FftAlgo::SCIPY,
    );
    g.set_outputs(vec![y]);
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_builds_and_unknown_names_are_refused() {
        for n in NAMES {
            let m = builtin(n).unwrap_or_else(|| panic!("{n}"));
            assert!(!m.graph.outputs.is_empty(), "{n}");
        }
        // Lowered: thousands of nodes, no FFT node left.
        let fft = builtin("pocketfft").unwrap().graph;
        assert!(fft.nodes().len() > 1000, "{} nodes", fft.nodes().len());
        assert!(fft
            .nodes()
            .iter()
            .all(|n| !matches!(n.op, rlx_ir::Op::Fft { .. })));
        let e = resolve("no-such-model").err().unwrap();
        assert!(e.contains("no-such-model") && e.contains("mlp-bf16"), "{e}");
    }

    #[test]
    fn the_bf16_mlp_is_the_f32_mlp_in_bf16() {
        let f = models::mlp(&mlp_config()).graph;
        let b = mlp_typed(DType::BF16);
        assert_eq!(f.len(), b.len());
        for (x, y) in f.nodes().iter().zip(b.nodes()) {
            assert_eq!(x.op, y.op);
            assert_eq!(x.shape.dims(), y.shape.dims());
            assert_eq!(y.shape.dtype(), DType::BF16);
        }
    }
}
