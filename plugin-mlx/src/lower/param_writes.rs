//! Values an op writes back into the graph's params when a run ends.

use rlx_ir::{Graph, NodeId, Op};
use rlx_mlx_shim::{Array, UniquePtr};

/// Values an op writes back into one of the graph's params when the run
/// ends (a recurrent layer's final states with `carry`, as rlx-cpu writes
/// them into its arena): `(graph, param node, value)`. Only writes into the
/// executable's own graph are applied; inputs are the caller's and
/// read-only under the ABI.
#[derive(Default)]
pub struct ParamWrites(std::cell::RefCell<Vec<(usize, NodeId, UniquePtr<Array>)>>);

impl ParamWrites {
    pub fn record(&self, graph: &Graph, id: NodeId, value: UniquePtr<Array>) {
        if matches!(graph.node(id).op, Op::Param { .. }) {
            self.0
                .borrow_mut()
                .push((graph as *const Graph as usize, id, value));
        }
    }
    /// The writes into `graph`'s params, in order (a later write to the
    /// same param wins).
    pub fn take_for(&self, graph: &Graph) -> Vec<(NodeId, UniquePtr<Array>)> {
        let key = graph as *const Graph as usize;
        self.0
            .borrow_mut()
            .drain(..)
            .filter(|(g, _, _)| *g == key)
            .map(|(_, id, v)| (id, v))
            .collect()
    }
}
