//! Lstm, Gru and Rnn on the MLX plugin: layers, bidirectional, relu, with
//! and without initial states, and `carry` writing the final states back
//! into params (so a second run continues from the first), in every mode.
//!
//! Reference: the PyTorch recurrences of rlx-ir 0.2.19 `src/op.rs`,
//! written here in f64 with exact sigmoid/tanh (rlx-cpu uses polynomial
//! approximations of both); its first LSTM step is checked by hand below.
//! Tolerance: 2e-5 abs + 2e-5 rel (f32 through a few dozen steps).

use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::{HostTensor, Mode};
use rlx_plugin_tests::parity::{assert_close, mlx, random_values, Tol};
use rlx_plugin_tests::recurrent::{Cell, Spec};

const TOL: Tol = Tol {
    abs: 2e-5,
    rel: 2e-5,
};
const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];

fn sig(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// Inputs of the reference, as f32 (what the op is fed).
struct Data {
    x: Vec<f32>,
    w_ih: Vec<f32>,
    w_hh: Vec<f32>,
    b_ih: Vec<f32>,
    b_hh: Vec<f32>,
    h0: Vec<f32>,
    c0: Vec<f32>,
}

/// (y, h_n, c_n) by the op's definition.
fn reference(s: &Spec, d: &Data) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (b, t_len, h, g) = (s.batch, s.seq, s.hidden, s.gates());
    let dirs = s.dirs();
    let mut layer_in: Vec<f64> = d.x.iter().map(|v| *v as f64).collect();
    let mut in_l = s.input;
    let mut wih_off = 0;
    let mut hn = vec![0.0f64; s.ld() * b * h];
    let mut cn = vec![0.0f64; s.ld() * b * h];
    for l in 0..s.layers {
        let width = dirs * h;
        let mut out = vec![0.0f64; b * t_len * width];
        for dir in 0..dirs {
            let ld = l * dirs + dir;
            let wih = &d.w_ih[wih_off + dir * g * h * in_l..][..g * h * in_l];
            let whh = &d.w_hh[ld * g * h * h..][..g * h * h];
            let bih = &d.b_ih[ld * g * h..][..g * h];
            let bhh: &[f32] = if s.cell == Cell::Gru {
                &d.b_hh[ld * g * h..][..g * h]
            } else {
                &[]
            };
            for bi in 0..b {
                let mut hs = vec![0.0f64; h];
                let mut cs = vec![0.0f64; h];
                if s.carry {
                    for k in 0..h {
                        hs[k] = d.h0[(ld * b + bi) * h + k] as f64;
                        if s.cell == Cell::Lstm {
                            cs[k] = d.c0[(ld * b + bi) * h + k] as f64;
                        }
                    }
                }
                for step in 0..t_len {
                    let t = if dir == 0 { step } else { t_len - 1 - step };
                    let xt = &layer_in[(bi * t_len + t) * in_l..][..in_l];
                    let zx: Vec<f64> = (0..g * h)
                        .map(|r| {
                            bih[r] as f64
                                + (0..in_l)
                                    .map(|j| wih[r * in_l + j] as f64 * xt[j])
                                    .sum::<f64>()
                        })
                        .collect();
                    let zh: Vec<f64> = (0..g * h)
                        .map(|r| (0..h).map(|j| whh[r * h + j] as f64 * hs[j]).sum::<f64>())
                        .collect();
                    match s.cell {
                        Cell::Lstm => {
                            for k in 0..h {
                                let z = |q: usize| zx[q * h + k] + zh[q * h + k];
                                let (i, f, gg, o) = (sig(z(0)), sig(z(1)), z(2).tanh(), sig(z(3)));
                                cs[k] = f * cs[k] + i * gg;
                                hs[k] = o * cs[k].tanh();
                            }
                        }
                        Cell::Gru => {
                            for k in 0..h {
                                let hh = |q: usize| zh[q * h + k] + bhh[q * h + k] as f64;
                                let r = sig(zx[k] + hh(0));
                                let z = sig(zx[h + k] + hh(1));
                                let n = (zx[2 * h + k] + r * hh(2)).tanh();
                                hs[k] = (1.0 - z) * n + z * hs[k];
                            }
                        }
                        Cell::Rnn { relu } => {
                            for k in 0..h {
                                let z = zx[k] + zh[k];
                                hs[k] = if relu { z.max(0.0) } else { z.tanh() };
                            }
                        }
                    }
                    for k in 0..h {
                        out[(bi * t_len + t) * width + dir * h + k] = hs[k];
                    }
                }
                for k in 0..h {
                    hn[(ld * b + bi) * h + k] = hs[k];
                    cn[(ld * b + bi) * h + k] = cs[k];
                }
            }
        }
        wih_off += dirs * g * h * in_l;
        layer_in = out;
        in_l = width;
    }
    let f = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
    (f(&layer_in), f(&hn), f(&cn))
}

fn data(s: &Spec, seed: u64) -> Data {
    let gh = s.gates() * s.hidden;
    let r = |n: usize, k: u64| random_values(n, DType::F32, -0.6, 0.6, seed * 31 + k);
    Data {
        x: r(s.batch * s.seq * s.input, 1),
        w_ih: r(s.w_ih_len(), 2),
        w_hh: r(s.ld() * gh * s.hidden, 3),
        b_ih: r(s.ld() * gh, 4),
        b_hh: r(s.ld() * gh, 5),
        h0: r(s.ld() * s.batch * s.hidden, 6),
        c0: r(s.ld() * s.batch * s.hidden, 7),
    }
}

/// The op in a graph: weights (and h0/c0 with carry) are params, as a
/// model holds them; the weights are declared 1-D, packed.
fn graph(s: &Spec) -> Graph {
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let gh = s.gates() * s.hidden;
    let mut g = Graph::new("recurrent");
    let x = g.input("x", f(&[s.batch, s.seq, s.input]));
    let w_ih = g.param("w_ih", f(&[s.w_ih_len()]));
    let w_hh = g.param("w_hh", f(&[s.ld() * gh * s.hidden]));
    let b_ih = g.param("b_ih", f(&[s.ld() * gh]));
    let mut ins = vec![x, w_ih, w_hh, b_ih];
    if s.cell == Cell::Gru {
        ins.push(g.param("b_hh", f(&[s.ld() * gh])));
    }
    if s.carry {
        ins.push(g.param("h0", f(&[s.ld(), s.batch, s.hidden])));
        if s.cell == Cell::Lstm {
            ins.push(g.param("c0", f(&[s.ld(), s.batch, s.hidden])));
        }
    }
    s.add_op(&mut g, ins);
    g
}

fn t(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).unwrap()
}

/// Two runs of one executable: with `carry` the second starts from the
/// first's final states.
fn check(s: &Spec, seed: u64) {
    let g = graph(s);
    let d = data(s, seed);
    let (y1, h1, c1) = reference(s, &d);
    let second = Data {
        h0: h1.clone(),
        c0: c1.clone(),
        x: d.x.iter().map(|v| -v * 0.5).collect(),
        ..data(s, seed)
    };
    let (y2, _, _) = reference(s, &second);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let gh = s.gates() * s.hidden;
    for mode in MODES {
        let what = format!("{s:?} [{}]", mode.name());
        let mut exe = mlx()
            .compile(&text, mode)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        exe.bind_param("w_ih", &t(&[s.w_ih_len()], &d.w_ih))
            .unwrap();
        exe.bind_param("w_hh", &t(&[s.ld() * gh * s.hidden], &d.w_hh))
            .unwrap();
        exe.bind_param("b_ih", &t(&[s.ld() * gh], &d.b_ih)).unwrap();
        if s.cell == Cell::Gru {
            exe.bind_param("b_hh", &t(&[s.ld() * gh], &d.b_hh)).unwrap();
        }
        let st = [s.ld(), s.batch, s.hidden];
        if s.carry {
            exe.bind_param("h0", &t(&st, &d.h0)).unwrap();
            if s.cell == Cell::Lstm {
                exe.bind_param("c0", &t(&st, &d.c0)).unwrap();
            }
        }
        let xs = [s.batch, s.seq, s.input];
        let out = exe
            .run(&[("x", &t(&xs, &d.x))])
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_close(
            &format!("{what} run 1"),
            &out[0].to_f32_vec().unwrap(),
            &y1,
            TOL,
        );
        let out = exe
            .run(&[("x", &t(&xs, &second.x))])
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        // Without carry the second run starts from zeros again.
        let want = if s.carry {
            y2.clone()
        } else {
            reference(s, &second).0
        };
        assert_close(
            &format!("{what} run 2"),
            &out[0].to_f32_vec().unwrap(),
            &want,
            TOL,
        );
    }
}

fn spec(cell: Cell, layers: usize, bi: bool, carry: bool) -> Spec {
    Spec {
        cell,
        batch: 2,
        seq: 5,
        input: 3,
        hidden: 4,
        layers,
        bi,
        carry,
    }
}

#[test]
fn the_reference_lstm_step_is_right_by_hand() {
    // One step, hidden 1, input 1, zero state: z = w x + b per gate.
    let s = Spec {
        cell: Cell::Lstm,
        batch: 1,
        seq: 1,
        input: 1,
        hidden: 1,
        layers: 1,
        bi: false,
        carry: false,
    };
    let d = Data {
        x: vec![1.0],
        w_ih: vec![0.5, -0.5, 1.0, 2.0],
        w_hh: vec![0.0; 4],
        b_ih: vec![0.0; 4],
        b_hh: vec![],
        h0: vec![],
        c0: vec![],
    };
    // c = σ(0.5)·tanh(1) (f's term is 0), h = σ(2)·tanh(c).
    let c = sig(0.5) * 1f64.tanh();
    let want = sig(2.0) * c.tanh();
    assert!((reference(&s, &d).0[0] as f64 - want).abs() < 1e-7);
}

#[test]
fn lstm_single_layer_and_stacked_bidirectional_with_carry() {
    check(&spec(Cell::Lstm, 1, false, false), 1);
    check(&spec(Cell::Lstm, 2, true, true), 2);
    check(&spec(Cell::Lstm, 1, true, false), 3);
}

#[test]
fn gru_single_layer_and_stacked_bidirectional_with_carry() {
    check(&spec(Cell::Gru, 1, false, false), 4);
    check(&spec(Cell::Gru, 2, true, true), 5);
}

#[test]
fn rnn_tanh_and_relu_stacked_bidirectional_with_and_without_carry() {
    check(&spec(Cell::Rnn { relu: false }, 1, false, true), 6);
    check(&spec(Cell::Rnn { relu: true }, 2, true, false), 7);
    check(&spec(Cell::Rnn { relu: true }, 2, false, true), 8);
}
