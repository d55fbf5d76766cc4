//! A model's values as the host holds them: every input and param as f32
//! (rlx-runtime converts to each boundary's dtype), and the names, shapes
//! and dtypes its outputs are reported with. `run` fills and runs them;
//! `tensor_files` reads and writes them as files.

use rlx_ir::{Dim, Graph};

/// Values for every input and param of a graph, as f32 (rlx-runtime
/// converts to each boundary's declared dtype). A complex (c64, c128)
/// tensor holds two values per element, interleaved `[re, im, re, im, ...]`
/// (rlx-ir's complex layout, and what rlx-runtime's `&[f32]` surface takes
/// for a complex boundary); see [`values_per_element`].
#[derive(Clone, Debug, Default)]
pub struct ModelData {
    /// (name, values), in graph order.
    pub inputs: Vec<(String, Vec<f32>)>,
    /// (name, values), in graph order.
    pub params: Vec<(String, Vec<f32>)>,
}

/// How many f32 values one element of `dt` takes in [`ModelData`] and in
/// the outputs of [`execute`]: 2 for a complex dtype (re, im), else 1.
pub fn values_per_element(dt: rlx_ir::DType) -> usize {
    if dt.is_complex() {
        2
    } else {
        1
    }
}

/// The static sizes of `shape`, or why it has none.
pub(crate) fn dims_of(shape: &rlx_ir::Shape) -> Result<Vec<usize>, String> {
    shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Static(n) => Ok(*n),
            Dim::Dynamic(_) => Err(format!("{shape} has a size known only at run time")),
        })
        .collect()
}

/// `[2, 3]`.
pub(crate) fn fmt_dims(d: &[usize]) -> String {
    format!(
        "[{}]",
        d.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Output names, shapes and dtypes of `graph` (`output{i}` when unnamed).
pub fn output_infos(graph: &Graph, outputs: &[Vec<f32>]) -> Vec<(String, Vec<usize>, String)> {
    graph
        .outputs
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let shape = graph.shape(*id);
            let dims = dims_of(shape).unwrap_or_else(|_| {
                vec![outputs
                    .get(i)
                    .map_or(0, |o| o.len() / values_per_element(shape.dtype()))]
            });
            (
                graph
                    .output_name(i)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("output{i}")),
                dims,
                shape.dtype().to_string().to_lowercase(),
            )
        })
        .collect()
}
