//! `RLX_MLX_OP_COUNTS=FILE`: every run appends to FILE one JSON line
//! naming, op kind by op kind, the MLX primitives its evaluation runs: the
//! unevaluated graph under the run's outputs and state writes, each node
//! once, as MLX's `export_to_dot` draws it (views such as `Broadcast` and
//! `Transpose` included; compiled mode's fused kernels as `Compiled...`).
//! The measure of issue 37's "a training step's MLX work no larger than
//! MLX's own" (`cargo bench -p rlx-plugin-tests --bench op_counts`):
//!
//! ```text
//! {"graph":"mlp_train","mode":"compiled","total":31,"ops":{"AddMM":2,...}}
//! ```
//!
//! Eager mode evaluates node by node while it builds, so its lines count what
//! is left for the end. Read once per process (through the host's settings);
//! off, a run pays one flag test.

use rlx_mlx_shim::array::{self, new_array_list};
use rlx_mlx_shim::ArrayList;
use rlx_plugin_api::Mode;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The file runs append to, when counting is on.
fn sink() -> Option<&'static Mutex<std::fs::File>> {
    static SINK: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    SINK.get_or_init(|| {
        let path = rlx_plugin_api::setting("RLX_MLX_OP_COUNTS").filter(|p| !p.is_empty())?;
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                log::warn!("RLX_MLX_OP_COUNTS: cannot open {path:?} ({e}): no op counts");
                None
            }
        }
    })
    .as_ref()
}

/// Record what evaluating `list` (a run's outputs and writes) runs.
pub fn record(graph: &str, mode: Mode, list: &ArrayList) {
    let Some(sink) = sink() else {
        return;
    };
    let ops = match array::graph_ops(list, &new_array_list()) {
        Ok(ops) => ops,
        Err(e) => {
            log::warn!("RLX_MLX_OP_COUNTS: graph {graph:?}: {e}");
            return;
        }
    };
    let line = line(graph, mode, &ops);
    let mut f = sink.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = f.write_all(line.as_bytes()) {
        log::warn!("RLX_MLX_OP_COUNTS: {e}");
    }
}

/// One JSON line: the graph, the mode, the total and the count per kind
/// (sorted by name).
pub fn line(graph: &str, mode: Mode, ops: &[String]) -> String {
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for op in ops {
        *by_kind.entry(op).or_default() += 1;
    }
    let json = serde_json::json!({
        "graph": graph,
        "mode": mode.name(),
        "total": ops.len(),
        "ops": by_kind,
    });
    format!("{json}\n")
}
