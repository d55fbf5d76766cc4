//! A graph the MLX plugin cannot take whole runs split between the plugin
//! and rlx-runtime's CPU backend through `Session::new(Device::Mlx)`, in
//! every mode, and says where each node ran.
//!
//! The graph: y = sort(x·x, axis 1) + x on [3, 5], then
//! z = cast_f32(softmax(cast_f64(y))). The plugin claims neither Sort
//! (any dtype) nor Softmax for f64, so both go to the CPU and the rest to
//! the plugin. Reference: the formula in f64, written out below; the CPU
//! backend is a second opinion. Tolerance 1e-5 abs + 1e-5 rel.

use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{explain, register_plugin_backend, set_fallback, with_mode};
use rlx_plugin_host::partition::{Fallback, Side};
use rlx_plugin_tests::parity::{assert_close, mlx, Tol, MODES};
use rlx_runtime::{Device, Session};

const TOL: Tol = Tol {
    abs: 1e-5,
    rel: 1e-5,
};

fn split_graph() -> Graph {
    let f32s = Shape::new(&[3, 5], DType::F32);
    let f64s = Shape::new(&[3, 5], DType::F64);
    let mut g = Graph::new("split");
    let x = g.input("x", f32s.clone());
    let sq = g.binary(rlx_ir::op::BinaryOp::Mul, x, x, f32s.clone());
    let cp = g.add_node(
        Op::Sort {
            axis: 1,
            descending: false,
        },
        vec![sq],
        f32s.clone(),
    );
    let y = g.binary(rlx_ir::op::BinaryOp::Add, cp, x, f32s.clone());
    let wide = g.add_node(Op::Cast { to: DType::F64 }, vec![y], f64s.clone());
    let sm = g.softmax(wide, 1, f64s);
    let z = g.add_node(Op::Cast { to: DType::F32 }, vec![sm], f32s);
    g.set_outputs(vec![y, z]);
    g
}

fn reference(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let (mut y, mut z) = (vec![0f32; 15], vec![0f32; 15]);
    for r in 0..3 {
        let mut sq: Vec<f64> = (0..5).map(|c| (x[r * 5 + c] as f64).powi(2)).collect();
        sq.sort_by(f64::total_cmp);
        let mut row = [0f64; 5];
        for c in 0..5 {
            row[c] = sq[c] + x[r * 5 + c] as f64;
            y[r * 5 + c] = row[c] as f32;
        }
        // Softmax of the f32 values the graph casts up.
        let w: Vec<f64> = row.iter().map(|v| *v as f32 as f64).collect();
        let m = w.iter().cloned().fold(f64::MIN, f64::max);
        let s: f64 = w.iter().map(|v| (v - m).exp()).sum();
        for c in 0..5 {
            z[r * 5 + c] = ((w[c] - m).exp() / s) as f32;
        }
    }
    (y, z)
}

const X: [f32; 15] = [
    0.9, -1.1, 0.8, 1.2, -0.7, 1.05, 0.6, -0.95, 1.3, 0.5, -0.85, 1.15, 0.75, -1.0, 0.9,
];

#[test]
fn a_graph_with_unclaimed_nodes_runs_split_and_matches() {
    let (want_y, want_z) = reference(&X);
    // The reference by hand on the first row's first two values.
    // Row 0 squared: 0.81, 1.21, 0.64, 1.44, 0.49, sorted 0.49, 0.64, ...
    assert!((want_y[0] - (0.49 + 0.9)).abs() < 1e-6);
    assert!((want_y[1] - (0.64 - 1.1)).abs() < 1e-6);
    let g = split_graph();
    let cpu = Session::new(Device::Cpu)
        .compile(g.clone())
        .run(&[("x", &X[..])]);
    assert_close("cpu y", &cpu[0], &want_y, TOL);
    assert_close("cpu z", &cpu[1], &want_z, TOL);

    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    for mode in MODES {
        let out = with_mode(mode, || {
            Session::new(Device::Mlx)
                .compile(g.clone())
                .run(&[("x", &X[..])])
        });
        assert_close(&format!("split y [{}]", mode.name()), &out[0], &want_y, TOL);
        assert_close(&format!("split z [{}]", mode.name()), &out[1], &want_z, TOL);
    }

    let plan = explain(Device::Mlx, &g).unwrap();
    let text = plan.to_string();
    println!("{text}");
    let line = |kind: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {kind} ")))
            .unwrap_or_else(|| panic!("no {kind} line in\n{text}"))
            .to_string()
    };
    assert!(
        line("Sort").contains("-> cpu") && line("Sort").ends_with("mlx does not claim Sort"),
        "{text}"
    );
    assert!(
        line("Softmax").contains("f64 -> cpu")
            && line("Softmax").ends_with("mlx claims Softmax for f32, f16, bf16"),
        "{text}"
    );
    assert!(line("Cast").contains("-> mlx"), "{text}");
    let sides: Vec<Side> = plan.partitions.iter().map(|p| p.side).collect();
    assert!(
        sides.contains(&Side::Cpu) && sides.contains(&Side::Plugin),
        "{text}"
    );
    assert!(plan.boundary_bytes > 0 && !plan.boundary.is_empty());
    // Every boundary tensor is [3, 5]: f32 (60 bytes) or f64 (120).
    assert!(
        plan.boundary_bytes.is_multiple_of(60),
        "{}",
        plan.boundary_bytes
    );
    let json = plan.to_json();
    assert_eq!(
        json["partitions"].as_array().unwrap().len(),
        plan.partitions.len()
    );
}

#[test]
fn a_graph_the_plugin_takes_whole_is_not_split() {
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let s = Shape::new(&[3, 5], DType::F32);
    let mut g = Graph::new("whole");
    let x = g.input("x", s.clone());
    let y = g.binary(rlx_ir::op::BinaryOp::Mul, x, x, s.clone());
    let z = g.softmax(y, 1, s);
    g.set_outputs(vec![z]);
    let plan = explain(Device::Mlx, &g).unwrap();
    assert!(plan.is_whole(), "{plan}");
    assert_eq!(plan.partitions.len(), 1);
    assert!(
        plan.to_string()
            .contains("1 partition(s): 1 on mlx, 0 on cpu"),
        "{plan}"
    );
}

#[test]
fn without_fallback_the_first_unclaimed_node_is_the_error() {
    // Its own device slot, so the policy does not reach the other tests.
    register_plugin_backend(mlx(), Device::Gpu, Mode::Lazy);
    assert!(set_fallback(Device::Gpu, Fallback::Never));
    let g = split_graph();
    let e = rlx_plugin_host::guard::catch("compile", || Session::new(Device::Gpu).compile(g))
        .err()
        .expect("the compile fails");
    assert!(e.contains("Sort"), "{e}");
}
