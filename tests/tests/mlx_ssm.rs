//! SelectiveScan and GatedDeltaNet on the MLX plugin, every mode.
//!
//! References: the recurrences of rlx-ir 0.2.19 `src/op.rs`, written here
//! in f64 (hand-checked on a one-step case below); rlx-runtime's CPU runs
//! the same graphs as a second opinion. GatedDeltaNet with `carry_state`
//! runs twice on one executable: the second run starts from the state the
//! first wrote back. Tolerance: 2e-5 abs + 2e-5 rel.

use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::{HostTensor, Mode};
use rlx_plugin_tests::parity::{
    assert_close, check_against_every_mode, mlx, random_values, run_cpu, Feed, Tol,
};

const TOL: Tol = Tol {
    abs: 2e-5,
    rel: 2e-5,
};

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

fn rv(n: usize, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    random_values(n, DType::F32, lo, hi, seed)
}

fn selective_scan_reference(
    x: &[f32],
    dt: &[f32],
    a: &[f32],
    bm: &[f32],
    cm: &[f32],
    (b, s, h, n): (usize, usize, usize, usize),
) -> Vec<f32> {
    let mut y = vec![0f32; b * s * h];
    for bi in 0..b {
        let mut st = vec![0f64; h * n];
        for t in 0..s {
            for c in 0..h {
                let d = dt[(bi * s + t) * h + c] as f64;
                let xv = x[(bi * s + t) * h + c] as f64;
                let mut acc = 0.0;
                for k in 0..n {
                    let i = c * n + k;
                    st[i] =
                        (d * a[i] as f64).exp() * st[i] + d * bm[(bi * s + t) * n + k] as f64 * xv;
                    acc += cm[(bi * s + t) * n + k] as f64 * st[i];
                }
                y[(bi * s + t) * h + c] = acc as f32;
            }
        }
    }
    y
}

#[test]
fn selective_scan_matches_its_recurrence() {
    // One step by hand: h = Δ B x (the state starts at 0), y = C h.
    let y = selective_scan_reference(&[2.0], &[0.5], &[-1.0], &[3.0], &[4.0], (1, 1, 1, 1));
    assert_eq!(y, vec![4.0 * (0.5 * 3.0 * 2.0)]);
    let (b, s, h, n) = (2, 7, 3, 4);
    let mut g = Graph::new("ssm");
    let x = g.input("x", f32s(&[b, s, h]));
    let dt = g.input("dt", f32s(&[b, s, h]));
    let a = g.input("a", f32s(&[h, n]));
    let bm = g.input("bm", f32s(&[b, s, n]));
    let cm = g.input("cm", f32s(&[b, s, n]));
    let y = g.add_node(
        Op::SelectiveScan { state_size: n },
        vec![x, dt, a, bm, cm],
        f32s(&[b, s, h]),
    );
    g.set_outputs(vec![y]);
    let feeds = [
        ("x", rv(b * s * h, -1.0, 1.0, 1)),
        ("dt", rv(b * s * h, 0.05, 0.5, 2)),
        ("a", rv(h * n, -2.0, -0.1, 3)),
        ("bm", rv(b * s * n, -1.0, 1.0, 4)),
        ("cm", rv(b * s * n, -1.0, 1.0, 5)),
    ]
    .map(|(n, v)| Feed {
        name: n.into(),
        values: v,
    });
    let v = |i: usize| &feeds[i].values;
    let want = selective_scan_reference(v(0), v(1), v(2), v(3), v(4), (b, s, h, n));
    assert_close("SelectiveScan cpu", &run_cpu(&g, &feeds)[0], &want, TOL);
    check_against_every_mode("SelectiveScan", &g, &feeds, &[want], TOL);
}

struct Gdn {
    b: usize,
    s: usize,
    h: usize,
    n: usize,
    per_channel: bool,
}

/// (o, final state) of the delta rule, state S[i, j] per head (key i).
#[allow(clippy::too_many_arguments)]
fn gdn_reference(
    p: &Gdn,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: Option<&[f32]>,
) -> (Vec<f32>, Vec<f32>) {
    let (b, s, h, n) = (p.b, p.s, p.h, p.n);
    let scale = 1.0 / (n as f64).sqrt();
    let mut o = vec![0f32; b * s * h * n];
    let mut fin = vec![0f32; b * h * n * n];
    for bi in 0..b {
        for hi in 0..h {
            let mut st: Vec<f64> = match state {
                Some(s0) => s0[(bi * h + hi) * n * n..][..n * n]
                    .iter()
                    .map(|x| *x as f64)
                    .collect(),
                None => vec![0.0; n * n],
            };
            for t in 0..s {
                let row = ((bi * s + t) * h + hi) * n;
                let gb = (bi * s + t) * h + hi;
                for i in 0..n {
                    let decay = if p.per_channel {
                        (g[row + i] as f64).exp()
                    } else {
                        (g[gb] as f64).exp()
                    };
                    for j in 0..n {
                        st[i * n + j] *= decay;
                    }
                }
                let d: Vec<f64> = (0..n)
                    .map(|j| {
                        let sk: f64 = (0..n).map(|i| st[i * n + j] * k[row + i] as f64).sum();
                        (v[row + j] as f64 - sk) * beta[gb] as f64
                    })
                    .collect();
                for i in 0..n {
                    for j in 0..n {
                        st[i * n + j] += k[row + i] as f64 * d[j];
                    }
                }
                for j in 0..n {
                    let acc: f64 = (0..n).map(|i| st[i * n + j] * q[row + i] as f64).sum();
                    o[row + j] = (acc * scale) as f32;
                }
            }
            for (x, y) in fin[(bi * h + hi) * n * n..][..n * n].iter_mut().zip(&st) {
                *x = *y as f32;
            }
        }
    }
    (o, fin)
}

fn gdn_graph(p: &Gdn, carry: bool) -> Graph {
    let (b, s, h, n) = (p.b, p.s, p.h, p.n);
    let mut g = Graph::new("gdn");
    let q = g.input("q", f32s(&[b, s, h, n]));
    let k = g.input("k", f32s(&[b, s, h, n]));
    let v = g.input("v", f32s(&[b, s, h, n]));
    let gg = g.input(
        "g",
        if p.per_channel {
            f32s(&[b, s, h, n])
        } else {
            f32s(&[b, s, h])
        },
    );
    let beta = g.input("beta", f32s(&[b, s, h]));
    let mut ins = vec![q, k, v, gg, beta];
    if carry {
        ins.push(g.param("state", f32s(&[b, h, n, n])));
    }
    let y = g.add_node(
        Op::GatedDeltaNet {
            state_size: n,
            carry_state: carry,
            gate_per_channel: p.per_channel,
        },
        ins,
        f32s(&[b, s, h, n]),
    );
    g.set_outputs(vec![y]);
    g
}

fn gdn_feeds(p: &Gdn, seed: u64) -> Vec<Feed> {
    let m = p.b * p.s * p.h;
    let l2 = |v: Vec<f32>| -> Vec<f32> {
        // q and k are L2-normalised per row by the caller (the op's contract).
        v.chunks(p.n)
            .flat_map(|r| {
                let nrm = r.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                r.iter().map(move |x| x / nrm).collect::<Vec<_>>()
            })
            .collect()
    };
    vec![
        ("q", l2(rv(m * p.n, -1.0, 1.0, seed))),
        ("k", l2(rv(m * p.n, -1.0, 1.0, seed + 1))),
        ("v", rv(m * p.n, -1.0, 1.0, seed + 2)),
        (
            "g",
            rv(if p.per_channel { m * p.n } else { m }, -0.5, 0.0, seed + 3),
        ),
        ("beta", rv(m, 0.1, 0.9, seed + 4)),
    ]
    .into_iter()
    .map(|(n, v)| Feed {
        name: n.into(),
        values: v,
    })
    .collect()
}

#[test]
fn gated_delta_net_per_head_and_per_channel_gates() {
    // One step by hand, n = 1, S0 = 0: d = v β, S = k d, o = S q / 1.
    let p1 = Gdn {
        b: 1,
        s: 1,
        h: 1,
        n: 1,
        per_channel: false,
    };
    let (o, _) = gdn_reference(&p1, &[0.5], &[1.0], &[2.0], &[0.0], &[0.25], None);
    assert_eq!(o, vec![0.5 * (1.0 * 2.0 * 0.25)]);
    for per_channel in [false, true] {
        let p = Gdn {
            b: 2,
            s: 6,
            h: 2,
            n: 4,
            per_channel,
        };
        let g = gdn_graph(&p, false);
        let feeds = gdn_feeds(&p, 10);
        let f = |i: usize| &feeds[i].values[..];
        let (want, _) = gdn_reference(&p, f(0), f(1), f(2), f(3), f(4), None);
        let what = format!("GatedDeltaNet per_channel={per_channel}");
        assert_close(&format!("{what} cpu"), &run_cpu(&g, &feeds)[0], &want, TOL);
        check_against_every_mode(&what, &g, &feeds, &[want], TOL);
    }
}

#[test]
fn gated_delta_net_carry_state_continues_from_the_written_back_state() {
    let p = Gdn {
        b: 1,
        s: 4,
        h: 2,
        n: 3,
        per_channel: false,
    };
    let g = gdn_graph(&p, true);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let s0 = rv(p.b * p.h * p.n * p.n, -0.5, 0.5, 77);
    let (f1, f2) = (gdn_feeds(&p, 20), gdn_feeds(&p, 30));
    let val = |f: &[Feed], i: usize| f[i].values.clone();
    let (y1, st1) = gdn_reference(
        &p,
        &val(&f1, 0),
        &val(&f1, 1),
        &val(&f1, 2),
        &val(&f1, 3),
        &val(&f1, 4),
        Some(&s0),
    );
    let (y2, _) = gdn_reference(
        &p,
        &val(&f2, 0),
        &val(&f2, 1),
        &val(&f2, 2),
        &val(&f2, 3),
        &val(&f2, 4),
        Some(&st1),
    );
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe = mlx().compile(&text, mode).unwrap();
        exe.bind_param(
            "state",
            &HostTensor::from_f32(vec![p.b, p.h, p.n, p.n], &s0).unwrap(),
        )
        .unwrap();
        for (feeds, want, run) in [(&f1, &y1, 1), (&f2, &y2, 2)] {
            let ts: Vec<(String, HostTensor)> = feeds
                .iter()
                .zip(["q", "k", "v", "g", "beta"])
                .map(|(f, name)| {
                    let shape = if name == "g" || name == "beta" {
                        vec![p.b, p.s, p.h]
                    } else {
                        vec![p.b, p.s, p.h, p.n]
                    };
                    (
                        name.to_string(),
                        HostTensor::from_f32(shape, &f.values).unwrap(),
                    )
                })
                .collect();
            let refs: Vec<(&str, &HostTensor)> = ts.iter().map(|(n, t)| (n.as_str(), t)).collect();
            let out = exe.run(&refs).unwrap();
            assert_close(
                &format!("GatedDeltaNet carry [{}] run {run}", mode.name()),
                &out[0].to_f32_vec().unwrap(),
                want,
                TOL,
            );
        }
    }
}
