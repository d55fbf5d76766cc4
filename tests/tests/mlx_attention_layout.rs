//! Attention's rank-4 layout on the MLX plugin, decided from Q, K, V and
//! the mask together: `[B, S, H, D]` or `[B, H, S, D]`, whichever reading
//! all of them fit (rlx-ir tells the two apart only by which axis holds
//! the head count, and Q alone does not: one query row in front of one
//! head, or as many rows as heads).
//!
//! The reference is an f64 attention written here, not rlx-runtime's CPU
//! backend: rlx-cpu 0.2.19 reads the layout from Q alone, so it runs the
//! one-head decode step below as `[B, H, S, D]` without an error and
//! attends to the first cached key only. Tolerance: 2e-5 absolute on
//! values of magnitude about 1 (f32 against f64).

use rlx_ir::op::MaskKind;
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_tests::parity::{random_values, run_mlx, Feed, MODES};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Bshd,
    Bhsd,
}

/// One case: Q, K, V shapes in `layout`, `nh` query heads.
struct Case {
    what: &'static str,
    layout: Layout,
    b: usize,
    sq: usize,
    sk: usize,
    nh: usize,
    nkv: usize,
    d: usize,
    mask: MaskKind,
    /// A `[B, S_k]` key mask (1 keeps) for `MaskKind::Custom`.
    keys: Option<Vec<f32>>,
}

fn dims(layout: Layout, b: usize, s: usize, h: usize, d: usize) -> Vec<usize> {
    match layout {
        Layout::Bshd => vec![b, s, h, d],
        Layout::Bhsd => vec![b, h, s, d],
    }
}

fn at(layout: Layout, dims: &[usize], b: usize, s: usize, h: usize, d: usize) -> usize {
    let (sd, hd) = match layout {
        Layout::Bshd => (dims[1], dims[2]),
        Layout::Bhsd => (dims[2], dims[1]),
    };
    match layout {
        Layout::Bshd => ((b * sd + s) * hd + h) * dims[3] + d,
        Layout::Bhsd => ((b * hd + h) * sd + s) * dims[3] + d,
    }
}

/// Softmax attention in f64, the queries at the end of the keys for the
/// causal mask, a key masked below 0.5 in a key mask.
fn reference(c: &Case, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let qd = dims(c.layout, c.b, c.sq, c.nh, c.d);
    let kd = dims(c.layout, c.b, c.sk, c.nkv, c.d);
    let mut out = vec![0f32; q.len()];
    let scale = (c.d as f64).powf(-0.5);
    for b in 0..c.b {
        for h in 0..c.nh {
            let kh = h / (c.nh / c.nkv);
            for i in 0..c.sq {
                let pos = c.sk - c.sq + i;
                let live = |j: usize| match c.mask {
                    MaskKind::Causal => j <= pos,
                    MaskKind::Custom => c.keys.as_ref().unwrap()[b * c.sk + j] >= 0.5,
                    _ => true,
                };
                let scores: Vec<f64> = (0..c.sk)
                    .map(|j| {
                        if !live(j) {
                            return f64::NEG_INFINITY;
                        }
                        (0..c.d)
                            .map(|e| {
                                q[at(c.layout, &qd, b, i, h, e)] as f64
                                    * k[at(c.layout, &kd, b, j, kh, e)] as f64
                            })
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = w.iter().sum();
                for e in 0..c.d {
                    let acc: f64 = (0..c.sk)
                        .map(|j| w[j] * v[at(c.layout, &kd, b, j, kh, e)] as f64)
                        .sum();
                    out[at(c.layout, &qd, b, i, h, e)] = (acc / sum) as f32;
                }
            }
        }
    }
    out
}

fn graph(c: &Case) -> Graph {
    let mut g = Graph::new("attention_layout");
    let f32s = |d: Vec<usize>| Shape::new(&d, DType::F32);
    let q = g.input("q", f32s(dims(c.layout, c.b, c.sq, c.nh, c.d)));
    let k = g.input("k", f32s(dims(c.layout, c.b, c.sk, c.nkv, c.d)));
    let v = g.input("v", f32s(dims(c.layout, c.b, c.sk, c.nkv, c.d)));
    let mut inputs = vec![q, k, v];
    if c.keys.is_some() {
        inputs.push(g.input("mask", f32s(vec![c.b, c.sk])));
    }
    let o = g.add_node(
        Op::Attention {
            num_heads: c.nh,
            head_dim: c.d,
            v_head_dim: None,
            mask_kind: c.mask,
            score_scale: None,
            attn_logit_softcap: None,
        },
        inputs,
        f32s(dims(c.layout, c.b, c.sq, c.nh, c.d)),
    );
    g.set_outputs(vec![o]);
    g
}

fn feeds(c: &Case) -> Vec<Feed> {
    let n = |s: usize, h: usize| c.b * s * h * c.d;
    let mut f = vec![
        Feed {
            name: "q".into(),
            values: random_values(n(c.sq, c.nh), DType::F32, -1.0, 1.0, 1),
        },
        Feed {
            name: "k".into(),
            values: random_values(n(c.sk, c.nkv), DType::F32, -1.0, 1.0, 2),
        },
        Feed {
            name: "v".into(),
            values: random_values(n(c.sk, c.nkv), DType::F32, -1.0, 1.0, 3),
        },
    ];
    if let Some(m) = &c.keys {
        f.push(Feed {
            name: "mask".into(),
            values: m.clone(),
        });
    }
    f
}

fn check(c: &Case) {
    let g = graph(c);
    let f = feeds(c);
    let want = reference(c, &f[0].values, &f[1].values, &f[2].values);
    for mode in MODES {
        let out =
            run_mlx(&g, &f, mode).unwrap_or_else(|e| panic!("{} [{}]: {e}", c.what, mode.name()));
        let got = out[0].to_f32_vec().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5,
                "{} [{}]: element {i}: {g} against {w}",
                c.what,
                mode.name()
            );
        }
    }
}

fn case(
    what: &'static str,
    layout: Layout,
    (sq, sk, nh, nkv): (usize, usize, usize, usize),
) -> Case {
    Case {
        what,
        layout,
        b: 1,
        sq,
        sk,
        nh,
        nkv,
        d: 8,
        mask: MaskKind::Causal,
        keys: None,
    }
}

#[test]
fn a_one_head_decode_step_reads_its_cached_keys() {
    // Q [1, 1, 1, 8] holds "1" at both axes; K [1, 4, 1, 8] decides.
    check(&case("one head, [B, S, H, D]", Layout::Bshd, (1, 4, 1, 1)));
    check(&case("one head, [B, H, S, D]", Layout::Bhsd, (1, 4, 1, 1)));
    let mut masked = case("one head, key mask", Layout::Bshd, (1, 4, 1, 1));
    masked.mask = MaskKind::Custom;
    masked.keys = Some(vec![1.0, 0.0, 1.0, 1.0]);
    check(&masked);
}

#[test]
fn a_prefill_of_as_many_rows_as_heads_reads_its_own_layout() {
    // Q [1, 4, 4, 8]; K/V [1, 4, 2, 8] in [B, S, H, D] read as [B, H, S,
    // D] would be 4 KV heads (dividing 4) of 2 keys: both fit Q, K and V.
    // The key mask's length (4 keys against 2) decides.
    let mut c = case("rows = heads, key mask", Layout::Bshd, (4, 4, 4, 2));
    c.mask = MaskKind::Custom;
    c.keys = Some(vec![1.0, 1.0, 0.0, 1.0]);
    check(&c);
    // With 2 KV heads read the other way round, the mask decides again.
    let mut c = case(
        "rows = heads, [B, H, S, D], key mask",
        Layout::Bhsd,
        (4, 4, 4, 2),
    );
    c.mask = MaskKind::Custom;
    c.keys = Some(vec![1.0, 0.0, 1.0, 1.0]);
    check(&c);
    // Keys a read the other way could not hold: K [1, 6, 2, 8] as [B, H,
    // S, D] would be 6 KV heads, which do not divide 4 query heads.
    check(&case(
        "rows = heads, longer keys",
        Layout::Bshd,
        (4, 6, 4, 2),
    ));
}

#[test]
fn shapes_that_read_both_ways_are_refused_not_guessed() {
    // Q [1, 2, 2, 8], K/V [1, 2, 1, 8]: [B, S, H, D] with one KV head, or
    // [B, H, S, D] with two KV heads of one key. Causal, no mask to decide.
    let c = case("ambiguous", Layout::Bshd, (2, 2, 2, 1));
    let g = graph(&c);
    let f = feeds(&c);
    for mode in MODES {
        let e = run_mlx(&g, &f, mode).expect_err("an ambiguous layout must be refused");
        let msg = e.to_string();
        assert!(msg.contains("ambiguous"), "[{}]: {msg}", mode.name());
        assert!(msg.contains("[1, 2, 2, 8]"), "[{}]: {msg}", mode.name());
    }
}
