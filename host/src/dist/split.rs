//! Cutting a graph into pipeline stages: each stage one input and one
//! output, the cut where a single value crosses (a transformer's residual
//! stream between blocks). Params and constants are copied into every
//! stage that reads them; nothing else may cross a cut.

use rlx_ir::{Graph, NodeId, Op};
use std::collections::HashMap;

/// The name of the input a later stage reads its activation from.
pub const STAGE_INPUT: &str = "activation";

fn copyable(op: &Op) -> bool {
    matches!(op, Op::Param { .. } | Op::Constant { .. })
}

/// The nodes after which exactly one computed value (or the graph's input)
/// is live and read later: where `g` can be cut. In node order; the
/// output node itself is not one.
pub fn cut_points(g: &Graph) -> Vec<NodeId> {
    let nodes = g.nodes();
    let n = nodes.len();
    // The last node reading each value (its own index if none does).
    let mut last_use: Vec<usize> = (0..n).collect();
    for (i, node) in nodes.iter().enumerate() {
        for x in &node.inputs {
            last_use[x.0 as usize] = last_use[x.0 as usize].max(i);
        }
    }
    for o in &g.outputs {
        last_use[o.0 as usize] = n;
    }
    let mut cuts = Vec::new();
    let mut live: Vec<usize> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        if !copyable(&node.op) {
            live.push(i);
        }
        live.retain(|&j| last_use[j] > i);
        let is_input = matches!(node.op, Op::Input { .. });
        if live.len() == 1 && live[0] == i && !is_input && last_use[i] < n && i + 1 < n {
            cuts.push(NodeId(i as _));
        }
    }
    cuts
}

/// Cut `g` after each node of `cuts` (ascending, each from
/// [`cut_points`]): `cuts.len() + 1` graphs, the first reading `g`'s
/// input, each later one an input named [`STAGE_INPUT`], the last giving
/// `g`'s output.
pub fn split_at(g: &Graph, cuts: &[NodeId]) -> Result<Vec<Graph>, String> {
    if g.outputs.len() != 1 {
        return Err(format!(
            "a pipeline stage has one output; {} has {}",
            g.name,
            g.outputs.len()
        ));
    }
    let inputs = g
        .nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Input { .. }))
        .count();
    if inputs != 1 {
        return Err(format!(
            "a pipeline stage has one input; {} has {inputs}",
            g.name
        ));
    }
    let valid = cut_points(g);
    for c in cuts {
        if !valid.contains(c) {
            return Err(format!(
                "node {} is not a cut point (more than one value crosses there)",
                c.0
            ));
        }
    }
    if cuts.windows(2).any(|w| w[0] >= w[1]) {
        return Err("cut points must be ascending".into());
    }
    let n = g.len();
    let mut bounds: Vec<usize> = vec![0];
    bounds.extend(cuts.iter().map(|c| c.0 as usize + 1));
    bounds.push(n);
    let mut stages = Vec::new();
    for s in 0..bounds.len() - 1 {
        let (lo, hi) = (bounds[s], bounds[s + 1]);
        let mut sub = Graph::new(format!("{}#stage{s}", g.name));
        let mut remap: HashMap<NodeId, NodeId> = HashMap::new();
        if s > 0 {
            let cut = NodeId((lo - 1) as _);
            let id = sub.append_node(
                Op::Input {
                    name: STAGE_INPUT.into(),
                },
                vec![],
                g.shape(cut).clone(),
                Some(STAGE_INPUT.into()),
            );
            remap.insert(cut, id);
        }
        for i in lo..hi {
            let node = &g.nodes()[i];
            if copyable(&node.op) {
                continue; // copied where read
            }
            let mut ins = Vec::with_capacity(node.inputs.len());
            for &x in &node.inputs {
                if let Some(&m) = remap.get(&x) {
                    ins.push(m);
                    continue;
                }
                let src = g.node(x);
                if !copyable(&src.op) {
                    return Err(format!(
                        "node {i} of stage {s} reads node {} from an earlier stage",
                        x.0
                    ));
                }
                let m =
                    sub.append_node(src.op.clone(), vec![], src.shape.clone(), src.name.clone());
                remap.insert(x, m);
                ins.push(m);
            }
            let m = sub.append_node(node.op.clone(), ins, node.shape.clone(), node.name.clone());
            remap.insert(NodeId(i as _), m);
        }
        let out = if s + 1 == bounds.len() - 1 {
            g.outputs[0]
        } else {
            NodeId((hi - 1) as _)
        };
        let o = *remap
            .get(&out)
            .ok_or_else(|| format!("stage {s} does not compute its output"))?;
        sub.set_outputs(vec![o]);
        stages.push(sub);
    }
    Ok(stages)
}

/// [`split_at`] into `stages` parts of about equal node counts, cut at the
/// [`cut_points`] nearest the even split.
pub fn split_even(g: &Graph, stages: usize) -> Result<Vec<Graph>, String> {
    if stages == 0 {
        return Err("at least one stage".into());
    }
    let valid = cut_points(g);
    let n = g.len();
    let mut cuts: Vec<NodeId> = Vec::new();
    for k in 1..stages {
        let target = n * k / stages;
        let best = valid
            .iter()
            .filter(|c| cuts.last().is_none_or(|l| c.0 > l.0))
            .min_by_key(|c| (c.0 as usize).abs_diff(target))
            .copied()
            .ok_or_else(|| {
                format!(
                    "{} has {} cut point(s); {stages} stages need {}",
                    g.name,
                    valid.len(),
                    stages - 1
                )
            })?;
        cuts.push(best);
    }
    split_at(g, &cuts)
}

/// The params `g` declares, by name.
pub fn param_names(g: &Graph) -> Vec<String> {
    g.nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Param { name } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::op::{Activation, BinaryOp};
    use rlx_ir::{DType, Shape};

    fn s() -> Shape {
        Shape::new(&[2, 3], DType::F32)
    }

    /// x -> relu -> (* w) -> (+ x?) ...: a chain with a residual.
    fn chain(residual: bool) -> (Graph, Vec<NodeId>) {
        let mut g = Graph::new("chain");
        let x = g.input("x", s());
        let w = g.param("w", s());
        let a = g.add_node(Op::Activation(Activation::Relu), vec![x], s());
        let b = g.binary(BinaryOp::Mul, a, w, s());
        let c = g.add_node(Op::Activation(Activation::Tanh), vec![b], s());
        let d = if residual {
            g.binary(BinaryOp::Add, c, a, s())
        } else {
            g.binary(BinaryOp::Mul, c, w, s())
        };
        g.set_outputs(vec![d]);
        (g, vec![a, b, c, d])
    }

    #[test]
    fn cuts_only_where_one_value_crosses() {
        let (g, n) = chain(false);
        assert_eq!(cut_points(&g), vec![n[0], n[1], n[2]]);
        // With the residual `a` is live until the end: only after `a`.
        let (g, n) = chain(true);
        assert_eq!(cut_points(&g), vec![n[0]]);
        let err = split_at(&g, &[n[1]]).unwrap_err();
        assert!(err.contains("not a cut point"), "{err}");
    }

    #[test]
    fn stages_copy_params_and_read_the_activation() {
        let (g, n) = chain(false);
        let stages = split_at(&g, &[n[1]]).unwrap();
        assert_eq!(stages.len(), 2);
        // Stage 0 ends at the cut; stage 1 starts from an input of its shape.
        assert_eq!(stages[0].outputs.len(), 1);
        assert_eq!(param_names(&stages[0]), vec!["w"]);
        assert_eq!(param_names(&stages[1]), vec!["w"]);
        let inputs: Vec<String> = stages[1]
            .nodes()
            .iter()
            .filter_map(|n| match &n.op {
                Op::Input { name } => Some(name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(inputs, vec![STAGE_INPUT.to_string()]);
        assert_eq!(split_even(&g, 3).unwrap().len(), 3);
        let err = split_even(&chain(true).0, 3).unwrap_err();
        assert!(err.contains("cut point"), "{err}");
    }
}
