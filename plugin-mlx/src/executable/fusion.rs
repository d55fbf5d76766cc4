//! Compiled mode's elementwise regions: connected f32 arithmetic of one
//! shape, each made ONE fused kernel with as many outputs as the region has
//! values used outside it (`rlx_mlx_shim::fusion`).
//!
//! MLX's fuser grows each kernel backwards from one value and ends it at
//! any value with a consumer outside, so a value read by two chains ends a
//! kernel of its own and goes through memory. rlx-runtime's fused Adam
//! step (`ResidentTrainer`) is such a graph: each parameter's new moments
//! are read by its update and by the moments kept (the freeze gate), and
//! MLX cut each parameter's update into five kernels, where Python MLX's
//! own Adam step is one (`cargo bench --bench op_counts`). Here the region
//! is chosen on rlx's graph, where every consumer is known, and handed to
//! MLX whole.
//!
//! A region holds `Binary` add, sub, mul, div and the `Sqrt` and `Neg`
//! activations, f32 in and out, all of one static shape; its operands are
//! values of that shape or single elements (a scalar input, a constant,
//! inlined into the kernel's source). A scalar step read only by one region
//! (`1 - gate`) is computed inside it. The steps are the very primitives the
//! node-by-node lowering builds (`lower::elementwise`), in the graph's
//! order, so the values are those of the same steps in MLX's own fused
//! kernels. A region is kept only when contracting it to one node leaves
//! the graph acyclic (no path leaves it and comes back), and it has two
//! steps at least. The evaluation order is the graph's, each region at the
//! place its last input allows.
//!
//! A region's kernel takes at most 24 arrays (MLX's own cap); a larger
//! region is left to MLX's fuser.
//!
//! Only in compiled mode: lazy and eager mode build no kernels.
//! `RLX_MLX_FUSE_REGIONS=0` turns it off (read once, through the host's
//! settings).

use crate::lower::A;
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Dim, Graph, NodeId, Op, OpKind};
use rlx_mlx_shim::fusion::{fuse_elementwise, Step};
use rlx_mlx_shim::ArrayList;
use std::collections::{BinaryHeap, HashMap};

/// The most arrays (inputs that are not inlined constants, and outputs) one
/// region's kernel takes: MLX's own fuser stops at 24
/// (`max_compile_arrays`), under Metal's 31 buffer arguments a kernel. A
/// larger region is left to MLX's fuser.
const MAX_ARRAYS: usize = 24;

fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        rlx_plugin_api::setting("RLX_MLX_FUSE_REGIONS").is_none_or(|v| v.trim() != "0")
    })
}

/// One region: its steps over its inputs, and the values it hands out.
#[derive(Debug)]
pub struct Region {
    /// The member nodes, in graph order.
    pub members: Vec<NodeId>,
    /// The values it reads from outside, in first-use order.
    pub inputs: Vec<NodeId>,
    /// Per input: a graph constant (MLX may write it into the kernel).
    pub constant: Vec<bool>,
    steps: Vec<Step>,
    /// The members used outside the region (or graph outputs), and their
    /// step index.
    pub outputs: Vec<(NodeId, u32)>,
    shape: Vec<i32>,
}

impl Region {
    /// Build the region's kernel on `args` (the values of
    /// [`Region::inputs`]): one array per [`Region::outputs`].
    pub fn build(&self, args: &[&rlx_mlx_shim::Array]) -> Result<Vec<A>, String> {
        let list = ArrayList::from_arrays(args.iter().copied());
        let outs: Vec<u32> = self.outputs.iter().map(|(_, s)| *s).collect();
        let built = fuse_elementwise(&list, &self.constant, &self.steps, &outs, &self.shape)
            .map_err(|e| format!("a fused elementwise region: {e}"))?;
        Ok(built.to_vec())
    }
}

/// What one evaluation visits next: a node, or a whole region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    Node(NodeId),
    Region(u32),
}

/// The regions of one graph and the order to evaluate it in.
#[derive(Debug)]
pub struct Fusion {
    pub regions: Vec<Region>,
    pub order: Vec<Item>,
    /// The graph it was planned for (its address): nested bodies and
    /// narrowed graphs are evaluated without it.
    graph: usize,
}

impl Fusion {
    /// Whether this plan is for `graph`.
    pub fn is_for(&self, graph: &Graph) -> bool {
        self.graph == graph as *const Graph as usize
    }

    /// The regions of `graph` (None where there are none, or where turned
    /// off). `built[i]`: node `i` is built by a run (not read from hoisted
    /// values, not skipped); only such nodes join a region.
    pub fn plan(graph: &Graph, built: &dyn Fn(NodeId) -> bool) -> Option<Fusion> {
        if !enabled() {
            return None;
        }
        let n = graph.len();
        let shape_of = |id: NodeId| -> Option<Vec<i32>> {
            let s = graph.shape(id);
            s.dims()
                .iter()
                .map(|d| match d {
                    Dim::Static(k) => i32::try_from(*k).ok(),
                    Dim::Dynamic(_) => None,
                })
                .collect()
        };
        let numel = |id: NodeId| -> Option<usize> {
            graph
                .shape(id)
                .dims()
                .iter()
                .try_fold(1usize, |acc, d| match d {
                    Dim::Static(k) => acc.checked_mul(*k),
                    Dim::Dynamic(_) => None,
                })
        };
        // Per node: the shape of the region it may join, if any.
        let mut fusable: Vec<Option<Vec<i32>>> = vec![None; n];
        for node in graph.nodes() {
            if !built(node.id) || step_kind(&node.op).is_none() {
                continue;
            }
            if graph.shape(node.id).dtype() != DType::F32 || numel(node.id).unwrap_or(0) < 2 {
                continue;
            }
            let Some(shape) = shape_of(node.id) else {
                continue;
            };
            let operands_fit = node.inputs.iter().all(|&i| {
                graph.shape(i).dtype() == DType::F32
                    && (numel(i) == Some(1) || shape_of(i).as_deref() == Some(&shape[..]))
            });
            if operands_fit {
                fusable[node.id.0 as usize] = Some(shape);
            }
        }
        // Consumers of every node (outputs count as an outside use).
        let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
        for node in graph.nodes() {
            for i in &node.inputs {
                users[i.0 as usize].push(node.id);
            }
        }
        let mut is_output = vec![false; n];
        for o in &graph.outputs {
            is_output[o.0 as usize] = true;
        }
        // Connected components over operand edges between fusable nodes of
        // one shape (union-find).
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        for node in graph.nodes() {
            let i = node.id.0 as usize;
            let Some(shape) = &fusable[i] else { continue };
            for inp in &node.inputs {
                let j = inp.0 as usize;
                if fusable[j].as_ref() == Some(shape) {
                    let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                    parent[a] = b;
                }
            }
        }
        // A scalar step (single elements in and out: `1 - gate`) read only
        // by one region joins it: computed in the kernel, not as a
        // primitive of its own. Last first, so that chains join whole.
        for node in graph.nodes().iter().rev() {
            let i = node.id.0 as usize;
            if fusable[i].is_some()
                || is_output[i]
                || !built(node.id)
                || step_kind(&node.op).is_none()
                || graph.shape(node.id).dtype() != DType::F32
                || numel(node.id) != Some(1)
                || !node
                    .inputs
                    .iter()
                    .all(|&x| graph.shape(x).dtype() == DType::F32 && numel(x) == Some(1))
                || users[i].is_empty()
            {
                continue;
            }
            let mut roots = users[i].iter().map(|u| {
                let u = u.0 as usize;
                fusable[u]
                    .as_ref()
                    .map(|shape| (find(&mut parent, u), shape.clone()))
            });
            let Some(Some((root, shape))) = roots.next() else {
                continue;
            };
            if roots.all(|r| r.is_some_and(|(x, _)| x == root)) {
                fusable[i] = Some(shape);
                parent[i] = root;
            }
        }
        let mut groups: HashMap<usize, Vec<NodeId>> = HashMap::new();
        for node in graph.nodes() {
            let i = node.id.0 as usize;
            if fusable[i].is_some() {
                let root = find(&mut parent, i);
                groups.entry(root).or_default().push(node.id);
            }
        }
        let mut groups: Vec<Vec<NodeId>> = groups.into_values().filter(|g| g.len() >= 2).collect();
        groups.sort_by_key(|g| g[0].0);
        let mut regions = Vec::new();
        for members in groups {
            if !acyclic_when_contracted(graph, &members) {
                continue;
            }
            let shape = fusable[members[0].0 as usize].clone()?;
            if let Some(r) = region(graph, &members, &users, &is_output, shape) {
                regions.push(r);
            }
        }
        if regions.is_empty() {
            return None;
        }
        let order = order(graph, &regions)?;
        Some(Fusion {
            regions,
            order,
            graph: graph as *const Graph as usize,
        })
    }
}

/// The MLX step a node is, given its operands' positions (None: it is not
/// one a region holds).
fn step_kind(op: &Op) -> Option<fn(u32, u32) -> Step> {
    Some(match op {
        Op::Binary(BinaryOp::Add) => Step::Add,
        Op::Binary(BinaryOp::Sub) => Step::Subtract,
        Op::Binary(BinaryOp::Mul) => Step::Multiply,
        Op::Binary(BinaryOp::Div) => Step::Divide,
        Op::Activation(Activation::Sqrt) => |a, _| Step::Sqrt(a),
        Op::Activation(Activation::Neg) => |a, _| Step::Negative(a),
        _ => return None,
    })
}

/// No path leaves `members` and re-enters them (else the region could not
/// be one node).
fn acyclic_when_contracted(graph: &Graph, members: &[NodeId]) -> bool {
    let n = graph.len();
    let mut inside = vec![false; n];
    for m in members {
        inside[m.0 as usize] = true;
    }
    // Outside nodes reachable from the region, in graph (topological)
    // order: a node is reached when one of its inputs is a member or a
    // reached node.
    let mut reached = vec![false; n];
    // Only nodes between the first and the last member can lie on such a
    // path (node ids are a topological order), so a region costs its span,
    // not the graph.
    let first = members[0].0 as usize;
    let last = members[members.len() - 1].0 as usize;
    for node in &graph.nodes()[first..=last] {
        let i = node.id.0 as usize;
        let from_region = node
            .inputs
            .iter()
            .any(|x| inside[x.0 as usize] || reached[x.0 as usize]);
        if inside[i] {
            // A member reading a reached outside node: a cycle.
            if node.inputs.iter().any(|x| reached[x.0 as usize]) {
                return false;
            }
        } else if from_region {
            reached[i] = true;
        }
    }
    true
}

/// The region's steps, inputs and outputs.
fn region(
    graph: &Graph,
    members: &[NodeId],
    users: &[Vec<NodeId>],
    is_output: &[bool],
    shape: Vec<i32>,
) -> Option<Region> {
    let mut slot: HashMap<NodeId, u32> = HashMap::new();
    let mut inputs: Vec<NodeId> = Vec::new();
    let mut constant = Vec::new();
    // Inputs first (first-use order), then steps: operand k < inputs.len()
    // is an input, else step k - inputs.len(); steps are numbered after
    // all inputs are known, so collect the inputs in a first pass.
    let inside: std::collections::HashSet<NodeId> = members.iter().copied().collect();
    for m in members {
        for i in &graph.node(*m).inputs {
            if !inside.contains(i) && !inputs.contains(i) {
                inputs.push(*i);
                constant.push(graph.node(*i).op.kind() == OpKind::Constant);
            }
        }
    }
    let n_in = inputs.len() as u32;
    for (k, i) in inputs.iter().enumerate() {
        slot.insert(*i, k as u32);
    }
    let mut steps = Vec::with_capacity(members.len());
    for (k, m) in members.iter().enumerate() {
        let node = graph.node(*m);
        let make = step_kind(&node.op)?;
        let a = slot[&node.inputs[0]];
        let b = node.inputs.get(1).map_or(0, |x| slot[x]);
        steps.push(make(a, b));
        slot.insert(*m, n_in + k as u32);
    }
    let outputs: Vec<(NodeId, u32)> = members
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            is_output[m.0 as usize] || users[m.0 as usize].iter().any(|u| !inside.contains(u))
        })
        .map(|(k, m)| (*m, k as u32))
        .collect();
    let buffers = constant.iter().filter(|c| !**c).count() + outputs.len();
    if outputs.is_empty() || buffers > MAX_ARRAYS {
        return None;
    }
    Some(Region {
        members: members.to_vec(),
        inputs,
        constant,
        steps,
        outputs,
        shape,
    })
}

/// The graph's order with each region as one item: a topological order of
/// the contracted graph, keeping the graph's own order where it can (each
/// item as early as its inputs allow, ties by its first node).
fn order(graph: &Graph, regions: &[Region]) -> Option<Vec<Item>> {
    let n = graph.len();
    let mut item_of: Vec<Item> = (0..n).map(|i| Item::Node(NodeId(i as _))).collect();
    for (r, region) in regions.iter().enumerate() {
        for m in &region.members {
            item_of[m.0 as usize] = Item::Region(r as u32);
        }
    }
    let key = |it: Item| -> usize {
        match it {
            Item::Node(id) => id.0 as usize,
            Item::Region(r) => regions[r as usize].members[0].0 as usize,
        }
    };
    // Items and their dependencies (edges between distinct items).
    let items: Vec<Item> = {
        let mut seen = std::collections::HashSet::new();
        graph
            .nodes()
            .iter()
            .map(|nd| item_of[nd.id.0 as usize])
            .filter(|it| seen.insert(*it))
            .collect()
    };
    let index: HashMap<Item, usize> = items.iter().enumerate().map(|(k, it)| (*it, k)).collect();
    let mut waiting = vec![0usize; items.len()];
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); items.len()];
    let mut edges = std::collections::HashSet::new();
    for nd in graph.nodes() {
        let to = index[&item_of[nd.id.0 as usize]];
        for i in &nd.inputs {
            let from = index[&item_of[i.0 as usize]];
            if from != to && edges.insert((from, to)) {
                waiting[to] += 1;
                next[from].push(to);
            }
        }
    }
    // Kahn's algorithm, the smallest key first.
    let mut ready: BinaryHeap<std::cmp::Reverse<(usize, usize)>> = items
        .iter()
        .enumerate()
        .filter(|(k, _)| waiting[*k] == 0)
        .map(|(k, it)| std::cmp::Reverse((key(*it), k)))
        .collect();
    let mut out = Vec::with_capacity(items.len());
    while let Some(std::cmp::Reverse((_, k))) = ready.pop() {
        out.push(items[k]);
        for &t in &next[k] {
            waiting[t] -= 1;
            if waiting[t] == 0 {
                ready.push(std::cmp::Reverse((key(items[t]), t)));
            }
        }
    }
    // Every region was checked, so this holds; were it not to, nothing is
    // fused rather than a node left out.
    (out.len() == items.len()).then_some(out)
}
