//! On the CPU the plugin evaluates a graph on the calling thread when every
//! op left to compute is one it runs itself (its kernels, float32 add,
//! subtract, multiply, divide and negation, concatenations, views, a
//! kernel's input made row-major), instead of handing each op to
//! MLX's stream thread; a graph with any other op goes to MLX as before.
//! Neither way may change a value: every builtin model of `rlx-host bench`
//! small enough for a test (the graph as rlx-runtime hands it to the
//! plugin, fused) and a set of graphs of broadcasts, strided views and
//! arithmetic (one with an op of MLX's between the plugin's, which MLX
//! evaluates in its turn) give bit-identical outputs with inline evaluation on and off
//! (`set_eval_inline`, process-wide), in every mode, and the graphs that
//! should run inline do (`last_eval_inline`). The plugin is linked in, so
//! everything runs on this thread; one test, since the switch is the
//! process's.

use rlx_host::run::{execute, random_data};
use rlx_ir::infer::GraphExt;
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, Shape};
use rlx_mlx_shim::array::{last_eval_inline, set_eval_inline};
use rlx_plugin_api::Mode;
use rlx_runtime::Device;

/// Outputs of two runs of `graph` on the plugin in `mode`, and whether
/// the last one was evaluated on this thread.
fn outputs(graph: &Graph, mode: Mode) -> (Vec<Vec<f32>>, bool) {
    let data = random_data(graph, 7).unwrap();
    let ex = rlx_plugin_host::with_mode(mode, || execute(Device::Mlx, graph, &data, 2)).unwrap();
    (ex.outputs, last_eval_inline())
}

fn s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// Broadcast arithmetic of every kind the inline path computes, a reshape
/// of a transposed view (a copy MLX queues, waited for), and a strided
/// view read by a kernel.
fn views_and_arithmetic() -> Graph {
    let mut g = Graph::new("views");
    let a = g.input("a", s(&[3, 1, 5]));
    let b = g.input("b", s(&[4, 5]));
    let c = g.param("c", s(&[5]));
    let ab = g.binary(BinaryOp::Add, a, b, s(&[3, 4, 5]));
    let d = g.binary(BinaryOp::Sub, ab, c, s(&[3, 4, 5]));
    let e = g.binary(BinaryOp::Mul, d, b, s(&[3, 4, 5]));
    let f = g.binary(BinaryOp::Div, e, c, s(&[3, 4, 5]));
    let t = g.transpose_(f, vec![2, 0, 1]);
    let r = g.reshape_(t, vec![5, 12]);
    let x = g.exp(r);
    g.set_outputs(vec![f, x]);
    g
}

/// A cumulative sum (an op MLX evaluates, not the plugin) between ops the
/// plugin runs: MLX evaluates that one in its turn.
fn with_an_mlx_op() -> Graph {
    let mut g = Graph::new("cumsum");
    let a = g.input("a", s(&[4, 6]));
    let e = g.exp(a);
    let c = g.add_node(
        rlx_ir::Op::Cumsum {
            axis: 1,
            exclusive: false,
        },
        vec![e],
        s(&[4, 6]),
    );
    let y = g.binary(BinaryOp::Mul, c, a, s(&[4, 6]));
    g.set_outputs(vec![y]);
    g
}

/// Concatenations along an inner axis of a broadcast, a transposed view
/// and a slice (f32), and of int32 values (bytes of another width), and
/// the negation of a transposed view: copies and sign flips the calling
/// thread runs itself.
fn concat_and_negate() -> Graph {
    use rlx_ir::op::Activation;
    use rlx_ir::Op;
    let mut g = Graph::new("concat");
    let a = g.input("a", s(&[3, 1]));
    let b = g.input("b", s(&[4, 3]));
    let c = g.input("c", s(&[3, 6]));
    let wide = g.add_node(
        Op::Expand {
            target_shape: vec![3, 2],
        },
        vec![a],
        s(&[3, 2]),
    );
    let bt = g.transpose_(b, vec![1, 0]);
    let part = g.add_node(
        Op::Narrow {
            axis: 1,
            start: 1,
            len: 5,
        },
        vec![c],
        s(&[3, 5]),
    );
    let cat = g.concat(vec![wide, bt, part], 1, s(&[3, 11]));
    let neg = g.activation(Activation::Neg, bt, s(&[3, 4]));
    let i32s = Shape::new(&[3, 4], DType::I32);
    let bi = g.add_node(Op::Cast { to: DType::I32 }, vec![bt], i32s.clone());
    let ni = g.add_node(Op::Cast { to: DType::I32 }, vec![neg], i32s);
    let cat_i = g.concat(vec![bi, ni], 0, Shape::new(&[6, 4], DType::I32));
    let back = g.add_node(Op::Cast { to: DType::F32 }, vec![cat_i], s(&[6, 4]));
    g.set_outputs(vec![cat, neg, back]);
    g
}

/// Kernels' inputs made row-major (MLX's `Contiguous`, which the calling
/// thread runs): pocketfft's row kernel on a few rows of a large input (a
/// copy, the buffer being much larger) and on a transposed view (MLX's
/// copy, in its turn); and MLX's own FFT, whose result is interleaved
/// back into `[re, im]` pairs by a concatenation of 4-byte blocks.
fn kernel_inputs_and_interleaving() -> Graph {
    use rlx_ir::fft::{FftAlgo, FftNorm};
    use rlx_ir::Op;
    let mut g = Graph::new("fft_views");
    let x = g.input("x", s(&[64, 2000]));
    let rows = g.add_node(
        Op::Narrow {
            axis: 0,
            start: 1,
            len: 2,
        },
        vec![x],
        s(&[2, 2000]),
    );
    let a = g.fft_algo(rows, false, FftNorm::Backward, FftAlgo::SCIPY);
    let y = g.input("y", s(&[2000, 3]));
    let t = g.transpose_(y, vec![1, 0]);
    let b = g.fft_algo(t, true, FftNorm::Ortho, FftAlgo::SCIPY);
    let z = g.input("z", s(&[4, 16]));
    let c = g.fft_algo(z, false, FftNorm::Backward, FftAlgo::Native);
    g.set_outputs(vec![a, b, c]);
    g
}

/// Arithmetic and Fma on 8 Mi elements with a broadcast scalar: flat rows
/// split over the plugin's threads.
fn large_flat() -> Graph {
    let mut g = Graph::new("large");
    let a = g.input("a", s(&[2048, 4096]));
    let b = g.input("b", s(&[1]));
    let sh = s(&[2048, 4096]);
    let y = g.binary(BinaryOp::Mul, a, b, sh.clone());
    let z = g.add_node(rlx_ir::Op::Fma, vec![a, y, b], sh);
    g.set_outputs(vec![y, z]);
    g
}

#[test]
fn inline_evaluation_changes_no_value_and_runs_where_it_can() {
    let opts = rlx_plugin_host::Options::default();
    // SAFETY: rlx_mlx::rlx_plugin_entry is the MLX plugin's entry, linked
    // into this test.
    unsafe { rlx_plugin_host::install_static(rlx_mlx::rlx_plugin_entry, "mlx", &opts) }.unwrap();
    // Whether each mode (lazy, eager, compiled) should run inline; None
    // where it depends on the node (eager mode evaluates node by node, and
    // its last evaluation is the last node's).
    const ALL: [Option<bool>; 3] = [Some(true); 3];
    const NONE: [Option<bool>; 3] = [Some(false), None, Some(false)];
    let mut cases: Vec<(String, Graph, [Option<bool>; 3])> = [
        "transformer",
        "exp4",
        "gelu",
        "add-broadcast",
        "scan1000",
        "pocketfft",
    ]
    .iter()
    .map(|name| {
        let m = rlx_host::bench::builtins::builtin(name).unwrap();
        (name.to_string(), m.graph, ALL)
    })
    .collect();
    // Training: a backward pass with ops MLX evaluates.
    let m = rlx_host::bench::builtins::builtin("mlp-train").unwrap();
    cases.push(("mlp-train".into(), m.graph, NONE));
    // (Compiled mode fuses the arithmetic into one MLX kernel of its own,
    // which MLX evaluates in its turn.)
    cases.push(("views".into(), views_and_arithmetic(), ALL));
    cases.push(("cumsum".into(), with_an_mlx_op(), ALL));
    cases.push(("concat".into(), concat_and_negate(), ALL));
    cases.push(("large".into(), large_flat(), ALL));
    cases.push((
        "fft_views".into(),
        kernel_inputs_and_interleaving(),
        [Some(true), None, None],
    ));
    for name in ["pocketfft-op", "pocketfft-rows"] {
        let m = rlx_host::bench::builtins::builtin(name).unwrap();
        cases.push((name.into(), m.graph, ALL));
    }
    for (name, graph, expected) in &cases {
        for (mode, expect) in [Mode::Lazy, Mode::Eager, Mode::Compiled]
            .into_iter()
            .zip(expected)
        {
            set_eval_inline(true);
            let (on, ran_inline) = outputs(graph, mode);
            set_eval_inline(false);
            let (off, ran_off) = outputs(graph, mode);
            set_eval_inline(true);
            assert!(!ran_off, "{name} {mode:?}: ran inline while switched off");
            if let Some(want) = expect {
                assert_eq!(ran_inline, *want, "{name} {mode:?}: evaluated inline");
            }
            assert_eq!(on.len(), off.len());
            for (i, (a, b)) in on.iter().zip(&off).enumerate() {
                let same =
                    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "{name} {mode:?}: output {i} differs between the two ways"
                );
            }
        }
    }
}

/// Named tensors, as a run takes them.
type Named<'a> = Vec<(&'a str, rlx_plugin_api::TensorRef<'a>)>;

/// Clones of one compiled executable share its recorded plan (the demo
/// transformer's evaluation, recorded once): run at once on two threads,
/// each clone's every run gives the outputs of a run alone, bit for bit.
/// (It does not touch the switch above: run beside that test, its runs may
/// go either way, with the same values.)
#[test]
fn clones_sharing_a_recorded_plan_run_at_once_on_two_threads() {
    use rlx_mlx::executable::MlxExecutable;
    use rlx_plugin_api::convert::f32_to_le;
    use rlx_plugin_api::tensor::RawView;
    use rlx_plugin_api::{CompileOptions, DeviceKind, Executable, TensorRef};

    let m = rlx_host::bench::builtins::builtin("transformer").unwrap();
    let text = rlx_ir::rlxmodel::to_text(&m.graph).unwrap();
    let data = random_data(&m.graph, 3).unwrap();
    let shape_of = |name: &str| -> Vec<usize> {
        let n = m.graph.nodes().iter().find(|n| match &n.op {
            rlx_ir::Op::Input { name: x, .. } | rlx_ir::Op::Param { name: x, .. } => x == name,
            _ => false,
        });
        let n = n.unwrap_or_else(|| panic!("no leaf {name}"));
        assert_eq!(n.shape.dtype(), DType::F32, "{name}");
        n.shape.dims().iter().map(|d| d.unwrap_static()).collect()
    };
    // (name, shape, little-endian bytes) of each input and param.
    let encode = |list: &[(String, Vec<f32>)]| -> Vec<(String, Vec<usize>, Vec<u8>)> {
        list.iter()
            .map(|(n, v)| (n.clone(), shape_of(n), f32_to_le(v)))
            .collect()
    };
    let (inputs, params) = (encode(&data.inputs), encode(&data.params));
    let with_refs = |list: &[(String, Vec<usize>, Vec<u8>)], f: &mut dyn FnMut(Named<'_>)| {
        let views: Vec<RawView> = list
            .iter()
            .map(|(_, shape, bytes)| RawView::of(rlx_plugin_api::DType::F32, shape, bytes, 0))
            .collect();
        // SAFETY: each view describes its bytes in `list`, alive for the call.
        let refs: Vec<(&str, TensorRef<'_>)> = list
            .iter()
            .zip(&views)
            .map(|((n, _, _), v)| (n.as_str(), unsafe { TensorRef::from_raw(&v.raw) }.unwrap()))
            .collect();
        f(refs);
    };
    let opts = CompileOptions {
        mode: Mode::Compiled,
        device: Some((DeviceKind::Cpu, 0)),
        ..CompileOptions::default()
    };
    let mut exe = MlxExecutable::compile(&text, &opts).unwrap();
    with_refs(&params, &mut |refs| {
        for (n, t) in refs {
            exe.bind_param_lent(n, t).unwrap();
        }
    });
    let run = |exe: &mut dyn Executable| -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        with_refs(&inputs, &mut |refs| {
            out = exe
                .run(&refs)
                .unwrap()
                .into_iter()
                .map(|t| t.data)
                .collect();
        });
        out
    };
    let want = run(&mut exe);
    let clones: Vec<Box<dyn Executable>> =
        (0..2).map(|_| exe.clone_executable().unwrap()).collect();
    std::thread::scope(|s| {
        for mut c in clones {
            let (run, want) = (&run, &want);
            s.spawn(move || {
                for i in 0..50 {
                    assert!(run(&mut *c) == *want, "run {i} of a clone differs");
                }
            });
        }
    });
}
