//! Compiled mode on the CPU chooses between MLX's compiled function and a
//! recorded plan of the graph's evaluation (`plugin-mlx/src/executable/
//! plan.rs`). MLX's compile fuses only elementwise arithmetic, broadcasts
//! and no-op copies, so where the plan holds none of those, or (small
//! values) they are at most half of it, the plan is chosen without tracing
//! the compiled function; where they are most of it, the trace decides.
//! Each choice is the one its debug line names, and every output is the
//! lazy run's, bit for bit.

use rlx_ir::infer::GraphExt;
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::{CompileOptions, HostTensor, Mode};
use rlx_plugin_tests::capture_logs;
use rlx_plugin_tests::parity::mlx;

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// A transposed view concatenated with the input both ways: nothing MLX
/// fuses (and more than the one op compiled mode builds as lazy mode does).
fn views_only() -> Graph {
    let mut g = Graph::new("views_only");
    let x = g.input("x", f32s(&[4, 4]));
    let t = g.transpose_(x, vec![1, 0]);
    let c = g.concat(vec![x, t], 0, f32s(&[8, 4]));
    let d = g.concat(vec![t, x], 1, f32s(&[4, 8]));
    g.set_outputs(vec![c, d]);
    g
}

/// Two slices, their sum and a concatenation: one op of four fusable.
fn mostly_copies() -> Graph {
    let mut g = Graph::new("mostly_copies");
    let x = g.input("x", f32s(&[16]));
    let half = |g: &mut Graph, start| {
        g.add_node(
            Op::Narrow {
                axis: 0,
                start,
                len: 8,
            },
            vec![x],
            f32s(&[8]),
        )
    };
    let a = half(&mut g, 0);
    let b = half(&mut g, 8);
    let s = g.binary(BinaryOp::Add, a, b, f32s(&[8]));
    let c = g.concat(vec![a, b, s], 0, f32s(&[24]));
    g.set_outputs(vec![c]);
    g
}

/// `(x * x + x) * x - x`: arithmetic MLX fuses into one kernel.
fn arithmetic() -> Graph {
    let mut g = Graph::new("arithmetic");
    let x = g.input("x", f32s(&[64]));
    let xx = g.mul(x, x);
    let a = g.add(xx, x);
    let m = g.mul(a, x);
    let y = g.sub(m, x);
    g.set_outputs(vec![y]);
    g
}

fn input(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    HostTensor::from_f32(shape.to_vec(), &v).unwrap()
}

/// The debug lines compiling `g` in compiled mode wrote, after checking
/// that its outputs are the lazy run's.
fn compiled_choice(g: &Graph, shape: &[usize]) -> Vec<String> {
    let logs = capture_logs(log::LevelFilter::Debug);
    let x = input(shape);
    let lazy = mlx()
        .compile_graph(g, &CompileOptions::mode(Mode::Lazy))
        .unwrap()
        .run(&[("x", &x)])
        .unwrap();
    let start = logs().len();
    let mut exe = mlx()
        .compile_graph(g, &CompileOptions::mode(Mode::Compiled))
        .unwrap();
    let lines: Vec<String> = logs()[start..]
        .iter()
        .map(|r| r.message.clone())
        .filter(|m| m.contains(&format!("graph {:?}: compiled mode", g.name)))
        .collect();
    for _ in 0..2 {
        let out = exe.run(&[("x", &x)]).unwrap();
        assert_eq!(out.len(), lazy.len());
        for (o, l) in out.iter().zip(&lazy) {
            assert_eq!(o.data, l.data, "{}", g.name);
        }
    }
    lines
}

#[test]
fn the_plan_is_chosen_without_a_trace_where_mlx_could_not_fuse_most() {
    if rlx_plugin_api::DeviceKind::Gpu
        == mlx()
            .descriptor()
            .device_infos
            .first()
            .map_or(rlx_plugin_api::DeviceKind::Cpu, |d| d.kind)
    {
        eprintln!(
            "the plugin's default device is a GPU, where compiled mode records no plan: skipped"
        );
        return;
    }
    let views = compiled_choice(&views_only(), &[4, 4]);
    assert!(
        views
            .iter()
            .any(|m| m.contains("runs a recorded plan") && m.contains("(nothing MLX could fuse)")),
        "{views:?}"
    );
    let copies = compiled_choice(&mostly_copies(), &[16]);
    assert!(
        copies.iter().any(|m| m.contains("runs a recorded plan")
            && m.contains("(at most half of them MLX could fuse)")),
        "{copies:?}"
    );
    let fused = compiled_choice(&arithmetic(), &[64]);
    assert!(
        fused
            .iter()
            .any(|m| m.contains("calls MLX's compiled function (")),
        "{fused:?}"
    );
}
