//! `Op::RoundToFormat` (rlx's float number formats: f16, bf16, e4m3, e2m1
//! emulated on f32) on the plugin, every scaling, against the CPU backend
//! bit for bit in every mode (both compute rlx-ir's `FloatFormat` rounding,
//! the reference rlx-ir names for every backend), and the values checked to
//! lie in the format (rounding twice changes nothing). Before, the node
//! fell back to the CPU backend, splitting every such graph.

use rlx_ir::number_format::{FloatFormat, FormatScaling};
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_tests::parity::{check_against_every_mode, random_feeds, run_cpu, Tol};

const E4M3: FloatFormat = FloatFormat {
    exp_bits: 4,
    man_bits: 3,
    bias: 7,
    max_normal: 448.0,
};
const E2M1: FloatFormat = FloatFormat {
    exp_bits: 2,
    man_bits: 1,
    bias: 1,
    max_normal: 6.0,
};

fn graph(format: FloatFormat, scaling: FormatScaling, dims: &[usize]) -> Graph {
    let s = Shape::new(dims, DType::F32);
    let mut g = Graph::new("round_to_format");
    let x = g.input("x", s.clone());
    let mut ins = vec![x];
    if matches!(scaling, FormatScaling::PerTensor) {
        ins.push(g.input("amax", Shape::new(&[1], DType::F32)));
    }
    let y = g.add_node(Op::RoundToFormat { format, scaling }, ins, s);
    g.set_outputs(vec![y]);
    g
}

#[test]
fn every_format_and_scaling_matches_the_cpu_bit_for_bit() {
    let exact = Tol { abs: 0.0, rel: 0.0 };
    let mut seed = 11;
    for format in [FloatFormat::F16, FloatFormat::BF16, E4M3, E2M1] {
        for scaling in [
            FormatScaling::None,
            FormatScaling::PerTensor,
            FormatScaling::Block(32),
            FormatScaling::FineBlock(16),
        ] {
            // A row that is not a whole number of blocks, and a 1-D tensor.
            for dims in [&[3usize, 40][..], &[70][..]] {
                seed += 1;
                let g = graph(format, scaling, dims);
                let mut feeds = random_feeds(&g, seed);
                for f in &mut feeds {
                    if f.name == "x" {
                        // Spread over magnitudes, with a zero and ties.
                        for (i, v) in f.values.iter_mut().enumerate() {
                            *v *= [0.01f32, 1.0, 37.0, 900.0][i % 4];
                        }
                        f.values[0] = 0.0;
                    }
                }
                let amax = feeds[0].values.iter().fold(0f32, |a, v| a.max(v.abs()));
                if let Some(f) = feeds.iter_mut().find(|f| f.name == "amax") {
                    f.values = vec![amax];
                }
                let want = run_cpu(&g, &feeds);
                assert!(want[0].iter().any(|v| *v != 0.0), "reference is zeros");
                if matches!(scaling, FormatScaling::None) {
                    for v in &want[0] {
                        assert_eq!(format.round(*v), *v, "{format:?}: {v} is not in the format");
                    }
                }
                check_against_every_mode(
                    &format!("{format:?} {scaling:?} {dims:?}"),
                    &g,
                    &feeds,
                    &want,
                    exact,
                );
            }
        }
    }
}
