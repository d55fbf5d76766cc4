//! Active extents: a bucketed graph run on its live rows only.
//!
//! A graph compiled for `upper` rows (a bucket) often holds fewer live
//! ones. When every op keeps rows independent along axis 0, the plugin
//! runs a copy of the graph whose row-carrying tensors have `active` rows
//! instead of `upper`: the inputs whose axis 0 is `upper` are sliced, the
//! work shrinks with them, and each row-carrying output is padded back to
//! its declared `upper` rows (zeros: the ABI leaves rows past `active`
//! unspecified). A graph with any other op that touches a row-carrying
//! tensor runs whole, as the ABI allows.
//!
//! Which tensors carry rows is worked out node by node: an input whose
//! axis 0 is `upper`; an elementwise, row-normalising or matmul output of
//! one. Params and constants never do, and one of them whose axis 0 would
//! meet a row-carrying axis 0 in the same op makes the graph unsafe (its
//! rows would have to be sliced too).

use super::{compile_graph, MlxExecutable};
use crate::lower::A;
use rlx_ir::{Graph, NodeId, Op, Shape};
use rlx_mlx_shim::{ops, Compiled};
use rlx_plugin_api::{Mode, PluginError, PluginResult};
use std::sync::Arc;

/// How many narrowed graphs an executable keeps (each may hold a compiled
/// function).
const KEPT_PLANS: usize = 16;

/// The narrowed form of a graph for one `(active, upper)`.
pub(super) struct Narrowed {
    pub(super) key: (usize, usize),
    /// None: the graph cannot be narrowed; it runs whole.
    pub(super) plan: Option<Plan>,
}

pub(super) struct Plan {
    pub(super) graph: Arc<Graph>,
    pub(super) compiled: Option<Compiled>,
    pub(super) compiled_writes: Arc<std::sync::Mutex<Vec<NodeId>>>,
    /// Input slots whose arrays are sliced to `active` rows.
    pub(super) row_inputs: Vec<bool>,
    /// Outputs padded back to `upper` rows.
    pub(super) row_outputs: Vec<bool>,
}

impl MlxExecutable {
    pub(super) fn set_extent(&mut self, extent: Option<(usize, usize)>) -> PluginResult<()> {
        self.extent = extent;
        Ok(())
    }

    /// Make the plan for the current extent, once per extent (the last
    /// [`KEPT_PLANS`] are kept: a decode loop revisits the same few), and
    /// move it last, where the run finds it.
    pub(super) fn narrowed(&mut self) -> PluginResult<()> {
        let Some((active, upper)) = self.extent.filter(|(a, u)| a < u) else {
            return Ok(());
        };
        if let Some(i) = self.narrowed.iter().position(|n| n.key == (active, upper)) {
            let n = self.narrowed.remove(i);
            self.narrowed.push(n);
            return Ok(());
        }
        let plan = match rows_of(&self.graph, upper) {
            Some(rows) => Some(self.plan(&rows, active)?),
            None => {
                log::debug!(
                    "graph {:?} is not row-independent along axis 0: it runs all {upper} rows",
                    self.graph.name
                );
                None
            }
        };
        if self.narrowed.len() >= KEPT_PLANS {
            self.narrowed.remove(0);
        }
        self.narrowed.push(Narrowed {
            key: (active, upper),
            plan,
        });
        Ok(())
    }

    fn plan(&self, rows: &[bool], active: usize) -> PluginResult<Plan> {
        let mut g = (*self.graph).clone();
        for (i, r) in rows.iter().enumerate() {
            if *r {
                let n = g.node_mut(NodeId(i as u32));
                let mut dims: Vec<usize> = crate::lower::static_dims(n.shape.dims())
                    .iter()
                    .map(|d| *d as usize)
                    .collect();
                dims[0] = active;
                n.shape = Shape::new(&dims, n.shape.dtype());
            }
        }
        let graph = Arc::new(g);
        let compiled_writes: Arc<std::sync::Mutex<Vec<NodeId>>> = Arc::default();
        let compiled = match (&self.compiled, self.mode) {
            (Some(_), Mode::Compiled) => Some(compile_graph(
                graph.clone(),
                self.rng,
                self.custom.clone(),
                &self.inputs,
                &self.params,
                compiled_writes.clone(),
                None,
            )?),
            _ => None,
        };
        Ok(Plan {
            row_inputs: self
                .inputs
                .iter()
                .map(|(_, id)| rows[id.0 as usize])
                .collect(),
            row_outputs: self
                .graph
                .outputs
                .iter()
                .map(|o| rows[o.0 as usize])
                .collect(),
            graph,
            compiled,
            compiled_writes,
        })
    }
}

/// Input `a`'s first `active` rows.
pub(super) fn first_rows(a: &A, active: usize) -> PluginResult<A> {
    let shape = a.shape();
    let mut stop = shape.clone();
    stop[0] = active as i32;
    ops::slice(a, &vec![0; shape.len()], &stop, &vec![1; shape.len()])
        .map_err(|e| PluginError::internal(format!("active extent: {e}")))
}

/// Output `a` padded with zero rows back to `upper`.
pub(super) fn pad_rows(a: &A, upper: usize) -> PluginResult<A> {
    let have = a.shape()[0] as usize;
    ops::pad(a, &[0], &[0], &[(upper - have) as i32], 0.0)
        .map_err(|e| PluginError::internal(format!("active extent: {e}")))
}

/// Which nodes carry rows along axis 0 when the graph runs `upper` rows,
/// or None when an op would mix rows (or a param's rows would have to be
/// sliced too).
fn rows_of(g: &Graph, upper: usize) -> Option<Vec<bool>> {
    let dims = |id: NodeId| crate::lower::static_dims(g.shape(id).dims());
    let lead = |id: NodeId| dims(id).first().map(|d| *d as usize);
    let mut rows = vec![false; g.len()];
    for n in g.nodes() {
        let i = n.id.0 as usize;
        let ins: Vec<NodeId> = n.inputs.clone();
        let any_rows = ins.iter().any(|x| rows[x.0 as usize]);
        rows[i] = match &n.op {
            Op::Input { .. } => lead(n.id) == Some(upper),
            Op::Param { .. } | Op::Constant { .. } => false,
            _ if !any_rows => false,
            Op::Activation(_) | Op::Cast { .. } | Op::Binary(_) | Op::Compare(_) | Op::Where => {
                // NumPy broadcasting aligns shapes at the right: a
                // row-carrying operand must reach the output's axis 0,
                // and no other operand may put `upper` there.
                let rank = dims(n.id).len();
                for x in &ins {
                    let d = dims(*x);
                    let at_axis0 = (d.len() == rank).then(|| d[0] as usize);
                    match (rows[x.0 as usize], at_axis0) {
                        (true, Some(_)) => {}
                        (true, None) => return None,
                        (false, Some(k)) if k != 1 => return None,
                        _ => {}
                    }
                }
                true
            }
            Op::Softmax { axis } | Op::LayerNorm { axis, .. } | Op::RmsNorm { axis, .. } => {
                let rank = dims(n.id).len() as i32;
                let axis = if *axis < 0 { axis + rank } else { *axis };
                // Normalised along axis 0, or a gamma/beta with rows: mixed.
                if axis == 0 || ins.iter().skip(1).any(|x| rows[x.0 as usize]) {
                    return None;
                }
                rows[ins[0].0 as usize]
            }
            Op::MatMul => {
                // Rows of the left operand; the right one is shared.
                let lhs_rank = dims(ins[0]).len();
                if !rows[ins[0].0 as usize] || rows[ins[1].0 as usize] || lhs_rank < 2 {
                    return None;
                }
                true
            }
            Op::Reduce { axes, .. } => {
                if axes.contains(&0) {
                    return None;
                }
                rows[ins[0].0 as usize]
            }
            Op::Gather { axis: 0 } => {
                // An embedding lookup: rows of indices into a table.
                if rows[ins[0].0 as usize] || !rows[ins[1].0 as usize] {
                    return None;
                }
                true
            }
            _ => return None,
        };
        if rows[i] && lead(n.id) != Some(upper) {
            // A row-carrying value whose axis 0 is not the bucket: the
            // rows moved to another axis.
            return None;
        }
    }
    Some(rows)
}
