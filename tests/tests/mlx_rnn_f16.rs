//! `RLX_MLX_RNN_F16` on the MLX plugin: rlx-runtime's switch that computes the
//! native Lstm / Gru / Rnn recurrences in fp16 (inputs and outputs f32), set
//! the way rlx-runtime's own `rnn_mlx_f16.rs` sets it: with `rlx_ir::env::set`
//! in the host, an in-process override the plugin's own copy of rlx-ir never
//! sees. The plugin asks the host for it through the host table's `setting`
//! when it lowers the op.
//!
//! On: the result differs from rlx-runtime's f32 CPU backend by fp16
//! rounding (more than 1e-6, less than 1e-2, rlx-runtime's bounds). Off
//! (unset, or `0`): it matches f32. Every mode; the graphs of
//! `rnn_mlx_f16.rs` (bidirectional, one layer, weights as inputs) and
//! stacked ones with `carry`, whose final states are written back into
//! their f32 params (a second run starts from them).
//!
//! Its own test binary (not in `gpu_all`): the override is process-wide,
//! so the tests here take turns (a lock) and each leaves it unset.

use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::{HostTensor, Mode};
use rlx_plugin_tests::parity::{mlx, run_cpu, Feed, MODES};
use rlx_plugin_tests::recurrent::{Cell, Spec};
use std::sync::Mutex;

const SWITCH: &str = "RLX_MLX_RNN_F16";

/// rlx-runtime's bounds for fp16 against f32 (`rnn_mlx_f16.rs`), for
/// values of magnitude up to 1 (tanh and sigmoid cells); a relu cell's
/// grow, and its bound with them (fp16 rounding is relative).
const F16_MAX: f32 = 1e-2;
const F16_MIN: f32 = 1e-6;
/// The f32 MLX recurrence against rlx-cpu's (whose sigmoid and tanh are
/// polynomial approximations), a few dozen steps.
const F32_MAX: f32 = 5e-5;

static TURN: Mutex<()> = Mutex::new(());

/// The switch at `value` (None: unset, even if the process environment
/// has it) for the duration of `f`; unset again afterwards, also when `f`
/// panics.
fn with_switch<R>(value: Option<&str>, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            rlx_ir::env::unset(SWITCH);
        }
    }
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let _reset = Reset;
    match value {
        Some(v) => rlx_ir::env::set(SWITCH, v),
        None => rlx_ir::env::remove(SWITCH),
    }
    f()
}

/// rlx-runtime's `rnn_mlx_f16.rs` configuration: (2, 5, 6, 8, 1, bi).
fn runtime_test(cell: Cell) -> Spec {
    Spec {
        cell,
        batch: 2,
        seq: 5,
        input: 6,
        hidden: 8,
        layers: 1,
        bi: true,
        carry: false,
    }
}

/// rlx-runtime's test data: a hash in [-1, 1).
fn mk(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i.wrapping_mul(2654435761).wrapping_add(seed)) % 1000) as f32) / 500.0 - 1.0)
        .collect()
}

fn maxd(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max)
}

/// The op with `x` and the packed weights as graph inputs (as rlx-runtime's
/// test builds it) and, with `carry`, `h0` (and `c0`) as params.
fn graph(s: &Spec) -> Graph {
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let mut g = Graph::new("recurrent_f16");
    let x = g.input("x", f(&[s.batch, s.seq, s.input]));
    let w_ih = g.input("w_ih", f(&[s.w_ih_len()]));
    let w_hh = g.input("w_hh", f(&[s.w_hh_len()]));
    let b_ih = g.input("bias", f(&[s.bias_len()]));
    let mut ins = vec![x, w_ih, w_hh, b_ih];
    if s.cell == Cell::Gru {
        ins.push(g.input("b_hh", f(&[s.bias_len()])));
    }
    if s.carry {
        ins.push(g.param("h0", f(&s.state_dims())));
        if s.cell == Cell::Lstm {
            ins.push(g.param("c0", f(&s.state_dims())));
        }
    }
    s.add_op(&mut g, ins);
    g
}

/// Every leaf's values, as rlx-runtime's test makes them.
fn feeds(s: &Spec) -> Vec<Feed> {
    let feed = |name: &str, values: Vec<f32>| Feed {
        name: name.into(),
        values,
    };
    let state: usize = s.state_dims().iter().product();
    let mut v = vec![
        feed("x", mk(s.batch * s.seq * s.input, 1)),
        feed("w_ih", mk(s.w_ih_len(), 2)),
        feed("w_hh", mk(s.w_hh_len(), 3)),
        feed("bias", mk(s.bias_len(), 4)),
    ];
    if s.cell == Cell::Gru {
        v.push(feed("b_hh", mk(s.bias_len(), 5)));
    }
    if s.carry {
        v.push(feed("h0", mk(state, 6).iter().map(|x| x * 0.5).collect()));
        if s.cell == Cell::Lstm {
            v.push(feed("c0", mk(state, 7).iter().map(|x| x * 0.5).collect()));
        }
    }
    v
}

fn tensor(g: &Graph, name: &str, values: &[f32]) -> HostTensor {
    let l = rlx_plugin_tests::parity::leaves(g)
        .into_iter()
        .find(|l| l.name == name)
        .expect("a leaf of the graph");
    HostTensor::from_f32(l.dims, values).unwrap()
}

/// `runs` runs of one MLX executable compiled in `mode` (params bound
/// once, so with `carry` each run starts from the states the one before
/// wrote back); the outputs of each.
fn mlx_runs(s: &Spec, mode: Mode, runs: usize) -> Vec<Vec<f32>> {
    let g = graph(s);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let what = format!("{s:?} [{}]", mode.name());
    let mut exe = mlx()
        .compile(&text, mode)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let leaves = rlx_plugin_tests::parity::leaves(&g);
    let mut inputs = Vec::new();
    for f in feeds(s) {
        let t = tensor(&g, &f.name, &f.values);
        if leaves.iter().any(|l| l.name == f.name && l.is_param) {
            exe.bind_param(&f.name, &t).unwrap();
        } else {
            inputs.push((f.name, t));
        }
    }
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    (0..runs)
        .map(|_| {
            let out = exe.run(&refs).unwrap_or_else(|e| panic!("{what}: {e}"));
            out[0].to_f32_vec().unwrap()
        })
        .collect()
}

/// rlx-runtime's CPU backend, one run (f32).
fn cpu(s: &Spec) -> Vec<f32> {
    run_cpu(&graph(s), &feeds(s)).remove(0)
}

/// The switch on (`value`) and off, in every mode: on, within fp16 of f32
/// and visibly not f32; off, f32.
fn check(s: &Spec, value: &str) {
    let reference = cpu(s);
    let scale = reference.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let f16_max = F16_MAX * scale;
    for mode in MODES {
        let what = format!("{s:?} [{}] {SWITCH}={value}", mode.name());
        let runs = if s.carry { 2 } else { 1 };
        let on = with_switch(Some(value), || mlx_runs(s, mode, runs));
        let off = with_switch(None, || mlx_runs(s, mode, runs));
        let d_on = maxd(&on[0], &reference);
        let d_off = maxd(&off[0], &reference);
        println!(
            "{what}: max|MLX-f16 - CPU-f32| = {d_on:.2e}, f32 off: {d_off:.2e} (values up to \
             {scale:.1})"
        );
        assert!(
            d_on < f16_max,
            "{what}: fp16 vs f32 exceeds tolerance {f16_max}: {d_on}"
        );
        assert!(
            d_on > F16_MIN,
            "{what}: delta {d_on} looks like f32: the fp16 path is inactive"
        );
        assert!(
            d_off < F32_MAX * scale,
            "{what}: switch off, yet {d_off} from f32"
        );
        if s.carry {
            // The second run starts from the final states the first wrote
            // back (in f32, the params' dtype): still within fp16 of the
            // f32 recurrence, which did the same.
            let d = maxd(&on[1], &off[1]);
            assert!(
                d < f16_max && d > F16_MIN,
                "{what}: second run (carried states) differs from f32 by {d}"
            );
            assert!(maxd(&off[1], &off[0]) > 1e-3, "{what}: nothing was carried");
        }
    }
}

#[test]
fn lstm_gru_rnn_of_rlx_runtimes_test_compute_in_fp16_when_the_host_sets_the_switch() {
    for cell in [Cell::Lstm, Cell::Gru, Cell::Rnn { relu: false }] {
        check(&runtime_test(cell), "1");
    }
}

#[test]
fn stacked_layers_relu_and_carry_honour_the_switch_too() {
    let stacked = |cell, bi, carry| Spec {
        layers: 2,
        bi,
        carry,
        ..runtime_test(cell)
    };
    check(&stacked(Cell::Lstm, true, true), "true");
    check(&stacked(Cell::Gru, false, true), "on");
    check(&stacked(Cell::Rnn { relu: true }, true, false), "yes");
    check(&stacked(Cell::Rnn { relu: false }, false, true), "1");
}

#[test]
fn the_switch_set_to_off_or_unset_keeps_f32() {
    let s = runtime_test(Cell::Lstm);
    let reference = cpu(&s);
    let unset = with_switch(None, || mlx_runs(&s, Mode::Lazy, 1)).remove(0);
    for value in ["0", "false", "off", ""] {
        let got = with_switch(Some(value), || mlx_runs(&s, Mode::Lazy, 1)).remove(0);
        assert_eq!(got, unset, "{SWITCH}={value:?}");
    }
    assert!(maxd(&unset, &reference) < F32_MAX);
    // No override is left behind (checked between turns): the switch
    // reads as the process environment has it.
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(rlx_ir::env::var(SWITCH), std::env::var(SWITCH).ok());
}
