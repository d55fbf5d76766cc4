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
pub const NAMES: [&str; 7] = [
    "mlp",
    "mlp-bf16",
    "matmuls",
    "gelu",
    "add-broadcast",
    "exp4",
    "transformer",
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

fn add_broadcast() -> Graph {
    let mut g = Graph::new("add_broadcast");
    let x = g.input("x", f32s(&[BATCH, D_HIDDEN]));
    // A param, as a bias is: bound once, not sent with every run.
    let b = g.param("b", f32s(&[D_HIDDEN]));
    let y = g.add(x, b);
    g.set_named_outputs([("y", y)]);
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
