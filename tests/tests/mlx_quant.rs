//! Quantized, grouped and low-rank matmuls on the MLX plugin against the
//! CPU backend: LoraMatMul and GroupedMatMul (f32, f16, bf16); DequantMatMul
//! for every rlx-ir QuantScheme (Int8Block, Int8BlockAsym, Int4Block,
//! Fp8E4m3, Fp8E5m2, Nvfp4Block, MxFp4x2Block, MlxAffine bits 2/3/4/5/6/8,
//! MlxMxfp4, MlxMxfp8 and every GGUF scheme); DequantGroupedMatMul and
//! DequantMoEWeights for the GGUF schemes rlx-cpu runs for them.
//! MlxAffine (group 32/64/128) and MlxMxfp4 / MlxMxfp8 (group 32) run on
//! MLX's native `quantized_matmul`; the other schemes are dequantized.
//!
//! rlx-ir 0.2.19 has no public helpers that pack these layouts, so the
//! tests pack the weights themselves following rlx's layouts (as read from
//! rlx-cpu / rlx-gguf / rlx-mlx-io): random codes and bit planes with
//! modest finite scales, which is all a packed weight is. The dequantized
//! weights are exact in f32 on both sides (DequantMoEWeights is checked
//! with a zero-abs tolerance), so the only difference in the matmuls is the
//! accumulation order: the tolerance is the usual f32 one for K-term dot
//! products. Where rlx-cpu's matmul is itself lossy (Q4_K, Q2_0: it
//! quantizes the activation), the reference is computed independently.

use rand::{Rng, SeedableRng};
use rlx_ir::quant::QuantScheme;
use rlx_ir::{DType as D, Graph, Op, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{
    check_against, check_parity, mlx, random_values, run_cpu, Feed, Tol,
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

/// f32 dot products of up to ~100 terms of order 1: accumulation order
/// differs between MLX's matmul and rlx-cpu's sgemm / blocked loops, so a
/// few ulps of the sum's magnitude (about K·eps·max|term|) on top of the
/// single-op 1e-5 relative.
const MM: Tol = Tol {
    abs: 3e-5,
    rel: 1e-5,
};

/// Dequantization alone is exact in f32 (code × scale, one rounding on
/// both sides).
/// The 256/512-long dot products of the K-quant tests: K·eps·mean|term|
/// ≈ 512 · 6e-8 · O(1) ≈ 3e-5 of accumulation-order difference, with margin.
const MM_LONG: Tol = Tol {
    abs: 1e-4,
    rel: 1e-5,
};

const EXACT: Tol = Tol {
    abs: 0.0,
    rel: 1e-7,
};

fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// Integers in [lo, hi] as f32 (what an integer leaf is fed).
fn ints(n: usize, lo: i32, hi: i32, seed: u64) -> Vec<f32> {
    let mut r = rng(seed);
    (0..n).map(|_| r.gen_range(lo..=hi) as f32).collect()
}

fn check_cpu(what: &str, g: &Graph, feeds: &[Feed], tol: Tol) {
    let reference = run_cpu(g, feeds);
    check_against(what, g, feeds, &reference, tol);
}

// ── LoraMatMul ───────────────────────────────────────────────────────────

#[test]
fn lora_matmul_parity() {
    // (x dims, k, n, r, scale): odd sizes, rank 1 adapters, a rank-3 x.
    let cases: &[(&[usize], usize, usize, usize, f32)] = &[
        (&[1, 1], 1, 1, 1, 1.0),
        (&[3, 5], 5, 7, 2, 1.0),
        (&[13, 17], 17, 11, 4, 0.37),
        (&[2, 3, 9], 9, 5, 3, -2.5),
        (&[1, 31], 31, 1, 1, 0.125),
    ];
    for (i, &(xd, k, n, r, scale)) in cases.iter().enumerate() {
        let mut g = Graph::new("lora");
        let x = g.input("x", s(xd, D::F32));
        let w = g.param("w", s(&[k, n], D::F32));
        let a = g.param("a", s(&[k, r], D::F32));
        let b = g.param("b", s(&[r, n], D::F32));
        let mut od = xd.to_vec();
        *od.last_mut().unwrap() = n;
        let y = g.add_node(Op::LoraMatMul { scale }, vec![x, w, a, b], s(&od, D::F32));
        g.set_outputs(vec![y]);
        check_parity(
            &format!("LoraMatMul {xd:?} k{k} n{n} r{r} s{scale}"),
            &g,
            100 + i as u64,
            MM,
        );
    }
}

/// Half-precision results: both sides compute in f32 from the same
/// half-rounded inputs and round the result once, so they can differ by
/// one ulp of the dtype where the f32 sums straddle a rounding boundary.
fn half_tol(d: D) -> Tol {
    match d {
        D::F16 => Tol {
            abs: 2e-3,
            rel: 2e-3,
        },
        _ => Tol {
            abs: 1.6e-2,
            rel: 1.6e-2,
        },
    }
}

#[test]
fn lora_and_grouped_matmul_half_parity() {
    for dt in [D::F16, D::BF16] {
        let mut g = Graph::new("lora_h");
        let x = g.input("x", s(&[5, 7], dt));
        let w = g.param("w", s(&[7, 3], dt));
        let a = g.param("a", s(&[7, 2], dt));
        let b = g.param("b", s(&[2, 3], dt));
        let y = g.add_node(
            Op::LoraMatMul { scale: 0.5 },
            vec![x, w, a, b],
            s(&[5, 3], dt),
        );
        g.set_outputs(vec![y]);
        check_parity(&format!("LoraMatMul {dt:?}"), &g, 150, half_tol(dt));

        let (m, k, n, e) = (6, 5, 3, 3);
        let mut g = Graph::new("gmm_h");
        let x = g.input("x", s(&[m, k], dt));
        let w = g.param("w", s(&[e, k, n], dt));
        let idx = g.input("idx", s(&[m], D::F32));
        let y = g.add_node(Op::GroupedMatMul, vec![x, w, idx], s(&[m, n], dt));
        g.set_outputs(vec![y]);
        let feeds = vec![
            feed("x", random_values(m * k, dt, -1.0, 1.0, 151)),
            feed("w", random_values(e * k * n, dt, -1.0, 1.0, 152)),
            feed("idx", expert_idx(m, e, 153)),
        ];
        check_cpu(&format!("GroupedMatMul {dt:?}"), &g, &feeds, half_tol(dt));
    }
}

// ── GroupedMatMul ────────────────────────────────────────────────────────

/// Expert ids for `m` tokens over `e` experts, as f32; includes fractional
/// ids (rlx-cpu truncates them, `f32 as usize`) and leaves some experts
/// unused when m is small.
fn expert_idx(m: usize, e: usize, seed: u64) -> Vec<f32> {
    let mut r = rng(seed);
    (0..m)
        .map(|i| {
            let id = r.gen_range(0..e) as f32;
            if i % 3 == 1 { id + 0.75 } else { id }.min(e as f32 - 0.25)
        })
        .collect()
}

#[test]
fn grouped_matmul_parity() {
    // (m, k, n, experts)
    for (i, &(m, k, n, e)) in [(1, 1, 1, 1), (7, 5, 3, 3), (13, 17, 11, 4), (2, 8, 9, 5)]
        .iter()
        .enumerate()
    {
        let mut g = Graph::new("gmm");
        let x = g.input("x", s(&[m, k], D::F32));
        let w = g.param("w", s(&[e, k, n], D::F32));
        let idx = g.input("idx", s(&[m], D::F32));
        let y = g.add_node(Op::GroupedMatMul, vec![x, w, idx], s(&[m, n], D::F32));
        g.set_outputs(vec![y]);
        let seed = 200 + i as u64;
        let feeds = vec![
            feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
            feed("w", random_values(e * k * n, D::F32, -1.0, 1.0, seed + 1)),
            feed("idx", expert_idx(m, e, seed + 2)),
        ];
        check_cpu(
            &format!("GroupedMatMul m{m} k{k} n{n} e{e}"),
            &g,
            &feeds,
            MM,
        );
    }
}

// ── DequantMatMul: Int8 / Int4 ───────────────────────────────────────────

// One builder for every dequant test keeps the cases readable side by side.
#[allow(clippy::too_many_arguments)]
fn dequant_graph(
    name: &str,
    scheme: QuantScheme,
    m: usize,
    k: usize,
    n: usize,
    wq: Shape,
    scale: Shape,
    zp: Shape,
) -> Graph {
    let mut g = Graph::new(name);
    let x = g.input("x", s(&[m, k], D::F32));
    let w = g.input("w", wq);
    let sc = g.input("scale", scale);
    let z = g.input("zp", zp);
    let y = g.add_node(
        Op::DequantMatMul { scheme },
        vec![x, w, sc, z],
        s(&[m, n], D::F32),
    );
    g.set_outputs(vec![y]);
    g
}

#[test]
fn dequant_matmul_int8_parity() {
    // (m, k, n, block): m = 1 takes rlx-cpu's fused GEMV loop, m > 1 its
    // dequantize-then-sgemm path; k not a multiple of the block leaves a
    // short last block.
    let cases: [(usize, usize, usize, usize); 5] = [
        (1, 13, 5, 4),
        (5, 13, 7, 5),
        (3, 32, 9, 32),
        (4, 7, 3, 1),
        (2, 33, 1, 8),
    ];
    for asym in [false, true] {
        for (i, &(m, k, n, bs)) in cases.iter().enumerate() {
            let scheme = if asym {
                QuantScheme::Int8BlockAsym {
                    block_size: bs as u32,
                }
            } else {
                QuantScheme::Int8Block {
                    block_size: bs as u32,
                }
            };
            let nb = k.div_ceil(bs);
            let g = dequant_graph(
                "dq8",
                scheme,
                m,
                k,
                n,
                s(&[k, n], D::I8),
                s(&[nb, n], D::F32),
                s(&[nb, n], D::F32),
            );
            let seed = 300 + i as u64 + 50 * asym as u64;
            let feeds = vec![
                feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
                feed("w", ints(k * n, -128, 127, seed + 1)),
                feed(
                    "scale",
                    random_values(nb * n, D::F32, 0.001, 0.02, seed + 2),
                ),
                // Asymmetric zero points are f32 in rlx; any value works.
                feed("zp", random_values(nb * n, D::F32, -4.0, 4.0, seed + 3)),
            ];
            check_cpu(
                &format!("DequantMatMul {scheme} m{m} k{k} n{n}"),
                &g,
                &feeds,
                MM,
            );
        }
    }
}

#[test]
fn dequant_matmul_batched_activations_parity() {
    // x [2, 3, k] · w [k, n]: rlx-cpu flattens the leading dims into m.
    let (k, n, bs) = (9usize, 5usize, 4usize);
    let nb = k.div_ceil(bs);
    let mut g = Graph::new("dq8_b");
    let x = g.input("x", s(&[2, 3, k], D::F32));
    let w = g.input("w", s(&[k, n], D::I8));
    let sc = g.input("scale", s(&[nb, n], D::F32));
    let z = g.input("zp", s(&[nb, n], D::F32));
    let y = g.add_node(
        Op::DequantMatMul {
            scheme: QuantScheme::Int8BlockAsym {
                block_size: bs as u32,
            },
        },
        vec![x, w, sc, z],
        s(&[2, 3, n], D::F32),
    );
    g.set_outputs(vec![y]);
    let feeds = vec![
        feed("x", random_values(2 * 3 * k, D::F32, -1.0, 1.0, 390)),
        feed("w", ints(k * n, -128, 127, 391)),
        feed("scale", random_values(nb * n, D::F32, 0.001, 0.02, 392)),
        feed("zp", random_values(nb * n, D::F32, -4.0, 4.0, 393)),
    ];
    check_cpu("DequantMatMul Int8BlockAsym x[2,3,9]", &g, &feeds, MM);
}

#[test]
fn dequant_matmul_int4_parity() {
    // k*n odd in the second case: the last byte holds one nibble.
    let cases: [(usize, usize, usize, usize); 4] =
        [(1, 13, 5, 4), (5, 5, 3, 2), (3, 32, 9, 32), (2, 17, 6, 16)];
    for (i, &(m, k, n, bs)) in cases.iter().enumerate() {
        let scheme = QuantScheme::Int4Block {
            block_size: bs as u32,
        };
        let nb = k.div_ceil(bs);
        let nbytes = (k * n).div_ceil(2);
        let g = dequant_graph(
            "dq4",
            scheme,
            m,
            k,
            n,
            s(&[nbytes], D::U8),
            s(&[nb, n], D::F32),
            s(&[nb, n], D::F32),
        );
        let seed = 400 + i as u64;
        let feeds = vec![
            feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
            feed("w", ints(nbytes, 0, 255, seed + 1)),
            feed("scale", random_values(nb * n, D::F32, -0.1, 0.1, seed + 2)),
            feed("zp", random_values(nb * n, D::F32, -4.0, 4.0, seed + 3)),
        ];
        check_cpu(
            &format!("DequantMatMul {scheme} m{m} k{k} n{n}"),
            &g,
            &feeds,
            MM,
        );
    }
}

// ── DequantMatMul: MLX affine ────────────────────────────────────────────

/// One MlxAffine DequantMatMul `[m, k] x [k, n]` (groups of `gs`) on
/// random packed bytes, scales and biases from `seed`, against the CPU
/// backend within `tol`. The packed bytes go as a flat blob (rows of
/// `k * bits / 8` bytes): a rank-2 U8 weight would be shape-checked as a
/// plain `[k, n]` matmul.
fn check_mlx_affine(
    name: &str,
    bits: u8,
    (m, k, n, gs): (usize, usize, usize, usize),
    seed: u64,
    tol: Tol,
) {
    let scheme = QuantScheme::MlxAffine {
        bits,
        group_size: gs as u32,
    };
    let groups = k / gs;
    let row_bytes = k * bits as usize / 8;
    let g = dequant_graph(
        name,
        scheme,
        m,
        k,
        n,
        s(&[n * row_bytes], D::U8),
        s(&[n, groups], D::F32),
        s(&[n, groups], D::F32),
    );
    let feeds = vec![
        feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
        feed("w", ints(n * row_bytes, 0, 255, seed + 1)),
        feed(
            "scale",
            random_values(n * groups, D::F32, 0.001, 0.05, seed + 2),
        ),
        feed("zp", random_values(n * groups, D::F32, -0.5, 0.5, seed + 3)),
    ];
    check_cpu(
        &format!("DequantMatMul {scheme} m{m} k{k} n{n}"),
        &g,
        &feeds,
        tol,
    );
}

#[test]
fn dequant_matmul_mlx_affine_parity() {
    // Every bit width rlx-mlx-io unpacks (2/4/8 one byte per pack, 3/6 three
    // bytes, 5 five bytes), group sizes 32 and 64, odd n.
    let mut case = 0u64;
    for bits in [2u8, 3, 4, 5, 6, 8] {
        for &(m, k, n, gs) in &[
            (1usize, 64usize, 5usize, 32usize),
            (3, 128, 7, 64),
            (2, 32, 1, 32),
        ] {
            check_mlx_affine("mlxq", bits, (m, k, n, gs), 500 + case, MM);
            case += 1;
        }
    }
}

/// MlxAffine / MlxMxfp4 / MlxMxfp8 on MLX's own layout (group 32/64/128)
/// run on `mx::quantized_matmul`; the lowering table says so.
#[test]
fn dequant_matmul_mlx_layouts_use_native_quantized_matmul() {
    let table = mlx().lowering_table();
    let row = table
        .iter()
        .find(|e| e.op_kind == "DequantMatMul")
        .expect("a DequantMatMul row");
    for want in [
        "Native for MLX's own layouts",
        "MlxAffine bits 2/3/4/5/6/8 with group 32/64/128 -> one mx::quantized_matmul",
        "MlxMxfp4/MlxMxfp8 group 32",
        "mode mxfp4/mxfp8",
        "every other scheme dequantized",
    ] {
        assert!(row.note.contains(want), "note lacks {want:?}: {}", row.note);
    }
}

/// Longer rows and the largest MLX group (128) on the native path, a group
/// size MLX's kernel does not take (16: dequantized) next to it, and mxfp4
/// / mxfp8 with k = 256.
#[test]
fn dequant_matmul_mlx_native_long_rows_parity() {
    let mut case = 0u64;
    for &(bits, m, k, n, gs) in &[
        (4u8, 5usize, 256usize, 33usize, 128usize),
        (8, 1, 256, 17, 128),
        (3, 2, 256, 9, 128),
        (6, 4, 128, 11, 32),
        // group 16: not an MLX quantized_matmul group, dequantized.
        (4, 3, 48, 7, 16),
        (8, 2, 16, 3, 16),
    ] {
        // 256-term dot products: MM_LONG's accumulation-order allowance.
        check_mlx_affine("mlxq_long", bits, (m, k, n, gs), 5000 + case, MM_LONG);
        case += 1;
    }
    for fp8 in [false, true] {
        let (m, k, n, gs) = (3usize, 256usize, 13usize, 32usize);
        let scheme = if fp8 {
            QuantScheme::MlxMxfp8 { group_size: 32 }
        } else {
            QuantScheme::MlxMxfp4 { group_size: 32 }
        };
        let groups = k / gs;
        let nbytes = if fp8 { n * k } else { n * k / 2 };
        let g = dequant_graph(
            "mxfp_long",
            scheme,
            m,
            k,
            n,
            s(&[nbytes], D::U8),
            s(&[n, groups], D::U8),
            s(&[n, groups], D::F32),
        );
        let seed = 5100 + case;
        case += 1;
        let w = if fp8 {
            codes(nbytes, seed + 1, |c| c & 0x7f != 0x7f)
        } else {
            ints(nbytes, 0, 255, seed + 1)
        };
        let feeds = vec![
            feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
            feed("w", w),
            // E8M0 2^-12..2^-2.
            feed("scale", ints(n * groups, 115, 125, seed + 2)),
            feed("zp", vec![1.0; n * groups]),
        ];
        check_cpu(
            &format!("DequantMatMul {scheme} m{m} k{k} n{n}"),
            &g,
            &feeds,
            MM_LONG,
        );
    }
}

// ── DequantMatMul: FP8, NVFP4, MLX mxfp4 / mxfp8 ─────────────────────────

/// Byte codes in 0..=255 that decode to finite values under `finite`
/// (inf/NaN codes are left out: an inf weight makes the dot product
/// inf or NaN depending on summation order, which no backend pins down).
fn codes(n: usize, seed: u64, finite: impl Fn(u8) -> bool) -> Vec<f32> {
    let mut r = rng(seed);
    (0..n)
        .map(|_| loop {
            let c: u8 = r.gen();
            if finite(c) {
                break c as f32;
            }
        })
        .collect()
}

#[test]
fn dequant_matmul_fp8_parity() {
    for e5m2 in [false, true] {
        for (i, &(m, k, n)) in [(1usize, 13usize, 5usize), (4, 16, 7), (3, 5, 1)]
            .iter()
            .enumerate()
        {
            let scheme = if e5m2 {
                QuantScheme::Fp8E5m2
            } else {
                QuantScheme::Fp8E4m3
            };
            // w [k, n] codes, one f32 scale per column (zp unused).
            let g = dequant_graph(
                "fp8",
                scheme,
                m,
                k,
                n,
                s(&[k, n], D::U8),
                s(&[n], D::F32),
                s(&[n], D::F32),
            );
            let seed = 900 + i as u64 + 10 * e5m2 as u64;
            // rlx-cpu's decoders give inf/NaN for an all-ones exponent
            // (E4M3: bits 6..3, E5M2: bits 6..2).
            let finite = move |c: u8| {
                if e5m2 {
                    (c >> 2) & 0x1f != 0x1f
                } else {
                    (c >> 3) & 0x0f != 0x0f
                }
            };
            let feeds = vec![
                feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
                feed("w", codes(k * n, seed + 1, finite)),
                feed("scale", random_values(n, D::F32, 0.001, 0.02, seed + 2)),
                feed("zp", vec![1.0; n]),
            ];
            check_cpu(
                &format!("DequantMatMul {scheme} m{m} k{k} n{n}"),
                &g,
                &feeds,
                MM,
            );
        }
    }
}

#[test]
fn dequant_matmul_nvfp4_parity() {
    // k not a multiple of 16 leaves a short last group; k*n odd leaves a
    // half-used last byte.
    for (i, &(m, k, n)) in [(1usize, 16usize, 3usize), (5, 21, 7), (2, 48, 1)]
        .iter()
        .enumerate()
    {
        let nb = k.div_ceil(16);
        let nbytes = (k * n).div_ceil(2);
        let g = dequant_graph(
            "nvfp4",
            QuantScheme::Nvfp4Block,
            m,
            k,
            n,
            s(&[nbytes], D::U8),
            s(&[nb, n], D::U8),
            s(&[1], D::F32),
        );
        let seed = 1000 + i as u64;
        let feeds = vec![
            feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
            feed("w", ints(nbytes, 0, 255, seed + 1)),
            // E4M3 scale bytes with exponents 4..9 (about 2^-3..2^2): no NaN.
            feed("scale", ints(nb * n, 0x20, 0x4f, seed + 2)),
            feed("zp", vec![0.37]),
        ];
        check_cpu(
            &format!("DequantMatMul Nvfp4Block m{m} k{k} n{n}"),
            &g,
            &feeds,
            MM,
        );
    }
}

#[test]
fn dequant_matmul_mxfp4x2_parity() {
    // Two E2M1 nibble planes over [k, n] and two f32 scale sets
    // [k/group, n] (fed as one f32 [2 * k/group * n] tensor, the bytes
    // rlx-cpu reads); k not a multiple of the group leaves a short block.
    for (i, &(m, k, n, gs)) in [
        (1usize, 32usize, 3usize, 32usize),
        (4, 21, 5, 8),
        (2, 16, 1, 16),
    ]
    .iter()
    .enumerate()
    {
        let nb = k.div_ceil(gs);
        let plane = (k * n).div_ceil(2);
        let mut g = Graph::new("mxfp4x2");
        let x = g.input("x", s(&[m, k], D::F32));
        let w = g.input("w", s(&[2 * plane], D::U8));
        let sc = g.input("scale", s(&[2 * nb * n], D::F32));
        let y = g.add_node(
            Op::DequantMatMul {
                scheme: QuantScheme::MxFp4x2Block {
                    group_size: gs as u32,
                },
            },
            vec![x, w, sc],
            s(&[m, n], D::F32),
        );
        g.set_outputs(vec![y]);
        let seed = 1200 + i as u64;
        let feeds = vec![
            feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
            feed("w", ints(2 * plane, 0, 255, seed + 1)),
            feed(
                "scale",
                random_values(2 * nb * n, D::F32, -0.5, 0.5, seed + 2),
            ),
        ];
        check_cpu(
            &format!("DequantMatMul MxFp4x2Block m{m} k{k} n{n} g{gs}"),
            &g,
            &feeds,
            MM,
        );
    }
}

#[test]
fn dequant_matmul_mlx_mxfp_parity() {
    let mut case = 0u64;
    for fp8 in [false, true] {
        // group 32 uses E8M0 scales, group 16 FP8 E4M3 scales.
        for &(m, k, n, gs) in &[
            (1usize, 64usize, 5usize, 32usize),
            (3, 32, 7, 16),
            (2, 96, 1, 32),
        ] {
            let scheme = if fp8 {
                QuantScheme::MlxMxfp8 {
                    group_size: gs as u32,
                }
            } else {
                QuantScheme::MlxMxfp4 {
                    group_size: gs as u32,
                }
            };
            let groups = k / gs;
            let nbytes = if fp8 { n * k } else { n * k / 2 };
            let g = dequant_graph(
                "mxfp",
                scheme,
                m,
                k,
                n,
                s(&[nbytes], D::U8),
                s(&[n, groups], D::U8),
                s(&[n, groups], D::F32),
            );
            let seed = 1100 + case;
            case += 1;
            // E8M0 bytes 115..=125 are 2^-12..2^-2; FP8 scale bytes with
            // exponents 4..7 are 2^-3..2^0.
            let scales = if gs == 16 {
                ints(n * groups, 0x20, 0x3f, seed + 2)
            } else {
                ints(n * groups, 115, 125, seed + 2)
            };
            let w = if fp8 {
                // OCP E4M3 codes; 0x7f / 0xff are NaN.
                codes(nbytes, seed + 1, |c| c & 0x7f != 0x7f)
            } else {
                ints(nbytes, 0, 255, seed + 1)
            };
            let feeds = vec![
                feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
                feed("w", w),
                feed("scale", scales),
                feed("zp", vec![1.0; n * groups]),
            ];
            check_cpu(
                &format!("DequantMatMul {scheme} m{m} k{k} n{n}"),
                &g,
                &feeds,
                MM,
            );
        }
    }
}

// ── GGUF legacy blocks ───────────────────────────────────────────────────

/// `nblocks` GGUF blocks of `scheme` as byte values for a U8 leaf: random
/// quant/scale bytes, with the block's f16 (Q8_K: f32) super-scales set to
/// modest finite values, laid out as rlx-gguf (llama.cpp) reads them.
fn gguf_blocks(scheme: QuantScheme, nblocks: usize, seed: u64) -> Vec<f32> {
    let mut r = rng(seed);
    let bb = scheme.gguf_block_bytes() as usize;
    // Byte offsets of the f16 super-scale / super-min fields.
    let f16_at: &[usize] = match scheme {
        QuantScheme::GgufQ4_0 | QuantScheme::GgufQ5_0 | QuantScheme::GgufQ8_0 => &[0],
        QuantScheme::GgufQ4_1 | QuantScheme::GgufQ5_1 => &[0, 2],
        QuantScheme::GgufQ4K | QuantScheme::GgufQ5K => &[0, 2],
        QuantScheme::GgufQ6K => &[208],
        QuantScheme::GgufQ2K => &[80, 82],
        QuantScheme::GgufIQ4NL
        | QuantScheme::GgufIQ4XS
        | QuantScheme::GgufIQ2XXS
        | QuantScheme::GgufIQ2XS
        | QuantScheme::GgufIQ3XXS
        | QuantScheme::GgufIQ2S
        | QuantScheme::GgufIQ3S
        | QuantScheme::GgufIQ1S => &[0],
        QuantScheme::GgufTQ1_0 => &[52],
        QuantScheme::GgufQ1_0 | QuantScheme::GgufQ2_0 => &[0],
        QuantScheme::GgufPtq1_0 => &[26],
        QuantScheme::GgufTQ2_0 => &[64],
        QuantScheme::GgufQ3K => &[108],
        _ => &[],
    };
    // Super-scale range chosen so dequantized weights are O(1) (K-quants
    // multiply it by 6-bit / i8 sub-scales as well as the code).
    let dmax = match scheme {
        QuantScheme::GgufQ4K | QuantScheme::GgufQ5K => 0.002f32,
        QuantScheme::GgufQ6K => 0.0003,
        QuantScheme::GgufQ2K => 0.02,
        QuantScheme::GgufIQ4NL => 0.005,
        QuantScheme::GgufIQ4XS => 0.0003,
        QuantScheme::GgufIQ2XXS
        | QuantScheme::GgufIQ2XS
        | QuantScheme::GgufIQ3XXS
        | QuantScheme::GgufIQ2S
        | QuantScheme::GgufIQ3S => 0.005,
        QuantScheme::GgufQ3K => 0.005,
        _ => 0.05,
    };
    let mut out = Vec::new();
    for _ in 0..nblocks {
        let mut blk: Vec<u8> = (0..bb).map(|_| r.gen()).collect();
        for &at in f16_at {
            let d = half::f16::from_f32(r.gen_range(-dmax..dmax)).to_bits();
            blk[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
        match scheme {
            QuantScheme::GgufQ8K | QuantScheme::GgufFV5B => {
                blk[..4].copy_from_slice(&r.gen_range(-0.01f32..0.01).to_le_bytes());
            }
            QuantScheme::GgufFV5 => {
                blk[..4].copy_from_slice(&r.gen_range(0.01f32..0.5).to_le_bytes());
                blk[4..8].copy_from_slice(&r.gen_range(0.5f32..1.0).to_le_bytes());
            }
            // Block scale bytes: E8M0 2^-7..2^3, E4M3 exponents 4..7.
            QuantScheme::GgufMXFP4 => blk[0] = r.gen_range(120..=130),
            QuantScheme::GgufNVFP4 => blk[0] = r.gen_range(0x20..=0x3f),
            QuantScheme::GgufIQ1M => {
                // d is the top nibbles of the four u16 scale words (bytes
                // 49, 51, 53, 55).
                let d = half::f16::from_f32(r.gen_range(-0.05f32..0.05)).to_bits();
                for k in 0..4 {
                    let at = 48 + 2 * k + 1;
                    blk[at] = (blk[at] & 0x0f) | ((((d >> (4 * k)) & 0xf) as u8) << 4);
                }
            }
            QuantScheme::GgufG8_0 => {
                for g in 0..4 {
                    let v = half::bf16::from_f32(r.gen_range(-0.5f32..0.5)).to_bits();
                    blk[2 * g..2 * g + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            QuantScheme::GgufBF16 => {
                let v = half::bf16::from_f32(r.gen_range(-1.0f32..1.0)).to_bits();
                blk.copy_from_slice(&v.to_le_bytes());
            }
            _ => {}
        }
        out.extend(blk.iter().map(|&b| b as f32));
    }
    out
}

fn block_bytes(scheme: QuantScheme) -> usize {
    scheme.gguf_block_bytes() as usize
}

/// Every GGUF scheme the plugin lowers, with its block size.
const GGUF: [QuantScheme; 31] = [
    QuantScheme::GgufIQ1S,
    QuantScheme::GgufIQ1M,
    QuantScheme::GgufIQ2S,
    QuantScheme::GgufIQ3S,
    QuantScheme::GgufIQ2XS,
    QuantScheme::GgufIQ3XXS,
    QuantScheme::GgufIQ2XXS,
    QuantScheme::GgufPtq1_0,
    QuantScheme::GgufFV5,
    QuantScheme::GgufFV5B,
    QuantScheme::GgufQ1_0,
    QuantScheme::GgufQ2_0,
    QuantScheme::GgufG8_0,
    QuantScheme::GgufTQ1_0,
    QuantScheme::GgufTQ2_0,
    QuantScheme::GgufMXFP4,
    QuantScheme::GgufNVFP4,
    QuantScheme::GgufIQ4NL,
    QuantScheme::GgufIQ4XS,
    QuantScheme::GgufQ2K,
    QuantScheme::GgufQ3K,
    QuantScheme::GgufQ4_0,
    QuantScheme::GgufQ4_1,
    QuantScheme::GgufQ5_0,
    QuantScheme::GgufQ5_1,
    QuantScheme::GgufQ8_0,
    QuantScheme::GgufQ4K,
    QuantScheme::GgufQ5K,
    QuantScheme::GgufQ6K,
    QuantScheme::GgufQ8K,
    QuantScheme::GgufBF16,
];

const GGUF_BANKS: [QuantScheme; 30] = [
    QuantScheme::GgufIQ1S,
    QuantScheme::GgufIQ1M,
    QuantScheme::GgufIQ2S,
    QuantScheme::GgufIQ3S,
    QuantScheme::GgufIQ2XS,
    QuantScheme::GgufIQ3XXS,
    QuantScheme::GgufIQ2XXS,
    QuantScheme::GgufPtq1_0,
    QuantScheme::GgufFV5,
    QuantScheme::GgufFV5B,
    QuantScheme::GgufQ1_0,
    QuantScheme::GgufQ2_0,
    QuantScheme::GgufG8_0,
    QuantScheme::GgufTQ1_0,
    QuantScheme::GgufTQ2_0,
    QuantScheme::GgufMXFP4,
    QuantScheme::GgufNVFP4,
    QuantScheme::GgufIQ4NL,
    QuantScheme::GgufIQ4XS,
    QuantScheme::GgufQ2K,
    QuantScheme::GgufQ3K,
    QuantScheme::GgufQ4_0,
    QuantScheme::GgufQ4_1,
    QuantScheme::GgufQ5_0,
    QuantScheme::GgufQ5_1,
    QuantScheme::GgufQ8_0,
    QuantScheme::GgufQ4K,
    QuantScheme::GgufQ5K,
    QuantScheme::GgufQ6K,
    QuantScheme::GgufQ8K,
];

/// k values (multiples of the scheme's block) for the GGUF tests.
fn gguf_ks(scheme: QuantScheme) -> [usize; 3] {
    match scheme.gguf_block_size() {
        256 => [256, 512, 256],
        1 => [7, 33, 64],
        16 => [16, 48, 32],
        128 => [128, 256, 384],
        _ => [32, 64, 96],
    }
}

/// rlx-cpu's Q4_K matmuls quantize the *activation* to Q8_K on some paths
/// (llama.cpp-style int8 dot; e.g. every m == 1 GEMV), so they are not the
/// f32 product of the dequantized weight and cannot judge an exact
/// lowering. For Q4_K the tests use an independent reference instead: the
/// weight dequantized by rlx-cpu's `DequantMoEWeights` (checked exact
/// against the plugin in `dequant_moe_weights_gguf_parity`), multiplied in
/// plain Rust with f64 accumulation.
fn lossy_on_cpu(scheme: QuantScheme) -> bool {
    // Q2_0's m == 1 GEMV likewise quantizes the activation (Q8_0 groups of
    // 128).
    matches!(scheme, QuantScheme::GgufQ4K | QuantScheme::GgufQ2_0)
}

/// `[e, k, n]` f32 weights from a GGUF bank, dequantized by rlx-cpu.
fn cpu_dequant_bank(scheme: QuantScheme, bytes: &[f32], e: usize, k: usize, n: usize) -> Vec<f32> {
    let mut g = Graph::new("deq");
    let w = g.input("w", s(&[bytes.len()], D::U8));
    let y = g.add_node(
        Op::DequantMoEWeights { scheme },
        vec![w],
        s(&[e, k, n], D::F32),
    );
    g.set_outputs(vec![y]);
    run_cpu(&g, &[feed("w", bytes.to_vec())]).remove(0)
}

/// `out[i] = x[i] @ bank[ids[i]]` in f64, rounded to f32.
fn grouped_reference(x: &[f32], bank: &[f32], ids: &[usize], k: usize, n: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for (i, &e) in ids.iter().enumerate() {
        for j in 0..n {
            let acc: f64 = (0..k)
                .map(|p| x[i * k + p] as f64 * bank[e * k * n + p * n + j] as f64)
                .sum();
            out.push(acc as f32);
        }
    }
    out
}

#[test]
fn dequant_matmul_gguf_parity() {
    for scheme in GGUF {
        let ks = gguf_ks(scheme);
        for (i, &(m, k, n)) in [(1usize, ks[0], 3usize), (4, ks[1], 5), (3, ks[2], 1)]
            .iter()
            .enumerate()
        {
            let be = scheme.gguf_block_size() as usize;
            let nbytes = n * k / be * block_bytes(scheme);
            let mut g = Graph::new("gguf");
            let x = g.input("x", s(&[m, k], D::F32));
            let w = g.input("w", s(&[nbytes], D::U8));
            let y = g.add_node(Op::DequantMatMul { scheme }, vec![x, w], s(&[m, n], D::F32));
            g.set_outputs(vec![y]);
            let seed = 600 + i as u64;
            let feeds = vec![
                feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
                feed("w", gguf_blocks(scheme, n * k / be, seed + 1)),
            ];
            let what = format!("DequantMatMul {scheme} m{m} k{k} n{n}");
            let tol = if k >= 256 { MM_LONG } else { MM };
            if lossy_on_cpu(scheme) {
                let bank = cpu_dequant_bank(scheme, &feeds[1].values, 1, k, n);
                let want = grouped_reference(&feeds[0].values, &bank, &vec![0; m], k, n);
                check_against(&what, &g, &feeds, &[want], tol);
            } else {
                check_cpu(&what, &g, &feeds, tol);
            }
        }
    }
}

#[test]
fn dequant_grouped_matmul_gguf_parity() {
    for scheme in GGUF {
        let ks = gguf_ks(scheme);
        let be = scheme.gguf_block_size() as usize;
        // (m, k, n, experts)
        for (i, &(m, k, n, e)) in [
            (1usize, ks[0], 3usize, 1usize),
            (7, ks[1], 5, 3),
            (5, ks[2], 9, 4),
        ]
        .iter()
        .enumerate()
        {
            let nbytes = e * n * k / be * block_bytes(scheme);
            let mut g = Graph::new("dgmm");
            let x = g.input("x", s(&[m, k], D::F32));
            let w = g.input("w", s(&[nbytes], D::U8));
            let idx = g.input("idx", s(&[m], D::F32));
            let y = g.add_node(
                Op::DequantGroupedMatMul { scheme },
                vec![x, w, idx],
                s(&[m, n], D::F32),
            );
            g.set_outputs(vec![y]);
            let seed = 700 + i as u64;
            let feeds = vec![
                feed("x", random_values(m * k, D::F32, -1.0, 1.0, seed)),
                feed("w", gguf_blocks(scheme, e * n * k / be, seed + 1)),
                feed("idx", expert_idx(m, e, seed + 2)),
            ];
            let what = format!("DequantGroupedMatMul {scheme} m{m} k{k} n{n} e{e}");
            let tol = if k >= 256 { MM_LONG } else { MM };
            if lossy_on_cpu(scheme) {
                let bank = cpu_dequant_bank(scheme, &feeds[1].values, e, k, n);
                let ids: Vec<usize> = feeds[2].values.iter().map(|&v| v as usize).collect();
                let want = grouped_reference(&feeds[0].values, &bank, &ids, k, n);
                check_against(&what, &g, &feeds, &[want], tol);
            } else {
                check_cpu(&what, &g, &feeds, tol);
            }
        }
    }
}

#[test]
fn dequant_moe_weights_gguf_parity() {
    // rlx-cpu's bank dequant has no GgufBF16 / FV5 / FV5B (it panics), so
    // DequantMoEWeights claims none of them.
    for scheme in GGUF_BANKS
        .into_iter()
        .filter(|s| !matches!(s, QuantScheme::GgufFV5 | QuantScheme::GgufFV5B))
    {
        let ks = gguf_ks(scheme);
        let be = scheme.gguf_block_size() as usize;
        for (i, &(e, k, n)) in [(1usize, ks[0], 1usize), (2, ks[1], 3), (3, ks[2], 5)]
            .iter()
            .enumerate()
        {
            let nbytes = e * n * k / be * block_bytes(scheme);
            let mut g = Graph::new("moew");
            let w = g.input("w", s(&[nbytes], D::U8));
            let y = g.add_node(
                Op::DequantMoEWeights { scheme },
                vec![w],
                s(&[e, k, n], D::F32),
            );
            g.set_outputs(vec![y]);
            let feeds = vec![feed(
                "w",
                gguf_blocks(scheme, e * n * k / be, 800 + i as u64),
            )];
            check_cpu(
                &format!("DequantMoEWeights {scheme} e{e} k{k} n{n}"),
                &g,
                &feeds,
                EXACT,
            );
        }
    }
}

// ── Errors ───────────────────────────────────────────────────────────────

#[test]
fn an_unlowered_scheme_fails_at_compile_naming_the_node() {
    let p = mlx();
    // MLX-affine with a bit width MLX does not pack (7) is not lowered
    // (rlx-cpu panics on it too).
    let g = dequant_graph(
        "affine7",
        QuantScheme::MlxAffine {
            bits: 7,
            group_size: 32,
        },
        2,
        32,
        3,
        s(&[3 * 28], D::U8),
        s(&[3, 1], D::F32),
        s(&[3, 1], D::F32),
    );
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let e = p
            .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), mode)
            .err()
            .expect("MlxAffine bits=7 DequantMatMul is not lowered");
        assert!(
            e.message.contains("node %4")
                && e.message.contains("DequantMatMul")
                && e.message.contains("not lowered"),
            "{e}"
        );
    }
    // A GGUF BF16 bank for DequantMoEWeights is not lowered (rlx-cpu's bank
    // dequant has none either).
    let mut g = Graph::new("bf16bank");
    let w = g.input("w", s(&[2 * 4 * 3], D::U8));
    let y = g.add_node(
        Op::DequantMoEWeights {
            scheme: QuantScheme::GgufBF16,
        },
        vec![w],
        s(&[2, 4, 3], D::F32),
    );
    g.set_outputs(vec![y]);
    let e = p
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("GgufBF16 DequantMoEWeights is not lowered");
    assert!(
        e.message.contains("node %1") && e.message.contains("not lowered"),
        "{e}"
    );
}
