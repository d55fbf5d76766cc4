//! Regression tests for cases where the MLX plugin agrees with numpy and
//! rlx-runtime's CPU backend (the usual parity reference) does not:
//!
//! - Where with partially broadcast operands (rlx-cpu's Where indexes only
//!   same-shape or one-element operands);
//! - a batch-broadcast MatMul whose right-hand side is a param;
//! - f32 -> bf16 Cast rounding (rlx-cpu leaves its bf16 output unrounded);
//! - the attention logit softcap without a mask (rlx-cpu applies the cap
//!   on its [B, H, S, D] path only).
//!
//! Each reference is independent of both backends: plain Rust in f64 with
//! numpy's semantics, checked on a hand-computed case in the same test.
//! The plugin is checked in every execution mode (lazy, eager, compiled).

use rlx_ir::op::MaskKind;
use rlx_ir::{DType as D, Graph, Op, Shape};
use rlx_plugin_api::DType as AbiDType;
use rlx_plugin_tests::parity::{
    check_against_every_mode, random_feeds, random_values, run_mlx, Feed, Tol, MODES,
};

fn s(dims: &[usize], d: D) -> Shape {
    Shape::new(dims, d)
}

fn feed(name: &str, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

fn values<'a>(feeds: &'a [Feed], name: &str) -> &'a [f32] {
    &feeds
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no feed {name}"))
        .values
}

/// A select copies one operand's element: the plugin must be exact.
const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

/// f32 results of short f32 computations against an f64 reference: a few
/// f32 ulps of values of order 1 (the harness's f32 tolerance).
const F32_TOL: Tol = Tol {
    abs: 1e-5,
    rel: 1e-5,
};

// ── Where: cond [4, 5], on_true [5], on_false [4, 1] ───────────────────

/// numpy's `np.where(c, t, e)` for c [r, k], t [k], e [r, 1]: element
/// (i, j) is `t[j]` where `c[i, j]` is nonzero, else `e[i]`.
fn ref_where(c: &[f32], t: &[f32], e: &[f32], r: usize, k: usize) -> Vec<f32> {
    (0..r * k)
        .map(|idx| {
            let (i, j) = (idx / k, idx % k);
            if c[idx] != 0.0 {
                t[j]
            } else {
                e[i]
            }
        })
        .collect()
}

#[test]
fn where_broadcasts_a_row_on_true_and_a_column_on_false() {
    // The reference on a hand case: c = [[1, 0], [0, 1]], t = [10, 20],
    // e = [[1], [2]] -> [[10, 1], [2, 20]].
    assert_eq!(
        ref_where(&[1.0, 0.0, 0.0, 1.0], &[10.0, 20.0], &[1.0, 2.0], 2, 2),
        vec![10.0, 1.0, 2.0, 20.0]
    );
    let (r, k) = (4, 5);
    // Condition values: Bool 0/1, and an f32 condition whose nonzero values
    // (negative and fractional ones included) are all true.
    let pattern: Vec<f32> = (0..r * k)
        .map(|i| [0.0, 1.0, -2.0, 0.0, 0.5, 0.0, 3.0][(i * 3 + i / k) % 7])
        .collect();
    for cd in [D::Bool, D::F32] {
        let mut g = Graph::new("where");
        let c = g.input("c", s(&[r, k], cd));
        let t = g.input("t", s(&[k], D::F32));
        let e = g.input("e", s(&[r, 1], D::F32));
        let o = g.add_node(Op::Where, vec![c, t, e], s(&[r, k], D::F32));
        g.set_outputs(vec![o]);
        let vc: Vec<f32> = match cd {
            D::Bool => pattern.iter().map(|v| (*v != 0.0) as u8 as f32).collect(),
            _ => pattern.clone(),
        };
        let vt = random_values(k, D::F32, -1.0, 1.0, 1);
        let ve = random_values(r, D::F32, -1.0, 1.0, 2);
        let want = ref_where(&vc, &vt, &ve, r, k);
        // Both branches are taken, in more than one row and column.
        assert!(want.iter().any(|v| vt.contains(v)) && want.iter().any(|v| ve.contains(v)));
        // Elements by hand: c[0, 0] = 0 -> e[0]; c[0, 2] (3.0 or true) ->
        // t[2]; c[1, 0] (-2.0 or true) -> t[0]; c[1, 1] = 0 -> e[1].
        assert_eq!((pattern[0], pattern[2]), (0.0, 3.0));
        assert_eq!((pattern[5], pattern[6]), (-2.0, 0.0));
        assert_eq!(
            (want[0], want[2], want[5], want[6]),
            (ve[0], vt[2], vt[0], ve[1])
        );
        check_against_every_mode(
            &format!("Where cond {cd:?}[4, 5], on_true [5], on_false [4, 1]"),
            &g,
            &[feed("c", vc), feed("t", vt), feed("e", ve)],
            &[want],
            EXACT,
        );
    }
}

// ── MatMul: [2, 1, 4, 6] @ param [3, 6, 7] -> [2, 3, 4, 7] ─────────────

/// numpy's `a @ b` for a [b0, 1, m, k] and b [b1, k, n]: the batch shapes
/// [b0, 1] and [b1] broadcast to [b0, b1]; out[i, j] = a[i, 0] @ b[j].
fn ref_batch_matmul(
    a: &[f32],
    b: &[f32],
    (b0, b1): (usize, usize),
    (m, k, n): (usize, usize, usize),
) -> Vec<f32> {
    let mut out = vec![0f32; b0 * b1 * m * n];
    for i in 0..b0 {
        for j in 0..b1 {
            for r in 0..m {
                for c in 0..n {
                    let acc: f64 = (0..k)
                        .map(|l| a[(i * m + r) * k + l] as f64 * b[(j * k + l) * n + c] as f64)
                        .sum();
                    out[((i * b1 + j) * m + r) * n + c] = acc as f32;
                }
            }
        }
    }
    out
}

#[test]
fn batch_broadcast_matmul_with_a_param_right_hand_side() {
    // The reference on a hand case: a [2, 1, 1, 2] = [[1, 2]], [[3, 4]];
    // b [2, 2, 1] = [[5], [6]], [[7], [8]] -> out [2, 2, 1, 1]:
    // [1*5+2*6, 1*7+2*8, 3*5+4*6, 3*7+4*8] = [17, 23, 39, 53].
    assert_eq!(
        ref_batch_matmul(
            &[1.0, 2.0, 3.0, 4.0],
            &[5.0, 6.0, 7.0, 8.0],
            (2, 2),
            (1, 2, 1)
        ),
        vec![17.0, 23.0, 39.0, 53.0]
    );
    let (b0, b1, m, k, n) = (2, 3, 4, 6, 7);
    let mut g = Graph::new("batch_matmul");
    let x = g.input("x", s(&[b0, 1, m, k], D::F32));
    let w = g.param("w", s(&[b1, k, n], D::F32));
    let y = g.matmul(x, w, s(&[b0, b1, m, n], D::F32));
    g.set_outputs(vec![y]);
    let feeds = random_feeds(&g, 40);
    let want = ref_batch_matmul(
        values(&feeds, "x"),
        values(&feeds, "w"),
        (b0, b1),
        (m, k, n),
    );
    // One output element by hand: out[1, 2, 3, 4] = x[1, 0, 3, :] . w[2, :, 4].
    let (vx, vw) = (values(&feeds, "x"), values(&feeds, "w"));
    let hand: f64 = (0..k)
        .map(|l| vx[(m + 3) * k + l] as f64 * vw[(2 * k + l) * n + 4] as f64)
        .sum();
    assert_eq!(want[((b1 + 2) * m + 3) * n + 4], hand as f32);
    // Tolerance: a K = 6 dot product of values in [-1, 1), rounded in f32.
    check_against_every_mode(
        "MatMul x[2, 1, 4, 6] @ param w[3, 6, 7]",
        &g,
        &feeds,
        &[want],
        F32_TOL,
    );
}

// ── Cast f32 -> bf16: round to nearest, ties to even ───────────────────

/// The bf16 bits nearest to `x`, ties to the even mantissa (numpy's
/// `ml_dtypes.bfloat16` and IEEE 754's default): add just under half a
/// bf16 ulp, plus one when the kept lowest bit is odd, then truncate. The
/// carry rounds past the largest finite bf16 to infinity. NaN is handled
/// by the caller (only its NaN-ness is compared).
fn ref_bf16_bits(x: f32) -> u16 {
    assert!(!x.is_nan());
    let b = x.to_bits();
    let odd = (b >> 16) & 1;
    ((b + 0x7fff + odd) >> 16) as u16
}

fn is_bf16_nan(bits: u16) -> bool {
    bits & 0x7f80 == 0x7f80 && bits & 0x007f != 0
}

#[test]
fn f32_to_bf16_cast_rounds_to_nearest_even() {
    let p = |e: i32| 2f32.powi(e);
    // The reference on hand cases. bf16 keeps 7 mantissa bits: one ulp at
    // 1.0 is 2^-7, and 1.0 = 0x3f80.
    assert_eq!(ref_bf16_bits(1.0), 0x3f80);
    // Halfway between 1.0 (even) and 1 + 2^-7 (odd): down, to 1.0.
    assert_eq!(ref_bf16_bits(1.0 + p(-8)), 0x3f80);
    // Halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
    assert_eq!(ref_bf16_bits(1.0 + 3.0 * p(-8)), 0x3f82);
    assert_eq!(ref_bf16_bits(-(1.0 + p(-8))), 0xbf80);
    assert_eq!(ref_bf16_bits(-(1.0 + 3.0 * p(-8))), 0xbf82);
    // Just above halfway rounds up, just below down.
    assert_eq!(ref_bf16_bits(1.0 + p(-8) + p(-23)), 0x3f81);
    assert_eq!(ref_bf16_bits(1.0 + p(-8) - p(-23)), 0x3f80);
    // The largest f32 is past the last finite bf16's halfway point.
    assert_eq!(ref_bf16_bits(f32::MAX), 0x7f80);
    // Subnormals round the same way: half the smallest bf16 subnormal
    // (bits 0x0001) ties down to 0; halfway between 0x0001 and 0x0002 ties
    // up to 0x0002.
    assert_eq!(ref_bf16_bits(f32::from_bits(0x0000_8000)), 0x0000);
    assert_eq!(ref_bf16_bits(f32::from_bits(0x0001_8000)), 0x0002);

    let vals: Vec<f32> = vec![
        // Exact ties, to even downwards and upwards, both signs, at
        // several exponents.
        1.0 + p(-8),
        1.0 + 3.0 * p(-8),
        -(1.0 + p(-8)),
        -(1.0 + 3.0 * p(-8)),
        2.0 + p(-7),
        2.0 + 3.0 * p(-7),
        0.5 + 5.0 * p(-10),
        -(0.5 + 7.0 * p(-10)),
        256.0 * (1.0 + 3.0 * p(-8)),
        -p(-100) * (1.0 + p(-8)),
        // Just off a tie.
        1.0 + p(-8) + p(-23),
        1.0 + p(-8) - p(-23),
        -(1.0 + 3.0 * p(-8) - p(-23)),
        // Values bf16 holds exactly.
        1.0,
        -2.5,
        0.0,
        -0.0,
        p(-126),
        // Ordinary values.
        1.0 / 3.0,
        -std::f32::consts::PI,
        1e-3,
        65504.0,
        -12345.678,
        3e38,
        // Overflow to infinity (f32::MAX is past the last finite bf16's
        // halfway point), infinities.
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        // NaN stays NaN.
        f32::NAN,
        // Normal values whose bf16 is the smallest normal or rounds to a
        // neighbour of it.
        p(-126) * (1.0 + p(-8)),
        p(-126) * (1.0 + 3.0 * p(-8)),
        -p(-125) * (1.0 + p(-8)),
        // Subnormals: ties (to 0, up to an even neighbour, negative), just
        // above a tie, exact, and the largest subnormal and a tie that both
        // round up to the smallest normal.
        f32::from_bits(0x0000_8000),
        f32::from_bits(0x0001_8000),
        -f32::from_bits(0x0002_8000),
        f32::from_bits(0x0000_8001),
        f32::from_bits(0x0001_0000),
        -f32::from_bits(0x0005_0000),
        f32::from_bits(0x007f_8000),
        f32::from_bits(0x007f_ffff),
    ];
    let dims = [5, 8];
    assert_eq!(vals.len(), 40);
    let mut g = Graph::new("cast_bf16");
    let x = g.input("x", s(&dims, D::F32));
    let y = g.add_node(Op::Cast { to: D::BF16 }, vec![x], s(&dims, D::BF16));
    g.set_outputs(vec![y]);
    let feeds = [feed("x", vals.clone())];
    for mode in MODES {
        let outs = run_mlx(&g, &feeds, mode)
            .unwrap_or_else(|e| panic!("Cast f32 -> bf16 [{}]: {e}", mode.name()));
        assert_eq!(outs.len(), 1);
        assert_eq!(outs[0].dtype, AbiDType::BF16, "[{}]", mode.name());
        assert_eq!(outs[0].shape, dims.to_vec(), "[{}]", mode.name());
        let got: Vec<u16> = outs[0]
            .data
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(got.len(), vals.len());
        // Bit patterns compare exactly (so -0.0 is not 0.0).
        for (i, (&v, &b)) in vals.iter().zip(&got).enumerate() {
            if v.is_nan() {
                assert!(is_bf16_nan(b), "[{}] NaN -> {b:#06x}", mode.name());
            } else {
                let want = ref_bf16_bits(v);
                assert_eq!(
                    b,
                    want,
                    "[{}] element {i}: {v:e} ({:#010x}) -> {b:#06x}, want {want:#06x}",
                    mode.name(),
                    v.to_bits()
                );
            }
        }
    }
}

// ── Attention with a logit softcap and no mask ──────────────────────────

/// Where the heads sit in Q/K/V (and the output).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lay {
    /// [B, S, H, D]
    Bshd,
    /// [B, H, S, D]
    Bhsd,
    /// [B, S, H * D]
    Packed,
}

fn lay_dims(lay: Lay, b: usize, l: usize, h: usize, d: usize) -> Vec<usize> {
    match lay {
        Lay::Bshd => vec![b, l, h, d],
        Lay::Bhsd => vec![b, h, l, d],
        Lay::Packed => vec![b, l, h * d],
    }
}

/// Flat index of (batch, position, head, dim) in a tensor of `lay` with
/// `l` positions, `h` heads of width `d`.
fn lay_at(
    lay: Lay,
    (bi, li, hi, di): (usize, usize, usize, usize),
    l: usize,
    h: usize,
    d: usize,
) -> usize {
    match lay {
        Lay::Bhsd => ((bi * h + hi) * l + li) * d + di,
        Lay::Bshd | Lay::Packed => ((bi * l + li) * h + hi) * d + di,
    }
}

#[derive(Clone, Copy, Debug)]
struct Att {
    lay: Lay,
    b: usize,
    lq: usize,
    lk: usize,
    h: usize,
    d: usize,
    scale: Option<f32>,
    cap: f32,
}

/// Per batch and head, in f64: `softmax(c * tanh(scale * q k^T / c)) v`
/// over the keys, `scale` defaulting to `1 / sqrt(head_dim)`; `cap: None`
/// gives plain attention (used to show the cap matters).
fn ref_softcap_attention(a: Att, cap: Option<f64>, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let scale = a.scale.map_or(1.0 / (a.d as f64).sqrt(), |s| s as f64);
    let mut out = vec![0f32; a.b * a.lq * a.h * a.d];
    for bi in 0..a.b {
        for hi in 0..a.h {
            for qi in 0..a.lq {
                let scores: Vec<f64> = (0..a.lk)
                    .map(|ki| {
                        let dot: f64 = (0..a.d)
                            .map(|di| {
                                q[lay_at(a.lay, (bi, qi, hi, di), a.lq, a.h, a.d)] as f64
                                    * k[lay_at(a.lay, (bi, ki, hi, di), a.lk, a.h, a.d)] as f64
                            })
                            .sum();
                        let s = scale * dot;
                        cap.map_or(s, |c| c * (s / c).tanh())
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for di in 0..a.d {
                    let o: f64 = (0..a.lk)
                        .map(|ki| {
                            e[ki] / sum * v[lay_at(a.lay, (bi, ki, hi, di), a.lk, a.h, a.d)] as f64
                        })
                        .sum();
                    out[lay_at(a.lay, (bi, qi, hi, di), a.lq, a.h, a.d)] = o as f32;
                }
            }
        }
    }
    out
}

fn softcap_graph(a: Att) -> Graph {
    // rlx reads a rank-4 Q whose axis 1 equals num_heads as [B, H, S, D].
    if a.lay == Lay::Bshd {
        assert!(
            a.lq != a.h && a.lk != a.h,
            "{a:?} would read as [B, H, S, D]"
        );
    }
    let mut g = Graph::new("attention_softcap");
    let q = g.input("q", s(&lay_dims(a.lay, a.b, a.lq, a.h, a.d), D::F32));
    let k = g.input("k", s(&lay_dims(a.lay, a.b, a.lk, a.h, a.d), D::F32));
    let v = g.input("v", s(&lay_dims(a.lay, a.b, a.lk, a.h, a.d), D::F32));
    let o = g.add_node(
        Op::Attention {
            num_heads: a.h,
            head_dim: a.d,
            v_head_dim: None,
            mask_kind: MaskKind::None,
            score_scale: a.scale,
            attn_logit_softcap: Some(a.cap),
        },
        vec![q, k, v],
        s(&lay_dims(a.lay, a.b, a.lq, a.h, a.d), D::F32),
    );
    g.set_outputs(vec![o]);
    g
}

#[test]
fn attention_softcap_without_a_mask_in_every_layout() {
    // The reference on a hand case: one head, one query, two keys, width 1,
    // scale 1, cap 1: q = [1], k = [2, 0], v = [1, 3]. Scores [2, 0] cap to
    // [tanh 2, 0]; the first key's weight is w = 1 / (1 + e^-tanh 2) and
    // the output w * 1 + (1 - w) * 3 = 3 - 2w = 1.5521450626719073.
    let hand = Att {
        lay: Lay::Bshd,
        b: 1,
        lq: 1,
        lk: 2,
        h: 1,
        d: 1,
        scale: Some(1.0),
        cap: 1.0,
    };
    let o = ref_softcap_attention(hand, Some(1.0), &[1.0], &[2.0, 0.0], &[1.0, 3.0]);
    assert!((o[0] as f64 - 1.5521450626719073).abs() < 1e-7, "{o:?}");
    // Without the cap: softmax([2, 0]) gives 3 - 2 / (1 + e^-2).
    let o = ref_softcap_attention(hand, None, &[1.0], &[2.0, 0.0], &[1.0, 3.0]);
    assert!((o[0] as f64 - (3.0 - 2.0 / (1.0 + (-2f64).exp()))).abs() < 1e-7);

    // (b, lq, lk, h, d, scale): self-attention, KV-cache (lq < lk) with an
    // explicit scale, single-query decode.
    let shapes = [
        (2, 5, 5, 2, 4, None),
        (1, 3, 7, 2, 8, Some(0.7)),
        (2, 1, 6, 3, 4, None),
    ];
    let mut seed = 900;
    for lay in [Lay::Bshd, Lay::Bhsd, Lay::Packed] {
        for (b, lq, lk, h, d, scale) in shapes {
            for cap in [0.5f32, 2.0, 30.0] {
                let a = Att {
                    lay,
                    b,
                    lq,
                    lk,
                    h,
                    d,
                    scale,
                    cap,
                };
                seed += 1;
                let g = softcap_graph(a);
                let mut feeds = random_feeds(&g, seed);
                // Q, K in [-3, 3): scores of several units, which the
                // smaller caps bend.
                for f in feeds.iter_mut().filter(|f| f.name != "v") {
                    f.values.iter_mut().for_each(|v| *v *= 3.0);
                }
                let (q, k, v) = (
                    values(&feeds, "q"),
                    values(&feeds, "k"),
                    values(&feeds, "v"),
                );
                let want = ref_softcap_attention(a, Some(cap as f64), q, k, v);
                if cap <= 2.0 {
                    // The cap changes the answer by far more than the
                    // tolerance, so a plugin ignoring it fails.
                    let plain = ref_softcap_attention(a, None, q, k, v);
                    let diff = want
                        .iter()
                        .zip(&plain)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0f32, f32::max);
                    assert!(diff > 1e-2, "{a:?}: the cap changes the output by {diff}");
                }
                // Tolerance: f32 scores of magnitude up to ~10, tanh, a
                // softmax over <= 7 keys and a weighted mean of values in
                // [-1, 1): a few f32 ulps of order-1 results.
                check_against_every_mode(&format!("{a:?}"), &g, &feeds, &[want], F32_TOL);
            }
        }
    }
}
