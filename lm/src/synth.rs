//! Random-weight checkpoints in the layouts real ones come in, for tests and
//! benchmarks without a model hub: Hugging Face's (`config.json` and
//! `model.safetensors`, f32 or bf16) and mlx-lm's affine-quantized one
//! (every linear layer and the embedding packed, as `nn.quantize` packs
//! them: `uint32` words of `bits`-wide codes, low bits first, with scales
//! and biases per group).
//!
//! The weights are small and seeded: linear layers uniform with variance
//! `1 / fan_in`, norms near 1, an untied LM head scaled so that logits have
//! a standard deviation near 4. Logits are then well apart at the top,
//! which makes greedy tokens a fair check between two implementations
//! whose arithmetic differs in the last bits.

use crate::config::{Arch, ModelConfig, Quantization, RopeScaling};
use crate::weights::{expected, EMBED, LM_HEAD};
use crate::{bail, Error, Result};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// About 1 M parameters: CI.
    Tiny,
    /// About 20 M.
    Small,
    /// About 150 M.
    Medium,
}

impl Size {
    pub fn parse(s: &str) -> Result<Size> {
        match s {
            "tiny" => Ok(Size::Tiny),
            "small" => Ok(Size::Small),
            "medium" => Ok(Size::Medium),
            _ => bail!("unknown size {s:?} (tiny, small, medium)"),
        }
    }
}

/// How the float tensors are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    Bf16,
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub arch: Arch,
    pub size: Size,
    pub precision: Precision,
    /// `Some`: mlx-lm's affine layout with these bits (2, 4 or 8) and group.
    pub quantization: Option<Quantization>,
    pub seed: u64,
}

/// The architecture's shapes at `size`. Llama's LM head is untied, Qwen3's
/// tied to the embedding (both forms are exercised at every size); Llama
/// uses Llama 3's rotary scaling, as Llama 3.2 checkpoints do.
pub fn config(arch: Arch, size: Size) -> ModelConfig {
    // (vocab, hidden, intermediate, layers, heads, kv heads, head dim)
    let (v, h, i, l, nh, nkv, hd) = match size {
        Size::Tiny => (1024, 128, 384, 4, 4, 2, 32),
        Size::Small => (8192, 512, 1408, 6, 8, 4, 64),
        Size::Medium => (32000, 1024, 2816, 8, 16, 4, 64),
    };
    ModelConfig {
        arch,
        vocab_size: v,
        hidden_size: h,
        intermediate_size: i,
        num_layers: l,
        num_heads: nh,
        num_kv_heads: nkv,
        head_dim: hd,
        rms_norm_eps: 1e-5,
        rope_theta: match arch {
            Arch::Llama => 500_000.0,
            Arch::Qwen3 => 1_000_000.0,
        },
        rope_scaling: match arch {
            Arch::Llama => RopeScaling::Llama3 {
                factor: 32.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192.0,
            },
            Arch::Qwen3 => RopeScaling::None,
        },
        rope_traditional: false,
        tie_word_embeddings: arch == Arch::Qwen3,
        max_position_embeddings: Some(131_072),
        quantization: None,
        eos_token_ids: vec![2],
    }
}

/// SplitMix64: a seeded stream that is the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    fn uniform(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }
}

/// The seeded f32 values of tensor `name`.
fn values(name: &str, shape: &[usize], c: &ModelConfig, rng: &mut Rng) -> Vec<f32> {
    let n: usize = shape.iter().product();
    let (scale, offset) = if name.ends_with("norm.weight") {
        (0.1, 1.0)
    } else if name == EMBED && c.tie_word_embeddings {
        // Small beside what the layers add, or the tied head's logits are
        // the input's own embedding against the table, and greedy decoding
        // repeats the last token forever.
        (0.05, 0.0)
    } else if name == EMBED {
        (1.0, 0.0)
    } else if name == LM_HEAD {
        (4.0 * (3.0 / c.hidden_size as f32).sqrt(), 0.0)
    } else {
        ((3.0 / shape[1] as f32).sqrt(), 0.0)
    };
    (0..n).map(|_| offset + scale * rng.uniform()).collect()
}

/// One float tensor in the checkpoint's precision (the values it holds are
/// then exactly what a reader widens back to f32).
fn stored(values: &[f32], p: Precision) -> (Dtype, Vec<u8>) {
    match p {
        Precision::F32 => (
            Dtype::F32,
            values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        Precision::Bf16 => (
            Dtype::BF16,
            values
                .iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect(),
        ),
    }
}

/// A `[rows, k]` matrix quantized as MLX's affine `quantize` does it: per
/// group of `group` values, the scale and bias that make the range's edge
/// of larger magnitude exact, codes `round((w - bias) / scale)` clipped to
/// `0 ..= 2^bits - 1`. Returns the packed `uint32` words (`[rows, k * bits
/// / 32]`, as little-endian bytes), the scales and the biases (`[rows, k /
/// group]` each).
pub fn quantize(
    w: &[f32],
    rows: usize,
    k: usize,
    q: Quantization,
) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let (bits, group) = (q.bits as usize, q.group_size as usize);
    let n_bins = ((1u32 << bits) - 1) as f32;
    let groups = k / group;
    let mut scales = Vec::with_capacity(rows * groups);
    let mut biases = Vec::with_capacity(rows * groups);
    let mut words = vec![0u32; rows * k * bits / 32];
    for r in 0..rows {
        for g in 0..groups {
            let vals = &w[r * k + g * group..r * k + (g + 1) * group];
            let max = vals.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let min = vals.iter().copied().fold(f32::INFINITY, f32::min);
            let low_edge = min.abs() > max.abs();
            let mut scale = ((max - min) / n_bins).max(1e-7);
            if !low_edge {
                scale = -scale;
            }
            let edge = if low_edge { min } else { max };
            let q0 = (edge / scale).round();
            if q0 != 0.0 {
                scale = edge / q0;
            }
            let bias = if q0 == 0.0 { 0.0 } else { edge };
            scales.push(scale);
            biases.push(bias);
            for (j, &x) in vals.iter().enumerate() {
                let code = ((x - bias) / scale).round().clamp(0.0, n_bins) as u32;
                let bit = (r * k + g * group + j) * bits;
                words[bit / 32] |= code << (bit % 32);
            }
        }
    }
    let bytes = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    (bytes, scales, biases)
}

/// Write the checkpoint `spec` describes into `dir` (created if missing):
/// `config.json` and `model.safetensors`.
pub fn write(dir: &Path, spec: &Spec) -> Result<ModelConfig> {
    let mut c = config(spec.arch, spec.size);
    if let Some(q) = spec.quantization {
        if ![2, 4, 8].contains(&q.bits) {
            bail!("the generator packs 2, 4 or 8 bits, not {}", q.bits);
        }
        c.quantization = Some(q);
    }
    std::fs::create_dir_all(dir).map_err(|e| Error(format!("{}: {e}", dir.display())))?;
    let mut rng = Rng(spec.seed ^ 0x5EED_0FC0_FFEE);
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, shape, quantizable) in expected(&c) {
        let vals = values(&name, &shape, &c, &mut rng);
        match c.quantization.filter(|_| quantizable) {
            Some(q) => {
                let (rows, k) = (shape[0], shape[1]);
                let (w, s, b) = quantize(&vals, rows, k, q);
                let base = name.trim_end_matches(".weight");
                let g = k / q.group_size as usize;
                let (sd, sb) = stored(&s, spec.precision);
                let (bd, bb) = stored(&b, spec.precision);
                tensors.push((
                    name.clone(),
                    Dtype::U32,
                    vec![rows, k * q.bits as usize / 32],
                    w,
                ));
                tensors.push((format!("{base}.scales"), sd, vec![rows, g], sb));
                tensors.push((format!("{base}.biases"), bd, vec![rows, g], bb));
            }
            None => {
                let (d, bytes) = stored(&vals, spec.precision);
                tensors.push((name, d, shape, bytes));
            }
        }
    }
    let views = tensors
        .iter()
        .map(|(n, d, s, b)| {
            TensorView::new(*d, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error(format!("{n}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let file = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, &None, &file)
        .map_err(|e| Error(format!("{}: {e}", file.display())))?;
    let config = serde_json::to_string_pretty(&c.to_json()).expect("a JSON value prints");
    let path = dir.join("config.json");
    std::fs::write(&path, config + "\n").map_err(|e| Error(format!("{}: {e}", path.display())))?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_values_are_within_a_step_and_each_groups_edge_exact() {
        let mut rng = Rng(7);
        let (rows, k) = (3, 128);
        let w: Vec<f32> = (0..rows * k).map(|_| rng.uniform()).collect();
        let q = Quantization {
            bits: 4,
            group_size: 64,
        };
        let (bytes, s, b) = quantize(&w, rows, k, q);
        assert_eq!((bytes.len(), s.len()), (rows * k / 2, rows * 2));
        let back: Vec<f32> = (0..w.len())
            .map(|i| s[i / 64] * ((bytes[i / 2] >> (4 * (i % 2))) & 15) as f32 + b[i / 64])
            .collect();
        for (i, (&x, &y)) in w.iter().zip(&back).enumerate() {
            // The scale is set so that the edge of larger magnitude is
            // exact; the other edge may clip by up to one step.
            assert!((y - x).abs() <= s[i / 64].abs() * 1.0001, "{i}: {x} -> {y}");
        }
        for g in 0..rows * 2 {
            let vals = &w[g * 64..(g + 1) * 64];
            let edge = vals
                .iter()
                .copied()
                .fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m });
            let at = vals.iter().position(|&v| v == edge).unwrap();
            assert!(
                (back[g * 64 + at] - edge).abs() <= 1e-6,
                "group {g}'s edge {edge}"
            );
        }
    }
}
