//! rlx-ir autodiff rules for the MLX plugin's collectives, by name, so
//! rlx's own backward (`grad_with_loss`, `ResidentTrainer`) differentiates
//! through a tensor-parallel or data-parallel graph. Every rank runs the
//! same graph on its own data (SPMD); the loss being differentiated is the
//! sum of the ranks' losses, so:
//!
//! | op | gradient of its input |
//! |---|---|
//! | `mlx.all_sum` | `mlx.all_sum` of the output's gradient (each rank's output feeds its own loss) |
//! | `mlx.grad_sum` (the identity) | `mlx.all_sum` of the output's gradient: the data-parallel gradient all-reduce |
//! | `mlx.all_gather` | `mlx.sum_scatter` of the output's gradient (this rank's rows of the sum) |
//! | `mlx.sum_scatter` | `mlx.all_gather` of the output's gradient |
//! | `mlx.all_max`, `mlx.all_min` | none: a graph that needs one fails, naming the op |
//!
//! A plugin's other custom ops have no rule (rlx-ir's default: no
//! gradient).

use rlx_ir::{Node, NodeId, Op, VjpContext};

/// The rule for `name`, when it is one of the collectives.
pub(crate) fn vjp(name: &str, node: &Node, ctx: &mut VjpContext) -> Option<Vec<(usize, NodeId)>> {
    let attrs = match &node.op {
        Op::Custom { attrs, .. } => attrs.clone(),
        _ => return None,
    };
    let (op, attrs) = match name {
        "mlx.all_sum" | "mlx.grad_sum" => ("mlx.all_sum", Vec::new()),
        "mlx.all_gather" => ("mlx.sum_scatter", attrs),
        "mlx.sum_scatter" => ("mlx.all_gather", attrs),
        "mlx.all_max" | "mlx.all_min" => panic!(
            "autodiff: {name} has no gradient (the max or min over the group is not differentiated here)"
        ),
        _ => return None,
    };
    let g = ctx.bwd.custom_op(op, attrs, vec![ctx.upstream]);
    Some(vec![(0, g)])
}
