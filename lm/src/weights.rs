//! A checkpoint's tensors, read by rlx-mlx-io and checked against its
//! config: every tensor the graphs need is there with the shape the config
//! implies, nothing unknown is left over, and a quantized layer's packed
//! weight, scales and biases agree with the config's bits and group size.
//! Quantized layers stay packed (mlx-lm's layout, as MLX's
//! `quantized_matmul` reads it); float tensors are held as f32.

use crate::config::{ModelConfig, Quantization};
use crate::{bail, Error, Result};
use rlx_mlx_io::MlxPackedLinear;
use std::collections::BTreeMap;
use std::path::Path;

/// One weight: a dense f32 tensor, or a quantized linear layer kept packed.
#[derive(Debug, Clone)]
pub enum Tensor {
    Dense {
        shape: Vec<usize>,
        data: Vec<f32>,
    },
    /// `[out, in]` logically; `w_q` holds `out * in * bits / 8` bytes, the
    /// scales and biases `out * in / group` f32 values each.
    Packed(MlxPackedLinear),
}

impl Tensor {
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Tensor::Dense { shape, .. } => shape.clone(),
            Tensor::Packed(p) => p.out_shape.clone(),
        }
    }

    /// Bytes held on the host.
    pub fn bytes(&self) -> usize {
        match self {
            Tensor::Dense { data, .. } => data.len() * 4,
            Tensor::Packed(p) => p.w_q.len() + p.scales.len() + p.biases.len(),
        }
    }
}

/// The checkpoint's tensors by name.
#[derive(Debug)]
pub struct Weights {
    pub tensors: BTreeMap<String, Tensor>,
    /// Tensors in the files that no graph reads (mlx-lm drops the same).
    pub ignored: Vec<String>,
}

/// The names of one decoder layer's tensors.
pub fn layer_name(i: usize, leaf: &str) -> String {
    format!("model.layers.{i}.{leaf}")
}

pub const EMBED: &str = "model.embed_tokens.weight";
pub const FINAL_NORM: &str = "model.norm.weight";
pub const LM_HEAD: &str = "lm_head.weight";

/// Every linear layer of a decoder layer, with its `[out, in]` shape.
pub fn layer_linears(c: &ModelConfig) -> [(&'static str, [usize; 2]); 7] {
    let (h, i, q, kv) = (
        c.hidden_size,
        c.intermediate_size,
        c.num_heads * c.head_dim,
        c.kv_row(),
    );
    [
        ("self_attn.q_proj.weight", [q, h]),
        ("self_attn.k_proj.weight", [kv, h]),
        ("self_attn.v_proj.weight", [kv, h]),
        ("self_attn.o_proj.weight", [h, q]),
        ("mlp.gate_proj.weight", [i, h]),
        ("mlp.up_proj.weight", [i, h]),
        ("mlp.down_proj.weight", [h, i]),
    ]
}

/// Every tensor the config implies, with its logical shape and whether it
/// may be quantized (linear layers and the embedding, as mlx-lm's
/// `nn.quantize` picks them; never a norm).
pub fn expected(c: &ModelConfig) -> Vec<(String, Vec<usize>, bool)> {
    let (h, v) = (c.hidden_size, c.vocab_size);
    let mut out = vec![(EMBED.to_string(), vec![v, h], true)];
    for l in 0..c.num_layers {
        out.push((layer_name(l, "input_layernorm.weight"), vec![h], false));
        out.push((
            layer_name(l, "post_attention_layernorm.weight"),
            vec![h],
            false,
        ));
        for (leaf, shape) in layer_linears(c) {
            out.push((layer_name(l, leaf), shape.to_vec(), true));
        }
        if c.arch.qk_norm() {
            out.push((
                layer_name(l, "self_attn.q_norm.weight"),
                vec![c.head_dim],
                false,
            ));
            out.push((
                layer_name(l, "self_attn.k_norm.weight"),
                vec![c.head_dim],
                false,
            ));
        }
    }
    out.push((FINAL_NORM.to_string(), vec![h], false));
    if !c.tie_word_embeddings {
        out.push((LM_HEAD.to_string(), vec![v, h], true));
    }
    out
}

/// Names mlx-lm's model code drops before loading (`sanitize`).
fn dropped(name: &str, c: &ModelConfig) -> bool {
    name.ends_with("self_attn.rotary_emb.inv_freq") || (c.tie_word_embeddings && name == LM_HEAD)
}

impl Weights {
    /// The safetensors in `dir`, checked against `config`.
    pub fn load(dir: &Path, config: &ModelConfig) -> Result<Weights> {
        let mut raw = rlx_mlx_io::load_path(dir)
            .map_err(|e| Error(format!("{}: cannot read the weights: {e:#}", dir.display())))?;
        let mut tensors = BTreeMap::new();
        for (name, shape, quantizable) in expected(config) {
            let base = name.trim_end_matches(".weight");
            let packed = raw.tensors.contains_key(&format!("{base}.scales"));
            let t = if packed {
                let q = match (quantizable, config.quantization) {
                    (true, Some(q)) => q,
                    (false, _) => bail!(
                        "{}: {base}.scales: {name} is not a layer that is quantized",
                        dir.display()
                    ),
                    (true, None) => bail!(
                        "{}: {base}.scales is present but config.json has no \"quantization\"",
                        dir.display()
                    ),
                };
                packed_layer(dir, &mut raw, &name, &shape, q)?
            } else {
                let Some(t) = raw.tensors.remove(&name) else {
                    bail!(
                        "{}: tensor {name:?} is missing (the config's {} needs it, shape {shape:?})",
                        dir.display(),
                        config.arch.name()
                    );
                };
                if t.shape != shape {
                    bail!(
                        "{}: tensor {name:?} has shape {:?}, the config implies {shape:?}",
                        dir.display(),
                        t.shape
                    );
                }
                let Some(data) = t.data_f32 else {
                    bail!("{}: tensor {name:?} is not a float tensor", dir.display());
                };
                Tensor::Dense { shape, data }
            };
            tensors.insert(name, t);
        }
        let mut ignored = Vec::new();
        let mut unknown = Vec::new();
        for name in raw.tensors.keys() {
            if dropped(name, config) {
                ignored.push(name.clone());
            } else {
                unknown.push(name.clone());
            }
        }
        if !unknown.is_empty() {
            unknown.sort();
            bail!(
                "{}: {} tensor(s) the config's {} does not have: {}",
                dir.display(),
                unknown.len(),
                config.arch.name(),
                unknown
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        ignored.sort();
        Ok(Weights { tensors, ignored })
    }

    pub fn get(&self, name: &str) -> &Tensor {
        &self.tensors[name]
    }

    pub fn bytes(&self) -> usize {
        self.tensors.values().map(Tensor::bytes).sum()
    }

    /// Row `token` of the embedding table, as f32 (dequantized for a packed
    /// table, as MLX's `dequantize` computes it: `scale * q + bias`).
    pub fn embedding_row(&self, token: usize, out: &mut [f32]) {
        match self.get(EMBED) {
            Tensor::Dense { shape, data } => {
                let h = shape[1];
                out.copy_from_slice(&data[token * h..(token + 1) * h]);
            }
            Tensor::Packed(p) => dequant_row(p, token, out),
        }
    }
}

fn packed_layer(
    dir: &Path,
    raw: &mut rlx_mlx_io::MlxWeights,
    name: &str,
    shape: &[usize],
    q: Quantization,
) -> Result<Tensor> {
    let base = name.trim_end_matches(".weight");
    let (out, inp) = (shape[0], shape[1]);
    let (bits, group) = (q.bits as usize, q.group_size as usize);
    if inp % group != 0 {
        bail!(
            "{}: {name}: {inp} input features are not a multiple of the group size {group}",
            dir.display()
        );
    }
    let want = |suffix: &str, dims: Vec<usize>| -> Result<()> {
        let key = format!("{base}.{suffix}");
        match raw.tensors.get(&key) {
            Some(t) if t.shape == dims => Ok(()),
            Some(t) => Err(Error(format!(
                "{}: {key} has shape {:?}; {bits}-bit groups of {group} of a [{out}, {inp}] layer \
                 make it {dims:?}",
                dir.display(),
                t.shape
            ))),
            None if suffix == "biases" => Err(Error(format!(
                "{}: {key} is missing (affine quantization needs biases)",
                dir.display()
            ))),
            None => Err(Error(format!("{}: {key} is missing", dir.display()))),
        }
    };
    want("weight", vec![out, inp * bits / 32])?;
    want("scales", vec![out, inp / group])?;
    want("biases", vec![out, inp / group])?;
    let p = raw
        .take_packed_linear(name)
        .map_err(|e| Error(format!("{}: {name}: {e:#}", dir.display())))?
        .ok_or_else(|| Error(format!("{}: {name}: not a packed layer", dir.display())))?;
    if p.w_q.len() != out * inp * bits / 8 {
        bail!(
            "{}: {name}: {} packed bytes, a [{out}, {inp}] {bits}-bit layer has {}",
            dir.display(),
            p.w_q.len(),
            out * inp * bits / 8
        );
    }
    Ok(Tensor::Packed(p))
}

fn f32_at(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap())
}

/// Row `r` of a packed layer: each row a little-endian bitstream of
/// `bits`-wide codes along the input features, low bits first.
pub fn dequant_row(p: &MlxPackedLinear, r: usize, out: &mut [f32]) {
    let rlx_ir::QuantScheme::MlxAffine { bits, group_size } = p.scheme else {
        unreachable!("only affine layers are loaded packed")
    };
    let (bits, group) = (bits as usize, group_size as usize);
    let k = p.out_shape[1];
    let row = &p.w_q[r * k * bits / 8..(r + 1) * k * bits / 8];
    let groups = k / group;
    let mask = (1u32 << bits) - 1;
    for (j, o) in out.iter_mut().enumerate().take(k) {
        let bit = j * bits;
        let (byte, shift) = (bit / 8, bit % 8);
        let mut word = row[byte] as u32;
        if byte + 1 < row.len() {
            word |= (row[byte + 1] as u32) << 8;
        }
        let code = (word >> shift) & mask;
        let g = r * groups + j / group;
        *o = f32_at(&p.scales, g) * code as f32 + f32_at(&p.biases, g);
    }
}
