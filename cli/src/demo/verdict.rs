//! The one line under the demo's table that says which backend was faster
//! on this model and why, from what was measured and the model's size.

use rlx_ir::{Dim, Graph};

/// Flops of the graph's matrix products (convolutions included), by
/// rlx-runtime's own count per output element (the shard planner's): what
/// decides whether a run is work or overhead.
pub fn matmul_flops(g: &Graph) -> f64 {
    g.nodes()
        .iter()
        .filter_map(|n| {
            let per = rlx_runtime::shard_placement::flops_per_output_elem(g, n.id)?;
            let out: f64 = n
                .shape
                .dims()
                .iter()
                .map(|d| match d {
                    Dim::Static(n) => *n as f64,
                    Dim::Dynamic(_) => 1.0,
                })
                .product();
            Some(per * out)
        })
        .sum()
}

/// The verdict: `best` is the plugin's fastest mode and its steady run time,
/// `cpu_ms` the CPU backend's, `nodes` the graph's node count.
pub fn verdict(
    plugin: &str,
    best: (&str, f64),
    cpu_ms: f64,
    flops: f64,
    nodes: usize,
    on_gpu: bool,
) -> String {
    let (mode, ms) = best;
    let ratio = ms / cpu_ms;
    let size = if flops >= 1e9 {
        format!(
            "{:.1} GFLOP of matrix products in {nodes} nodes",
            flops / 1e9
        )
    } else {
        format!(
            "{:.1} MFLOP of matrix products in {nodes} nodes",
            flops / 1e6
        )
    };
    if ratio <= 1.0 {
        let why = if on_gpu {
            "the GPU's speed at the products outweighs MLX launching each op"
        } else {
            "the plugin's own kernels (its matrix products on its threads beside the BLAS's) \
             outweigh what a run costs beyond the work"
        };
        format!(
            "{plugin} ({mode}) took {ratio:.2}x the CPU backend's time ({:.1}x faster): {size}, enough work that {why}",
            1.0 / ratio
        )
    } else {
        let why = if on_gpu {
            "the GPU's launches and copies, which the CPU backend does not pay"
        } else {
            "building MLX's graph of the run and walking it, which the CPU backend (a plan \
             made once) does not pay"
        };
        format!(
            "{plugin} ({mode}) took {ratio:.2}x the CPU backend's time: {size} is too little work to pay for \
             {why}; a larger model favours the plugin (rlx-host demo --model decoder)"
        )
    }
}
