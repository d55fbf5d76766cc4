//! Control flow on the MLX plugin: If, While (data-dependent trip counts,
//! with and without `max_iterations`) and Scan (trajectory, broadcast
//! inputs, per-step xs, checkpoints), in every mode.
//!
//! References are written here in plain Rust (f64) from the ops'
//! definitions in rlx-ir 0.2.19 `src/op.rs`, and checked by hand on the
//! first case of each test; the CPU backend runs the While graphs through
//! rlx-runtime as a second opinion (its If lowering fails on these graphs). Tolerance: 1e-5 abs + 1e-5 rel
//! (f32 through at most a few dozen tanh/multiply steps).

use rlx_ir::op::{Activation, BinaryOp, CmpOp};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{check_against_every_mode, run_cpu, run_mlx, Feed, Tol};

const TOL: Tol = Tol {
    abs: 1e-5,
    rel: 1e-5,
};
const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

fn constant(g: &mut Graph, v: &[f32], dims: &[usize]) -> NodeId {
    let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    g.add_node(Op::Constant { data }, vec![], f32s(dims))
}

fn bin(g: &mut Graph, op: BinaryOp, a: NodeId, b: NodeId, dims: &[usize]) -> NodeId {
    g.binary(op, a, b, f32s(dims))
}

fn feed(name: &str, v: &[f32]) -> Feed {
    Feed {
        name: name.into(),
        values: v.to_vec(),
    }
}

/// then: x * 2, else: x + 1, on x [4]; the predicate is an input.
fn if_graph() -> Graph {
    let mut then_b = Graph::new("then");
    let x = then_b.input("x", f32s(&[4]));
    let two = constant(&mut then_b, &[2.0], &[1]);
    let y = bin(&mut then_b, BinaryOp::Mul, x, two, &[4]);
    then_b.set_outputs(vec![y]);
    let mut else_b = Graph::new("else");
    let x = else_b.input("x", f32s(&[4]));
    let one = constant(&mut else_b, &[1.0], &[1]);
    let y = bin(&mut else_b, BinaryOp::Add, x, one, &[4]);
    else_b.set_outputs(vec![y]);

    let mut g = Graph::new("if");
    let p = g.input("p", Shape::new(&[1], DType::Bool));
    let x = g.input("x", f32s(&[4]));
    let y = g.add_node(
        Op::If {
            then_branch: Box::new(then_b),
            else_branch: Box::new(else_b),
        },
        vec![p, x],
        f32s(&[4]),
    );
    g.set_outputs(vec![y]);
    g
}

#[test]
fn if_takes_the_branch_the_predicate_names_in_every_mode() {
    let g = if_graph();
    let x = [0.5f32, -1.0, 2.0, 3.5];
    for (p, want) in [(1.0f32, x.map(|v| v * 2.0)), (0.0, x.map(|v| v + 1.0))] {
        let feeds = [feed("p", &[p]), feed("x", &x)];
        // The hand-checked case: p = 1 doubles, p = 0 adds one.
        assert_eq!(want[0], if p != 0.0 { 1.0 } else { 1.5 });
        let reference = vec![want.to_vec()];
        // Not against the CPU: rlx-runtime 0.2.19's `LowerIf` makes a
        // Where of this graph that fails its own IR verifier ("declared [4]
        // f32, inferred [4] bool") for a [1] predicate.
        check_against_every_mode(&format!("If p={p}"), &g, &feeds, &reference, TOL);
    }
}

/// Carried (x [3], i [1]); while i < limit: x = x * 1.5 + 0.25, i += 1.
/// The trip count is `limit - i0`: data, not a constant of the graph.
fn while_graph(max_iterations: Option<usize>, limit: f32) -> Graph {
    let mut cond = Graph::new("cond");
    let _x = cond.input("x", f32s(&[3]));
    let i = cond.input("i", f32s(&[1]));
    let lim = constant(&mut cond, &[limit], &[1]);
    let c = cond.add_node(
        Op::Compare(CmpOp::Lt),
        vec![i, lim],
        Shape::new(&[1], DType::Bool),
    );
    cond.set_outputs(vec![c]);

    let mut body = Graph::new("body");
    let x = body.input("x", f32s(&[3]));
    let i = body.input("i", f32s(&[1]));
    let k = constant(&mut body, &[1.5], &[1]);
    let b = constant(&mut body, &[0.25], &[1]);
    let one = constant(&mut body, &[1.0], &[1]);
    let xk = bin(&mut body, BinaryOp::Mul, x, k, &[3]);
    let x2 = bin(&mut body, BinaryOp::Add, xk, b, &[3]);
    let i2 = bin(&mut body, BinaryOp::Add, i, one, &[1]);
    body.set_outputs(vec![x2, i2]);

    let mut g = Graph::new("while");
    let x = g.input("x", f32s(&[3]));
    let i = g.input("i", f32s(&[1]));
    let y = g.add_node(
        Op::While {
            cond: Box::new(cond),
            body: Box::new(body),
            max_iterations,
        },
        vec![x, i],
        f32s(&[3]),
    );
    g.set_outputs(vec![y]);
    g
}

fn while_reference(x: &[f32], i0: f32, limit: f32, max: Option<usize>) -> Vec<f32> {
    let mut x: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let (mut i, mut n) = (i0 as f64, 0usize);
    while i < limit as f64 && max.is_none_or(|m| n < m) {
        for v in &mut x {
            *v = *v * 1.5 + 0.25;
        }
        i += 1.0;
        n += 1;
    }
    x.iter().map(|v| *v as f32).collect()
}

#[test]
fn while_runs_the_data_dependent_loop_with_and_without_a_bound() {
    let x = [1.0f32, -2.0, 0.5];
    // Hand check: from i = 3 to the limit 5, two steps: 1 -> 1.75 -> 2.875.
    assert_eq!(while_reference(&x, 3.0, 5.0, None)[0], 2.875);
    for (max, i0, limit) in [
        (None, 3.0f32, 5.0f32),
        (None, 0.0, 7.0),
        (None, 9.0, 5.0),     // no iteration at all
        (Some(3), 0.0, 7.0),  // the bound stops it first
        (Some(10), 2.0, 6.0), // the condition stops it first
    ] {
        let g = while_graph(max, limit);
        let feeds = [feed("x", &x), feed("i", &[i0])];
        let want = vec![while_reference(&x, i0, limit, max)];
        let what = format!("While max={max:?} i0={i0} limit={limit}");
        check_against_every_mode(&what, &g, &feeds, &want, TOL);
        // The CPU runs While as a loop too.
        let cpu = run_cpu(&g, &feeds);
        rlx_plugin_tests::parity::assert_close(&format!("{what} cpu"), &cpu[0], &want[0], TOL);
    }
}

/// carry [3], one broadcast w [3], one xs [len, 3]:
/// carry' = tanh(carry * w + x_t).
fn scan_graph(len: usize, save: bool, checkpoints: u32) -> Graph {
    let mut body = Graph::new("step");
    let c = body.input("carry", f32s(&[3]));
    let w = body.input("w", f32s(&[3]));
    let xt = body.input("x_t", f32s(&[3]));
    let cw = bin(&mut body, BinaryOp::Mul, c, w, &[3]);
    let s = bin(&mut body, BinaryOp::Add, cw, xt, &[3]);
    let y = body.activation(Activation::Tanh, s, f32s(&[3]));
    body.set_outputs(vec![y]);

    let rows = match (save, checkpoints as usize) {
        (false, _) => None,
        (true, 0) => Some(len),
        (true, k) => Some(k.min(len)),
    };
    let out = match rows {
        None => f32s(&[3]),
        Some(r) => f32s(&[r, 3]),
    };
    let mut g = Graph::new("scan");
    let init = g.input("init", f32s(&[3]));
    let w = g.input("w", f32s(&[3]));
    let xs = g.input("xs", f32s(&[len, 3]));
    let y = g.add_node(
        Op::Scan {
            body: Box::new(body),
            length: len as u32,
            save_trajectory: save,
            num_bcast: 1,
            num_xs: 1,
            num_checkpoints: checkpoints,
        },
        vec![init, w, xs],
        out,
    );
    g.set_outputs(vec![y]);
    g
}

/// The steps a checkpointed trajectory keeps: row k is the carry after step
/// ceil((k+1) L / K) - 1 (rlx-cpu's and rlx-autodiff's rule; the last row
/// is the final carry). rlx-ir's doc comment says floor(k L / K), which
/// neither implements; the plugin follows the implementations, so its
/// ScanBackward agrees with its Scan.
fn checkpoint_steps(len: usize, k: usize) -> Vec<usize> {
    if k == 0 || k >= len {
        (0..len).collect()
    } else {
        (0..k)
            .map(|i| (((i + 1) * len).div_ceil(k) - 1).min(len - 1))
            .collect()
    }
}

fn scan_reference(init: &[f32], w: &[f32], xs: &[f32], save: bool, k: usize) -> Vec<f32> {
    let len = xs.len() / 3;
    let mut c: Vec<f64> = init.iter().map(|v| *v as f64).collect();
    let mut traj: Vec<Vec<f64>> = Vec::new();
    for t in 0..len {
        for j in 0..3 {
            c[j] = (c[j] * w[j] as f64 + xs[t * 3 + j] as f64).tanh();
        }
        traj.push(c.clone());
    }
    let rows: Vec<Vec<f64>> = if !save {
        vec![c]
    } else {
        checkpoint_steps(len, k)
            .iter()
            .map(|t| traj[*t].clone())
            .collect()
    };
    rows.concat().iter().map(|v| *v as f32).collect()
}

#[test]
fn scan_matches_its_definition_for_every_output_form() {
    let init = [0.1f32, -0.4, 0.8];
    let w = [0.9f32, 1.1, -0.7];
    let len = 5;
    let xs: Vec<f32> = (0..len * 3).map(|i| ((i as f32) * 0.37).sin()).collect();
    // Hand check of step 1, element 0: tanh(0.1 * 0.9 + sin(0)) = tanh(0.09).
    assert!((scan_reference(&init, &w, &xs[..3], false, 0)[0] - 0.09f32.tanh()).abs() < 1e-7);
    for (save, k) in [(false, 0u32), (true, 0), (true, 2), (true, 5)] {
        let g = scan_graph(len, save, k);
        let feeds = [feed("init", &init), feed("w", &w), feed("xs", &xs)];
        let want = vec![scan_reference(&init, &w, &xs, save, k as usize)];
        check_against_every_mode(
            &format!("Scan save={save} checkpoints={k}"),
            &g,
            &feeds,
            &want,
            TOL,
        );
    }
}

#[test]
fn a_long_scan_runs_in_every_mode() {
    // 1,000 steps: compiled and run without the graph text growing (the
    // body is one graph inside the op).
    let len = 1000;
    let g = scan_graph(len, false, 0);
    let init = [0.1f32, -0.4, 0.8];
    let w = [0.5f32, 0.5, 0.5];
    let xs: Vec<f32> = (0..len * 3)
        .map(|i| ((i as f32) * 0.01).cos() * 0.1)
        .collect();
    let feeds = [feed("init", &init), feed("w", &w), feed("xs", &xs)];
    let want = scan_reference(&init, &w, &xs, false, 0);
    for mode in MODES {
        let got = run_mlx(&g, &feeds, mode).unwrap_or_else(|e| panic!("[{}] {e}", mode.name()));
        rlx_plugin_tests::parity::assert_close(
            &format!("1000-step Scan [{}]", mode.name()),
            &got[0].to_f32_vec().unwrap(),
            &want,
            TOL,
        );
    }
}

/// A scan over a body of every op the CPU's one-kernel scan takes (two
/// broadcast operands, two xs, a checkpointed trajectory), and the same
/// body with one op it does not take (Max: built step by step), both
/// against an f64 reference of the definitions (sigmoid, silu and exp as
/// plain f64 formulas: rlx's exp saturates only beyond |x| > 87, far from
/// these values).
#[test]
fn an_elementwise_scan_body_matches_its_definition_with_and_without_the_kernel() {
    // 11 lanes: the vector kernels' eight, then a scalar tail.
    let (len, n, k) = (7usize, 11usize, 3u32);
    let build = |with_max: bool| {
        let mut body = Graph::new("step");
        let c = body.input("carry", f32s(&[n]));
        let a = body.input("a", f32s(&[n]));
        let b = body.input("b", f32s(&[n]));
        let x = body.input("x_t", f32s(&[n]));
        let y = body.input("y_t", f32s(&[n]));
        let d = [n];
        let t1 = bin(&mut body, BinaryOp::Mul, c, a, &d); // c a
        let t2 = bin(&mut body, BinaryOp::Sub, t1, x, &d); // c a - x
        let t3 = body.activation(Activation::Sigmoid, t2, f32s(&d));
        let t4 = body.activation(Activation::Silu, y, f32s(&d));
        let t5 = bin(&mut body, BinaryOp::Div, t4, b, &d); // silu(y) / b
        let t6 = body.activation(Activation::Neg, t5, f32s(&d));
        let t7 = body.activation(Activation::Relu, t6, f32s(&d));
        let t8 = body.activation(Activation::Exp, x, f32s(&d));
        // Either sign, so tanh sees both (Add is in every other scan here).
        let t9 = bin(&mut body, BinaryOp::Sub, t3, t7, &d);
        let t10 = bin(&mut body, BinaryOp::Mul, t9, t8, &d);
        let out = if with_max {
            bin(&mut body, BinaryOp::Max, t10, t1, &d)
        } else {
            body.activation(Activation::Tanh, t10, f32s(&d))
        };
        body.set_outputs(vec![out]);
        let mut g = Graph::new("scan");
        let init = g.input("init", f32s(&[n]));
        let ga = g.input("a", f32s(&[n]));
        let gb = g.input("b", f32s(&[n]));
        let xs = g.input("xs", f32s(&[len, n]));
        let ys = g.input("ys", f32s(&[len, n]));
        let out = g.add_node(
            Op::Scan {
                body: Box::new(body),
                length: len as u32,
                save_trajectory: true,
                num_bcast: 2,
                num_xs: 2,
                num_checkpoints: k,
            },
            vec![init, ga, gb, xs, ys],
            f32s(&[k as usize, n]),
        );
        g.set_outputs(vec![out]);
        g
    };
    let init: Vec<f32> = (0..n).map(|i| 0.3 - 0.2 * i as f32).collect();
    let a: Vec<f32> = (0..n).map(|i| 0.8 + 0.1 * i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 1.5 - 0.2 * i as f32).collect();
    // tanh's arguments run from about -0 to beyond 10: its series near 0
    // and its exp form both.
    let xs: Vec<f32> = (0..len * n)
        .map(|i| ((i as f32) * 0.41).sin() * 2.5)
        .collect();
    let ys: Vec<f32> = (0..len * n)
        .map(|i| ((i as f32) * 0.23).cos() - 0.5)
        .collect();
    let reference = |with_max: bool| -> Vec<f32> {
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let mut c: Vec<f64> = init.iter().map(|v| *v as f64).collect();
        let mut traj = Vec::new();
        for t in 0..len {
            for j in 0..n {
                let (x, y) = (xs[t * n + j] as f64, ys[t * n + j] as f64);
                let t1 = c[j] * a[j] as f64;
                let t3 = sig(t1 - x);
                let t7 = (-(y * sig(y) / b[j] as f64)).max(0.0);
                let t10 = (t3 - t7) * x.exp();
                c[j] = if with_max { t10.max(t1) } else { t10.tanh() };
            }
            traj.push(c.clone());
        }
        checkpoint_steps(len, k as usize)
            .iter()
            .flat_map(|t| traj[*t].iter().map(|v| *v as f32))
            .collect()
    };
    let feeds = [
        feed("init", &init),
        feed("a", &a),
        feed("b", &b),
        feed("xs", &xs),
        feed("ys", &ys),
    ];
    for with_max in [false, true] {
        check_against_every_mode(
            &format!("elementwise Scan body (Max: {with_max})"),
            &build(with_max),
            &feeds,
            &[reference(with_max)],
            TOL,
        );
    }
}

#[test]
fn while_and_scan_reach_the_plugin_intact_through_session() {
    use rlx_host::run::{execute, ModelData};
    use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
    use rlx_plugin_tests::parity::{assert_close, mlx};
    use rlx_runtime::Device;
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    // Without max_iterations: rlx-runtime's unrolling would refuse it, so
    // this runs only if the loop reaches the plugin as a While.
    let x = [1.0f32, -2.0, 0.5];
    let g = while_graph(None, 6.0);
    let data = ModelData {
        inputs: vec![("x".into(), x.to_vec()), ("i".into(), vec![1.0])],
        params: vec![],
    };
    let want = while_reference(&x, 1.0, 6.0, None);
    let init = [0.1f32, -0.4, 0.8];
    let w = [0.9f32, 1.1, -0.7];
    let xs: Vec<f32> = (0..12).map(|i| ((i as f32) * 0.37).sin()).collect();
    let sg = scan_graph(4, true, 0);
    let sdata = ModelData {
        inputs: vec![
            ("init".into(), init.to_vec()),
            ("w".into(), w.to_vec()),
            ("xs".into(), xs.clone()),
        ],
        params: vec![],
    };
    let swant = scan_reference(&init, &w, &xs, true, 0);
    for mode in MODES {
        let got = with_mode(mode, || execute(Device::Mlx, &g, &data, 1))
            .unwrap_or_else(|e| panic!("[{}] {e}", mode.name()));
        assert_close(
            &format!("While via Session [{}]", mode.name()),
            &got.outputs[0],
            &want,
            TOL,
        );
        let got = with_mode(mode, || execute(Device::Mlx, &sg, &sdata, 1))
            .unwrap_or_else(|e| panic!("[{}] {e}", mode.name()));
        assert_close(
            &format!("Scan via Session [{}]", mode.name()),
            &got.outputs[0],
            &swant,
            TOL,
        );
    }
}

const A: f32 = 0.9;

/// c' = tanh(c * A + x_t): the forward body of the backward tests.
fn fwd_body() -> Graph {
    let mut b = Graph::new("fwd");
    let c = b.input("carry", f32s(&[3]));
    let xt = b.input("x_t", f32s(&[3]));
    let a = constant(&mut b, &[A], &[1]);
    let ca = bin(&mut b, BinaryOp::Mul, c, a, &[3]);
    let s = bin(&mut b, BinaryOp::Add, ca, xt, &[3]);
    let y = b.activation(Activation::Tanh, s, f32s(&[3]));
    b.set_outputs(vec![y]);
    b
}

/// Its VJP, written by hand: inputs (carry, x_t, d_output), outputs
/// (dcarry = g (1 - y^2) A, dx_t = g (1 - y^2)).
fn vjp_body() -> Graph {
    let mut b = Graph::new("vjp");
    let c = b.input("carry", f32s(&[3]));
    let xt = b.input("x_t", f32s(&[3]));
    let d = b.input("d_output", f32s(&[3]));
    let a = constant(&mut b, &[A], &[1]);
    let one = constant(&mut b, &[1.0], &[1]);
    let ca = bin(&mut b, BinaryOp::Mul, c, a, &[3]);
    let s = bin(&mut b, BinaryOp::Add, ca, xt, &[3]);
    let y = b.activation(Activation::Tanh, s, f32s(&[3]));
    let yy = bin(&mut b, BinaryOp::Mul, y, y, &[3]);
    let om = bin(&mut b, BinaryOp::Sub, one, yy, &[3]);
    let dpre = bin(&mut b, BinaryOp::Mul, d, om, &[3]);
    let dc = bin(&mut b, BinaryOp::Mul, dpre, a, &[3]);
    b.set_outputs(vec![dc, dpre]);
    b
}

/// Forward carries c_0 .. c_L in f64.
fn carries(init: &[f32], xs: &[f32]) -> Vec<Vec<f64>> {
    let mut c: Vec<f64> = init.iter().map(|v| *v as f64).collect();
    let mut out = vec![c.clone()];
    for x in xs.chunks(3) {
        for j in 0..3 {
            c[j] = (c[j] * A as f64 + x[j] as f64).tanh();
        }
        out.push(c.clone());
    }
    out
}

/// (dinit, dxs) of loss = <upstream, scan output>, by the chain rule.
fn backward_reference(
    init: &[f32],
    xs: &[f32],
    up: &[f32],
    save: bool,
    k: usize,
) -> (Vec<f32>, Vec<f32>) {
    let len = xs.len() / 3;
    let c = carries(init, xs);
    let kept = checkpoint_steps(len, k);
    let mut g: Vec<f64> = if save {
        vec![0.0; 3]
    } else {
        up.iter().map(|v| *v as f64).collect()
    };
    let mut dx = vec![0.0f64; xs.len()];
    for t in (0..len).rev() {
        if save {
            if let Some(row) = kept.iter().position(|s| *s == t) {
                for j in 0..3 {
                    g[j] += up[row * 3 + j] as f64;
                }
            }
        }
        for j in 0..3 {
            let y = c[t + 1][j];
            let dpre = g[j] * (1.0 - y * y);
            dx[t * 3 + j] = dpre;
            g[j] = dpre * A as f64;
        }
    }
    let f = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
    (f(&g), f(&dx))
}

/// The loss the gradients are of, for the finite-difference check.
fn loss(init: &[f32], xs: &[f32], up: &[f32], save: bool, k: usize) -> f64 {
    let len = xs.len() / 3;
    let c = carries(init, xs);
    if !save {
        return (0..3).map(|j| up[j] as f64 * c[len][j]).sum();
    }
    checkpoint_steps(len, k)
        .iter()
        .enumerate()
        .map(|(r, t)| {
            (0..3)
                .map(|j| up[r * 3 + j] as f64 * c[t + 1][j])
                .sum::<f64>()
        })
        .sum()
}

fn backward_graph(xs_grad: bool, len: usize, save: bool, k: u32) -> Graph {
    let rows = if save {
        checkpoint_steps(len, k as usize).len()
    } else {
        0
    };
    let partial = k != 0 && (k as usize) < len;
    let mut g = Graph::new("scan_backward");
    let init = g.input("init", f32s(&[3]));
    let traj = g.input("traj", f32s(&[if partial { rows } else { len }, 3]));
    let up = g.input("up", if save { f32s(&[rows, 3]) } else { f32s(&[3]) });
    let xs = g.input("xs", f32s(&[len, 3]));
    let forward_body = partial.then(|| Box::new(fwd_body()));
    let (op, shape) = if xs_grad {
        (
            Op::ScanBackwardXs {
                body_vjp: Box::new(vjp_body()),
                length: len as u32,
                save_trajectory: save,
                num_xs: 1,
                xs_idx: 0,
                num_checkpoints: k,
                forward_body,
            },
            f32s(&[len, 3]),
        )
    } else {
        (
            Op::ScanBackward {
                body_vjp: Box::new(vjp_body()),
                length: len as u32,
                save_trajectory: save,
                num_xs: 1,
                num_checkpoints: k,
                forward_body,
            },
            f32s(&[3]),
        )
    };
    let y = g.add_node(op, vec![init, traj, up, xs], shape);
    g.set_outputs(vec![y]);
    g
}

#[test]
fn scan_backward_and_backward_xs_match_the_chain_rule_and_finite_differences() {
    let init = [0.3f32, -0.6, 0.2];
    let len = 6;
    let xs: Vec<f32> = (0..len * 3)
        .map(|i| ((i as f32) * 0.53).sin() * 0.7)
        .collect();
    for (save, k) in [(false, 0u32), (true, 0), (true, 2), (true, 4)] {
        let kept = checkpoint_steps(len, k as usize);
        let n_up = if save { kept.len() * 3 } else { 3 };
        let up: Vec<f32> = (0..n_up).map(|i| ((i as f32) * 0.71).cos()).collect();
        let (dinit, dxs) = backward_reference(&init, &xs, &up, save, k as usize);
        // The reference against central differences of the loss (f64).
        let h = 1e-3f32;
        for j in 0..3 {
            let (mut p, mut m) = (init, init);
            p[j] += h;
            m[j] -= h;
            let fd = (loss(&p, &xs, &up, save, k as usize) - loss(&m, &xs, &up, save, k as usize))
                / (2.0 * h as f64);
            assert!(
                (fd - dinit[j] as f64).abs() < 1e-4,
                "dinit[{j}]: fd {fd} vs {}",
                dinit[j]
            );
        }
        for i in [0, 7, xs.len() - 1] {
            let (mut p, mut m) = (xs.clone(), xs.clone());
            p[i] += h;
            m[i] -= h;
            let fd = (loss(&init, &p, &up, save, k as usize)
                - loss(&init, &m, &up, save, k as usize))
                / (2.0 * h as f64);
            assert!(
                (fd - dxs[i] as f64).abs() < 1e-4,
                "dxs[{i}]: fd {fd} vs {}",
                dxs[i]
            );
        }
        // The op's inputs: the trajectory as the forward would save it.
        let c = carries(&init, &xs);
        let partial = k != 0 && (k as usize) < len;
        let traj_steps: Vec<usize> = if partial {
            kept.clone()
        } else {
            (0..len).collect()
        };
        let traj: Vec<f32> = traj_steps
            .iter()
            .flat_map(|t| c[t + 1].iter().map(|v| *v as f32))
            .collect();
        let feeds = [
            feed("init", &init),
            feed("traj", &traj),
            feed("up", &up),
            feed("xs", &xs),
        ];
        let what = format!("save={save} checkpoints={k}");
        check_against_every_mode(
            &format!("ScanBackward {what}"),
            &backward_graph(false, len, save, k),
            &feeds,
            std::slice::from_ref(&dinit),
            TOL,
        );
        check_against_every_mode(
            &format!("ScanBackwardXs {what}"),
            &backward_graph(true, len, save, k),
            &feeds,
            std::slice::from_ref(&dxs),
            TOL,
        );
    }
}
