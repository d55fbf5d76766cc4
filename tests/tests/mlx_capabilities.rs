//! Each capability the MLX plugin's executables report to rlx-runtime
//! (`CompiledGraph::capabilities()`, through `Session::new(Device::Mlx)`)
//! holds: for every flag set, a test of what the flag promises that fails
//! if it lies. References are exact small-integer sums computed here, or
//! rlx-runtime's CPU backend where it runs the same graph.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::{CustomImpl, CustomKernel, CustomOp, Mode, Origin, ShapeRule};
use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
use rlx_plugin_host::custom_ops::register_host_op;
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_runtime::{CompiledGraph, Device, Session};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

fn session(g: Graph) -> CompiledGraph {
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    Session::new(Device::Mlx).compile(g)
}

/// `next = x + s` (output 0), `y = next * w` (output 1).
fn counter() -> Graph {
    let s = Shape::new(&[2, 3], DType::F32);
    let mut g = Graph::new("counter");
    let x = g.input("x", s.clone());
    let st = g.input("s", s.clone());
    let w = g.param("w", s);
    let next = g.add(x, st);
    let y = g.mul(next, w);
    g.set_outputs(vec![next, y]);
    g
}

const W: [f32; 6] = [1., 2., 3., 4., 5., 6.];
const X: [f32; 6] = [1., 1., 1., 2., 2., 2.];

#[test]
fn the_plugin_reports_what_the_in_tree_mlx_backend_does() {
    let c = session(counter());
    assert_eq!(
        c.capabilities().enabled_names(),
        [
            "clone",
            "persistent_handles",
            "gpu_handles",
            "kv_resident",
            "typed_io",
            "async_pipeline",
            "active_extent"
        ]
    );
}

#[test]
fn clone_makes_an_independent_executable() {
    for mode in MODES {
        with_mode(mode, || {
            let mut a = session(counter());
            a.set_param("w", &W);
            a.bind_gpu_handle("s", &[0.0; 6]);
            a.set_gpu_handle_feed("s", 0);
            let mut b = a.clone();
            a.run_read_outputs(&[("x", &X)], Some(&[]));
            // The clone kept the state it was cloned with.
            assert_eq!(b.read_gpu_handle("s").unwrap(), vec![0.0; 6]);
            let out = b.run(&[("x", &X)]);
            assert_eq!(out[0], X.to_vec(), "[{}]", mode.name());
            assert_eq!(out[1], vec![1., 2., 3., 8., 10., 12.], "[{}]", mode.name());
            assert_eq!(
                a.read_gpu_handle("s").unwrap(),
                X.to_vec(),
                "[{}]",
                mode.name()
            );
        });
    }
}

#[test]
fn persistent_handles_are_inputs_the_executable_keeps() {
    let mut c = session(counter());
    c.set_param("w", &W);
    let s = [10., 20., 30., 40., 50., 60.];
    assert!(c.bind_handle("s", &s));
    assert_eq!(c.read_handle("s").unwrap(), s.to_vec());
    // Not passed: read from the handle.
    let out = c.run(&[("x", &X)]);
    assert_eq!(out[0], vec![11., 21., 31., 42., 52., 62.]);
    // A name that is not an input is refused, not ignored.
    assert!(!c.bind_handle("nope", &s));
}

#[test]
fn gpu_handles_follow_their_feeds_on_the_device() {
    for mode in MODES {
        with_mode(mode, || {
            let mut c = session(counter());
            c.set_param("w", &W);
            assert!(!c.has_gpu_handle("s"));
            assert!(c.bind_gpu_handle("s", &[0.0; 6]));
            assert!(c.has_gpu_handle("s"));
            assert!(c.set_gpu_handle_feed("s", 0));
            for _ in 0..3 {
                // Only output 1 comes back; output 0 feeds the handle.
                let out = c.run_read_outputs(&[("x", &X)], Some(&[1]));
                assert_eq!(out.len(), 1);
            }
            let s = c.read_gpu_handle("s").unwrap();
            assert_eq!(
                s,
                X.iter().map(|v| v * 3.0).collect::<Vec<_>>(),
                "[{}]",
                mode.name()
            );
            assert_eq!(c.read_gpu_handle_row("s", 1, 3).unwrap(), vec![6.0; 3]);
            // run_feed_gpu_handle: the run's output 0, and the handle fed.
            let got = c.run_feed_gpu_handle(&[("x", &X)], "s", 0).unwrap();
            assert_eq!(got, X.iter().map(|v| v * 4.0).collect::<Vec<_>>());
            assert_eq!(c.read_gpu_handle("s").unwrap(), got);
        });
    }
}

#[test]
fn kv_resident_feeds_one_row_a_step() {
    // A cache k [1, 4, 2] a step sums (output 1) and extends by one row
    // (output 0 = 2 t).
    let mut g = Graph::new("kv");
    let k = g.input("k", Shape::new(&[1, 4, 2], DType::F32));
    let t = g.input("t", Shape::new(&[1, 1, 2], DType::F32));
    let two = g.constant(2.0, DType::F32);
    let row = g.mul(t, two);
    let total = g.sum(k, vec![1], false);
    g.set_outputs(vec![row, total]);
    for mode in MODES {
        with_mode(mode, || {
            let mut c = session(g.clone());
            let before = rlx_plugin_host::backend::state_counters();
            assert!(c.bind_gpu_handle("k", &[0.0; 8]));
            assert!(c.register_kv_row_feed("k", 0));
            let mut want = [0.0f32; 8];
            for p in 0..4 {
                let t = [p as f32 + 1.0, 1.0];
                let sums = c.run_read_outputs(&[("t", &t)], Some(&[1])).remove(0);
                let expect = [
                    want.iter().step_by(2).sum::<f32>(),
                    want.iter().skip(1).step_by(2).sum::<f32>(),
                ];
                assert_eq!(sums, expect, "[{}] step {p}", mode.name());
                assert!(c.feed_kv_row(0, p, 2));
                want[p * 2] = 2.0 * t[0];
                want[p * 2 + 1] = 2.0;
                assert_eq!(c.read_gpu_handle("k").unwrap(), want.to_vec());
                assert_eq!(c.read_output_row(0, 0, 2).unwrap(), vec![2.0 * t[0], 2.0]);
            }
            // Past the cache: refused, not written around.
            assert!(!c.feed_kv_row(0, 4, 2));
            // What a program reads to know the resident path was live (other
            // tests of this binary count too, so at least).
            let after = rlx_plugin_host::backend::state_counters();
            assert!(after.binds > before.binds && after.feeds > before.feeds);
            assert!(after.row_feeds >= before.row_feeds + 4);
        });
    }
}

#[test]
fn typed_io_carries_bf16_without_widening() {
    let s = Shape::new(&[4], DType::BF16);
    let mut g = Graph::new("bf16");
    let x = g.input("x", s.clone());
    let y = g.add(x, x);
    g.set_outputs(vec![y]);
    let mut c = session(g);
    let vals = [1.5f32, -2.0, 0.25, 3.0];
    let bytes: Vec<u8> = vals
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect();
    let out = c.run_typed(&[("x", &bytes, DType::BF16)]);
    assert_eq!(out[0].1, DType::BF16);
    let got: Vec<f32> = out[0]
        .0
        .chunks_exact(2)
        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect();
    assert_eq!(got, vec![3.0, -4.0, 0.5, 6.0]);
}

/// A kernel that waits (up to 20 s) until the test opens its gate: a run
/// using it cannot finish before then.
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    finished: AtomicBool,
}

static GATE: Gate = Gate {
    open: Mutex::new(false),
    cv: Condvar::new(),
    finished: AtomicBool::new(false),
};

fn gated_identity() -> CustomKernel {
    Arc::new(|inputs, outputs, _| {
        let open = GATE.open.lock().unwrap();
        let _open = GATE
            .cv
            .wait_timeout_while(open, Duration::from_secs(20), |o| !*o)
            .unwrap();
        outputs[0].data.copy_from_slice(inputs[0].data);
        GATE.finished.store(true, Ordering::SeqCst);
        Ok(())
    })
}

#[test]
fn async_pipeline_returns_before_the_device_has_finished() {
    let plugin = mlx();
    register_plugin_backend(plugin.clone(), Device::Mlx, Mode::Lazy);
    register_host_op(
        &plugin,
        CustomOp::new(
            "test.gated_identity",
            "waits for the test's gate, then copies",
            1,
            Origin::Host,
            CustomImpl::Kernel(gated_identity()),
        )
        .with_shape(ShapeRule::SameAsInput(0)),
    )
    .unwrap();
    let mut g = Graph::new("gated");
    let x = g.input("x", Shape::new(&[3], DType::F32));
    let y = g.custom_op("test.gated_identity", vec![], vec![x]);
    let one = g.constant(1.0, DType::F32);
    let z = g.add(y, one);
    g.set_outputs(vec![z]);
    let mut c = Session::new(Device::Mlx).compile(g);
    // A synchronous commit would wait 20 s for the gate and come back
    // finished: this one must come back while the kernel still waits.
    c.commit_no_wait(&[("x", &[1.0, 2.0, 3.0])]);
    assert!(
        !GATE.finished.load(Ordering::SeqCst),
        "commit_no_wait waited for the run"
    );
    *GATE.open.lock().unwrap() = true;
    GATE.cv.notify_all();
    c.sync_pending();
    assert!(
        GATE.finished.load(Ordering::SeqCst),
        "sync_pending did not wait"
    );
    // Pipelined runs give what runs one at a time give, in order.
    let sets: Vec<Vec<f32>> = (0..5).map(|i| vec![i as f32, 1.0, -2.0]).collect();
    let inputs: Vec<Vec<(&str, &[f32])>> = sets.iter().map(|v| vec![("x", v.as_slice())]).collect();
    let piped = c.run_pipelined(&inputs);
    for (i, set) in sets.iter().enumerate() {
        let want: Vec<f32> = set.iter().map(|v| v + 1.0).collect();
        assert_eq!(piped[i][0], want, "run {i}");
        assert_eq!(c.run(&[("x", set)])[0], want);
    }
}

#[test]
fn pipelined_runs_match_the_cpu_backend_in_every_mode() {
    let cfg = rlx_host::models::MlpConfig::default();
    let model = rlx_host::models::mlp(&cfg);
    let data = rlx_host::run::random_data(&model.graph, 9).unwrap();
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let mut cpu = Session::new(Device::Cpu).compile(model.graph.clone());
    for (n, v) in &data.params {
        cpu.set_param(n, v);
    }
    let xs: Vec<Vec<f32>> = (0..4)
        .map(|s| {
            let x = &data.inputs[0].1;
            x.iter().map(|v| v * (1.0 + s as f32)).collect()
        })
        .collect();
    let name = data.inputs[0].0.clone();
    let want: Vec<Vec<Vec<f32>>> = xs.iter().map(|x| cpu.run(&[(&name, x)])).collect();
    for mode in MODES {
        with_mode(mode, || {
            let mut c = Session::new(Device::Mlx).compile(model.graph.clone());
            for (n, v) in &data.params {
                c.set_param(n, v);
            }
            let sets: Vec<Vec<(&str, &[f32])>> = xs
                .iter()
                .map(|x| vec![(name.as_str(), x.as_slice())])
                .collect();
            let got = c.run_pipelined(&sets);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let (abs, _) = rlx_host::run::errors(&g[0], &w[0]).unwrap();
                // f32 dot products of a few dozen terms: 1e-5.
                assert!(abs <= 1e-5, "[{}] run {i}: {abs}", mode.name());
            }
        });
    }
}

/// `softmax(relu(x·w + b))` over rows of `x [8, 4]` (each row on its
/// own), and `colsum`, a sum over the rows (axis 0: rows mixed).
fn rowwise(mix_rows: bool) -> Graph {
    let mut g = Graph::new("rowwise");
    let x = g.input("x", Shape::new(&[8, 4], DType::F32));
    let w = g.param("w", Shape::new(&[4, 3], DType::F32));
    let b = g.param("b", Shape::new(&[1, 3], DType::F32));
    let h = g.mm(x, w);
    let h = g.add(h, b);
    let h = g.relu(h);
    let y = g.sm(h, -1);
    let out = if mix_rows {
        g.sum(y, vec![0], false)
    } else {
        y
    };
    g.set_outputs(vec![out]);
    g
}

#[test]
fn active_extent_computes_only_the_live_rows() {
    let x: Vec<f32> = (0..32).map(|i| (i % 7) as f32 * 0.5 - 1.0).collect();
    let w: Vec<f32> = (0..12).map(|i| (i % 5) as f32 * 0.25 - 0.5).collect();
    let b = [0.1f32, -0.2, 0.3];
    for mode in MODES {
        with_mode(mode, || {
            let mut c = session(rowwise(false));
            c.set_param("w", &w);
            c.set_param("b", &b);
            let full = c.run(&[("x", &x)]).remove(0);
            assert!(full[9..].iter().any(|v| *v != 0.0));
            c.set_active_extent(Some((3, 8)));
            let live = c.run(&[("x", &x)]).remove(0);
            // The live rows as the full run computes them (the same
            // kernels on fewer rows: within f32 rounding).
            for (i, (a, f)) in live[..9].iter().zip(&full[..9]).enumerate() {
                assert!(
                    (a - f).abs() <= 1e-6,
                    "[{}] element {i}: {a} vs {f}",
                    mode.name()
                );
            }
            // Rows past the extent were not computed: the plugin pads them
            // with zeros (the ABI leaves them unspecified). A backend that
            // ignored the hint would have the full run's values there.
            assert!(
                live[9..].iter().all(|v| *v == 0.0),
                "[{}] rows past the extent were computed: {:?}",
                mode.name(),
                &live[9..]
            );
            c.set_active_extent(None);
            assert_eq!(
                c.run(&[("x", &x)]).remove(0),
                full,
                "[{}] cleared",
                mode.name()
            );
            // A graph that mixes rows runs all of them, correctly.
            let mut m = session(rowwise(true));
            m.set_param("w", &w);
            m.set_param("b", &b);
            let whole = m.run(&[("x", &x)]).remove(0);
            m.set_active_extent(Some((3, 8)));
            assert_eq!(
                m.run(&[("x", &x)]).remove(0),
                whole,
                "[{}] mixed rows",
                mode.name()
            );
        });
    }
}

#[test]
fn set_rng_draws_what_a_compile_with_that_policy_draws() {
    // Uniform samples (+ x, so the graph has an input): the same stream as
    // rlx-runtime's CPU backend under each RNG option.
    let mut g = Graph::new("rng");
    let x = g.input("x", Shape::new(&[16], DType::F32));
    let r = g.append_node(
        rlx_ir::Op::RngUniform {
            low: 0.0,
            high: 1.0,
            key: 7,
            op_seed: None,
        },
        vec![],
        Shape::new(&[16], DType::F32),
        Some("u".into()),
    );
    let y = g.add(x, r);
    g.set_outputs(vec![y]);
    let zeros = [0.0f32; 16];
    let seeded = rlx_ir::RngOptions::new(1234, rlx_ir::RngBackend::Philox);
    let mut cpu = Session::new(Device::Cpu).compile(g.clone());
    cpu.set_rng(seeded);
    let want = cpu.run(&[("x", &zeros)]).remove(0);
    for mode in MODES {
        with_mode(mode, || {
            let mut c = session(g.clone());
            assert_eq!(c.rng(), rlx_ir::RngOptions::default());
            let default = c.run(&[("x", &zeros)]).remove(0);
            c.set_rng(seeded);
            assert_eq!(c.rng(), seeded);
            let got = c.run(&[("x", &zeros)]).remove(0);
            assert_ne!(got, default, "[{}] the seed changed nothing", mode.name());
            assert_eq!(got, want, "[{}] the CPU backend's stream", mode.name());
        });
    }
}

#[test]
fn eight_compiled_graph_clones_on_eight_threads_match_one_bit_for_bit() {
    let model = rlx_host::models::mlp(&rlx_host::models::MlpConfig::default());
    let data = rlx_host::run::random_data(&model.graph, 11).unwrap();
    let name = data.inputs[0].0.clone();
    let xs: Vec<Vec<f32>> = (0..8)
        .map(|s| {
            data.inputs[0]
                .1
                .iter()
                .map(|v| v * (0.5 + s as f32))
                .collect()
        })
        .collect();
    for mode in MODES {
        with_mode(mode, || {
            let mut one = session(model.graph.clone());
            for (n, v) in &data.params {
                one.set_param(n, v);
            }
            let want: Vec<Vec<f32>> = xs
                .iter()
                .map(|x| one.run(&[(&name, x)]).remove(0))
                .collect();
            let clones: Vec<CompiledGraph> = (0..8).map(|_| one.clone()).collect();
            let got: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
                let hs: Vec<_> = clones
                    .into_iter()
                    .map(|mut c| {
                        let (xs, name) = (&xs, &name);
                        s.spawn(move || xs.iter().map(|x| c.run(&[(name, x)]).remove(0)).collect())
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for (t, runs) in got.iter().enumerate() {
                for (i, r) in runs.iter().enumerate() {
                    assert_eq!(
                        bits(r),
                        bits(&want[i]),
                        "[{}] thread {t} run {i}",
                        mode.name()
                    );
                }
            }
        });
    }
}
