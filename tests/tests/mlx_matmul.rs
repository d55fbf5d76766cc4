//! The plugin's own f32 matrix product on the CPU (shim/src/gemm.cc): few
//! rows through its skinny kernel (weights row-major and transposed), many
//! rows through the BLAS split over its threads, batched left operands
//! folded into rows. Reference: the products in f64, computed here; the
//! tolerance is f32 rounding of a K-term dot product.

use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_tests::parity::{check_against_every_mode, random_values, Feed, Tol};

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// `x [batch.., m, k] · w` with `w [k, n]`, or `w = transpose(wt [n, k])`.
fn check(lead: &[usize], m: usize, k: usize, n: usize, transposed: bool) {
    let mut xd = lead.to_vec();
    xd.extend([m, k]);
    let mut g = Graph::new("mm");
    let x = g.input("x", f32s(&xd));
    let w = if transposed {
        let wt = g.input("wt", f32s(&[n, k]));
        g.add_node(Op::Transpose { perm: vec![1, 0] }, vec![wt], f32s(&[k, n]))
    } else {
        g.input("w", f32s(&[k, n]))
    };
    let mut yd = lead.to_vec();
    yd.extend([m, n]);
    let y = g.matmul(x, w, f32s(&yd));
    g.set_outputs(vec![y]);
    let rows: usize = lead.iter().product::<usize>() * m;
    let xv = random_values(rows * k, DType::F32, -1.0, 1.0, 7);
    let wv = random_values(k * n, DType::F32, -1.0, 1.0, 8);
    // w[kk, j] in row-major [k, n]; the transposed input holds it as [n, k].
    let w_at = |kk: usize, j: usize| {
        if transposed {
            wv[j * k + kk]
        } else {
            wv[kk * n + j]
        }
    };
    let mut want = vec![0.0f32; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|kk| xv[r * k + kk] as f64 * w_at(kk, j) as f64)
                .sum();
            want[r * n + j] = s as f32;
        }
    }
    let feeds = vec![
        Feed {
            name: "x".into(),
            values: xv,
        },
        Feed {
            name: if transposed { "wt" } else { "w" }.into(),
            values: wv,
        },
    ];
    // K terms of magnitude <= 1: f32 rounding grows like sqrt(K) ulps.
    let tol = Tol {
        abs: 2e-6 * (k as f32).sqrt().max(1.0),
        rel: 1e-5,
    };
    let what = format!(
        "{lead:?} x [{m}, {k}] · [{k}, {n}]{}",
        if transposed { " (W^T)" } else { "" }
    );
    check_against_every_mode(&what, &g, &feeds, &[want], tol);
}

#[test]
fn few_rows_take_the_skinny_kernel() {
    for m in 1..=9 {
        for (k, n) in [(1, 1), (3, 5), (17, 33), (64, 200), (257, 129)] {
            check(&[], m, k, n, false);
            check(&[], m, k, n, true);
        }
    }
    // Wide enough to be split over threads.
    check(&[], 1, 512, 2048, false);
    check(&[], 4, 512, 2048, true);
}

#[test]
fn many_rows_and_batches_take_the_blas() {
    for (m, k, n) in [(9, 16, 8), (64, 128, 96), (300, 200, 150)] {
        check(&[], m, k, n, false);
        check(&[], m, k, n, true);
    }
    check(&[2, 3], 5, 40, 24, false);
    check(&[4], 1, 64, 512, true);
}

/// Attention's products on a cache `[n, h, d]` read through transposes:
/// `q [h, m, d] · cache^(1,2,0) [h, d, n]` and `p [h, m, n] ·
/// cache^(1,0,2) [h, n, d]`, both strided views the kernel reads in place.
fn attention(h: usize, m: usize, n: usize, d: usize) {
    for keys in [true, false] {
        let mut g = Graph::new("attn");
        let cache = g.input("cache", f32s(&[n, h, d]));
        let (perm, bd, ad) = if keys {
            (vec![1, 2, 0], [h, d, n], [h, m, d])
        } else {
            (vec![1, 0, 2], [h, n, d], [h, m, n])
        };
        let b = g.add_node(Op::Transpose { perm }, vec![cache], f32s(&bd));
        let a = g.input("a", f32s(&ad));
        let y = g.matmul(a, b, f32s(&[h, m, bd[2]]));
        g.set_outputs(vec![y]);
        let cv = random_values(n * h * d, DType::F32, -1.0, 1.0, 3);
        let av = random_values(ad.iter().product(), DType::F32, -1.0, 1.0, 4);
        let (kk, nn) = (bd[1], bd[2]);
        // b[hh, x, y] of the view, from the cache [n, h, d].
        let b_at = |hh: usize, x: usize, y: usize| {
            if keys {
                cv[(y * h + hh) * d + x]
            } else {
                cv[(x * h + hh) * d + y]
            }
        };
        let mut want = vec![0.0f32; h * m * nn];
        for hh in 0..h {
            for r in 0..m {
                for j in 0..nn {
                    let s: f64 = (0..kk)
                        .map(|x| av[(hh * m + r) * kk + x] as f64 * b_at(hh, x, j) as f64)
                        .sum();
                    want[(hh * m + r) * nn + j] = s as f32;
                }
            }
        }
        let feeds = vec![
            Feed {
                name: "cache".into(),
                values: cv,
            },
            Feed {
                name: "a".into(),
                values: av,
            },
        ];
        let tol = Tol {
            abs: 2e-6 * (kk as f32).sqrt(),
            rel: 1e-5,
        };
        check_against_every_mode(
            &format!("attention keys={keys} m={m}"),
            &g,
            &feeds,
            &[want],
            tol,
        );
    }
}

#[test]
fn strided_batched_right_operands_are_read_in_place() {
    attention(4, 1, 96, 16);
    attention(8, 3, 130, 8);
    // Many rows: the BLAS with the view's strides.
    attention(2, 20, 64, 16);
}
