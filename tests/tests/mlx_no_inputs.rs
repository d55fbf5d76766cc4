//! Graphs with no inputs (constants and params only), run with no inputs
//! through every run entry point of `Session` and every mode, against the
//! CPU backend. rlx-runtime's own filter and EEG suites build such graphs;
//! the plugin panicked on them ("index out of bounds: the len is 0 but the
//! index is 0"), a path none of this project's suites had reached.
//! Tolerance: 1e-6 absolute (a few elementwise f32 ops and one short sum).

use rlx_ir::{DType, Graph, NodeId, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_runtime::{Device, Session};

fn constant(g: &mut Graph, values: &[f32], dims: &[usize]) -> NodeId {
    let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    g.add_node(Op::Constant { data }, vec![], Shape::new(dims, DType::F32))
}

/// `exp(c) * 2 + c`, and its sum; with `param`, `+ p` on the first.
fn graph(param: bool) -> Graph {
    let mut g = Graph::new("no_inputs");
    let c = constant(&mut g, &[0.5, -1.0, 2.0, 0.25, 1.5, -0.75], &[2, 3]);
    let two = constant(&mut g, &[2.0], &[1]);
    let s = Shape::new(&[2, 3], DType::F32);
    let e = g.activation(rlx_ir::op::Activation::Exp, c, s.clone());
    let m = g.binary(rlx_ir::op::BinaryOp::Mul, e, two, s.clone());
    let mut y = g.binary(rlx_ir::op::BinaryOp::Add, m, c, s.clone());
    if param {
        let p = g.param("p", s.clone());
        y = g.binary(rlx_ir::op::BinaryOp::Add, y, p, s);
    }
    let total = g.reduce(
        y,
        rlx_ir::op::ReduceOp::Sum,
        vec![1],
        false,
        Shape::new(&[2], DType::F32),
    );
    g.set_outputs(vec![y, total]);
    g
}

const P: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];

/// Every way a program runs a compiled graph with nothing to feed.
fn run_every_way(device: Device, param: bool) -> Vec<Vec<Vec<f32>>> {
    let mut c = Session::new(device).compile(graph(param));
    if param {
        c.set_param("p", &P);
    }
    let typed: Vec<Vec<f32>> = c
        .run_typed(&[])
        .into_iter()
        .map(|(bytes, dtype)| {
            assert_eq!(dtype, DType::F32);
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect()
        })
        .collect();
    let read = c.run_read_outputs(&[], None);
    vec![c.run(&[]), typed, read, c.run(&[])]
}

#[test]
fn graphs_without_inputs_run_in_every_mode_and_entry_point() {
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    for param in [false, true] {
        let want = run_every_way(Device::Cpu, param);
        assert!(want[0][0].iter().all(|v| *v != 0.0), "reference is zeros");
        for mode in MODES {
            let got = with_mode(mode, || run_every_way(Device::Mlx, param));
            for (way, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.len(), w.len());
                for (o, (a, b)) in g.iter().zip(w).enumerate() {
                    let d = a
                        .iter()
                        .zip(b)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0f32, f32::max);
                    assert!(
                        a.len() == b.len() && d <= 1e-6,
                        "[{}] param {param}, entry point {way}, output {o}: {a:?} vs {b:?}",
                        mode.name()
                    );
                }
            }
        }
    }
}

/// The same graphs handed to the plugin as they are (through the ABI, so
/// no optimiser folds the constants first): a params-only or
/// constants-only value the plugin computes once and keeps ("hoisted")
/// was never computed when it read no param, and the first run indexed an
/// empty list.
#[test]
fn constant_only_graphs_through_the_abi() {
    use rlx_plugin_tests::parity::{check_against_every_mode, random_feeds, run_cpu, Tol};
    for param in [false, true] {
        let g = graph(param);
        let feeds = random_feeds(&g, 7);
        let want = run_cpu(&g, &feeds);
        assert!(want[0].iter().all(|v| *v != 0.0), "reference is zeros");
        check_against_every_mode(
            &format!("no inputs, param {param}"),
            &g,
            &feeds,
            &want,
            Tol {
                abs: 1e-6,
                rel: 1e-6,
            },
        );
    }
}
