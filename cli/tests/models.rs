//! The model builders: deterministic, valid `.rlxmodel`, and meaning what
//! models.rs documents — checked by running them on rlx-runtime's CPU
//! backend against a plain-Rust forward pass written from that
//! documentation.

use rlx_host::models::{
    matmul_relu_add, mlp, transformer, InputKind, MlpConfig, TransformerConfig,
};
use rlx_host::run::{errors, execute, index_inputs, random_data, ModelData};
use rlx_runtime::Device;

fn param<'a>(data: &'a ModelData, name: &str) -> &'a [f32] {
    &data
        .params
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no param {name}"))
        .1
}

/// `x [m, k] @ w [k, n]`, in f64.
fn matmul(x: &[f64], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| x[i * k + p] * w[p * n + j] as f64).sum();
        }
    }
    out
}

fn rms_norm(x: &[f64], gamma: &[f32], beta: &[f32], d: usize, eps: f64) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for (row, o) in x.chunks(d).zip(out.chunks_mut(d)) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        for i in 0..d {
            o[i] = row[i] * inv * gamma[i] as f64 + beta[i] as f64;
        }
    }
    out
}

/// NeoX rotate-half RoPE on `[S, H*Dh]` with the builder's tables.
fn rope(x: &[f64], s: usize, h: usize, dh: usize, theta: f64) -> Vec<f64> {
    let half = dh / 2;
    let mut out = x.to_vec();
    for pos in 0..s {
        for head in 0..h {
            let base = pos * h * dh + head * dh;
            for i in 0..half {
                let a = pos as f64 * theta.powf(-(2.0 * i as f64) / dh as f64);
                let (c, sn) = (a.cos(), a.sin());
                let (x1, x2) = (x[base + i], x[base + half + i]);
                out[base + i] = x1 * c - x2 * sn;
                out[base + half + i] = x2 * c + x1 * sn;
            }
        }
    }
    out
}

/// Causal multi-head attention over `[S, H*Dh]` rows (= `[1, S, H, Dh]`).
fn attention(q: &[f64], k: &[f64], v: &[f64], s: usize, h: usize, dh: usize) -> Vec<f64> {
    let d = h * dh;
    let scale = 1.0 / (dh as f64).sqrt();
    let mut out = vec![0.0; s * d];
    for head in 0..h {
        for i in 0..s {
            let scores: Vec<f64> = (0..=i)
                .map(|j| {
                    (0..dh)
                        .map(|t| q[i * d + head * dh + t] * k[j * d + head * dh + t])
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for t in 0..dh {
                out[i * d + head * dh + t] =
                    (0..=i).map(|j| e[j] / z * v[j * d + head * dh + t]).sum();
            }
        }
    }
    out
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn reference_transformer(cfg: &TransformerConfig, data: &ModelData) -> Vec<f64> {
    let (s, d, h, dh, f, v) = (
        cfg.seq,
        cfg.d_model,
        cfg.n_heads,
        cfg.head_dim(),
        cfg.d_ffn,
        cfg.vocab,
    );
    let eps = cfg.eps as f64;
    let theta = cfg.rope_theta as f64;
    let tokens = &data.inputs[0].1;
    let emb = param(data, "tok_emb");
    let mut x: Vec<f64> = tokens
        .iter()
        .flat_map(|&t| {
            emb[t as usize * d..(t as usize + 1) * d]
                .iter()
                .map(|&e| e as f64)
        })
        .collect();
    for l in 0..cfg.n_layers {
        let p = |n: &str| param(data, &format!("l{l}.{n}"));
        let a = rms_norm(&x, p("attn_norm.gamma"), p("attn_norm.beta"), d, eps);
        let q = rope(&matmul(&a, p("wq"), s, d, d), s, h, dh, theta);
        let k = rope(&matmul(&a, p("wk"), s, d, d), s, h, dh, theta);
        let vv = matmul(&a, p("wv"), s, d, d);
        let o = matmul(&attention(&q, &k, &vv, s, h, dh), p("wo"), s, d, d);
        x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        let m = rms_norm(&x, p("mlp_norm.gamma"), p("mlp_norm.beta"), d, eps);
        let gate = matmul(&m, p("w_gate"), s, d, f);
        let up = matmul(&m, p("w_up"), s, d, f);
        let hidden: Vec<f64> = gate.iter().zip(&up).map(|(g, u)| silu(*g) * u).collect();
        let down = matmul(&hidden, p("w_down"), s, f, d);
        x.iter_mut().zip(&down).for_each(|(x, o)| *x += o);
    }
    let x = rms_norm(
        &x,
        param(data, "final_norm.gamma"),
        param(data, "final_norm.beta"),
        d,
        eps,
    );
    matmul(&x, param(data, "lm_head"), s, d, v)
}

#[test]
fn the_transformer_means_what_its_documentation_says() {
    let cfg = TransformerConfig::default();
    let model = transformer(&cfg);
    let data = random_data(&model.graph, 11).unwrap();
    // Tokens are integers in [0, vocab).
    assert_eq!(
        model.inputs[0].kind,
        InputKind::TokenIds { vocab: cfg.vocab }
    );
    assert_eq!(index_inputs(&model.graph).get("tokens"), Some(&cfg.vocab));
    let toks = &data.inputs[0].1;
    assert_eq!(toks.len(), cfg.seq);
    assert!(toks
        .iter()
        .all(|t| t.fract() == 0.0 && *t >= 0.0 && (*t as usize) < cfg.vocab));

    let cpu = execute(Device::Cpu, &model.graph, &data, 1).unwrap();
    assert_eq!(cpu.outputs.len(), 1);
    assert_eq!(cpu.outputs[0].len(), cfg.seq * cfg.vocab);
    let want: Vec<f32> = reference_transformer(&cfg, &data)
        .iter()
        .map(|v| *v as f32)
        .collect();
    let (abs, _) = errors(&cpu.outputs[0], &want).unwrap();
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
    assert!(
        abs <= 1e-4 * scale.max(1.0),
        "rlx CPU vs the documented semantics: max abs err {abs} (max |logit| {scale})"
    );
}

#[test]
fn two_layers_build_and_run() {
    let cfg = TransformerConfig {
        n_layers: 2,
        ..Default::default()
    };
    let model = transformer(&cfg);
    let data = random_data(&model.graph, 2).unwrap();
    let cpu = execute(Device::Cpu, &model.graph, &data, 1).unwrap();
    let want: Vec<f32> = reference_transformer(&cfg, &data)
        .iter()
        .map(|v| *v as f32)
        .collect();
    let (abs, _) = errors(&cpu.outputs[0], &want).unwrap();
    assert!(abs <= 1e-3, "max abs err {abs}");
}

#[test]
fn the_mlp_is_gelu_of_an_affine_map() {
    let cfg = MlpConfig::default();
    let model = mlp(&cfg);
    let data = random_data(&model.graph, 5).unwrap();
    let cpu = execute(Device::Cpu, &model.graph, &data, 1).unwrap();
    let x: Vec<f64> = data.inputs[0].1.iter().map(|v| *v as f64).collect();
    let h = matmul(&x, param(&data, "w1"), cfg.batch, cfg.d_in, cfg.d_hidden);
    let b1 = param(&data, "b1");
    // Exact GELU: z * Phi(z) = 0.5 z (1 + erf(z / sqrt 2)).
    let h: Vec<f64> = h
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let z = v + b1[i % cfg.d_hidden] as f64;
            0.5 * z * (1.0 + erf(z / std::f64::consts::SQRT_2))
        })
        .collect();
    let y = matmul(&h, param(&data, "w2"), cfg.batch, cfg.d_hidden, cfg.d_out);
    let b2 = param(&data, "b2");
    let want: Vec<f32> = y
        .iter()
        .enumerate()
        .map(|(i, v)| (v + b2[i % cfg.d_out] as f64) as f32)
        .collect();
    let (abs, _) = errors(&cpu.outputs[0], &want).unwrap();
    assert!(abs <= 1e-4, "max abs err {abs}");
}

/// erf by its Maclaurin series in f64: for |x| <= 6 the cancellation error
/// stays below 1e-9; beyond, erf is +-1 to within 2e-17.
fn erf(x: f64) -> f64 {
    if x.abs() > 6.0 {
        return x.signum();
    }
    let mut sum = 0.0;
    let mut term = x;
    let mut n = 0;
    while term.abs() > 1e-18 && n < 400 {
        sum += term / (2 * n + 1) as f64;
        n += 1;
        term *= -x * x / n as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn builders_are_deterministic_and_round_trip_through_rlxmodel_text() {
    for (a, b) in [
        (
            transformer(&Default::default()).graph,
            transformer(&Default::default()).graph,
        ),
        (
            mlp(&Default::default()).graph,
            mlp(&Default::default()).graph,
        ),
        (
            matmul_relu_add(2, 3, 4).graph,
            matmul_relu_add(2, 3, 4).graph,
        ),
    ] {
        let ta = rlx_ir::rlxmodel::to_text(&a).unwrap();
        assert_eq!(ta, rlx_ir::rlxmodel::to_text(&b).unwrap());
        let back = rlx_ir::rlxmodel::from_text(&ta).unwrap();
        assert_eq!(rlx_ir::rlxmodel::to_text(&back).unwrap(), ta);
    }
}
