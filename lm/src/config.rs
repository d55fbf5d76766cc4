//! A checkpoint's `config.json`, read and checked: the architectures this
//! crate builds (Llama and Mistral, Qwen3), with every field a graph
//! depends on present and in range. A field that is missing, of the wrong
//! type or asks for something not built here is an error naming the file
//! and the field; nothing is guessed.

use crate::{bail, Error, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// The architectures built here. Mistral is Llama's graph (mlx-lm maps it
/// to the same model code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen3 => "qwen3",
        }
    }

    /// Qwen3 normalises each head of Q and K (RMSNorm over the head
    /// dimension) before the rotary embedding.
    pub fn qk_norm(self) -> bool {
        self == Arch::Qwen3
    }
}

/// How rotary positions are turned into frequencies (`rope_scaling`).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// `base^(-2i/d)` (also `rope_type: "default"`).
    None,
    /// Positions divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3's: low frequencies divided by `factor`, a smooth blend
    /// between `low_freq_factor` and `high_freq_factor` wavelengths.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

/// mlx-lm's affine quantization (`config.json`'s `quantization`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantization {
    pub bits: u32,
    pub group_size: u32,
}

/// What MLX's `quantized_matmul` computes natively (the plugin runs
/// nothing else for these checkpoints: weights stay packed).
pub const NATIVE_BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];
pub const NATIVE_GROUPS: [u32; 3] = [32, 64, 128];

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    /// MLX's `traditional` RoPE: pairs `(2i, 2i+1)` (rlx's GptJ style)
    /// rather than `(i, i + d/2)` (NeoX).
    pub rope_traditional: bool,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: Option<usize>,
    pub quantization: Option<Quantization>,
    /// `eos_token_id` (one id or a list): where a generation stops unless
    /// told to ignore it.
    pub eos_token_ids: Vec<u32>,
}

/// Reads one `config.json` object, naming its path in every error.
struct Fields<'a> {
    file: &'a str,
    map: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn err(&self, field: &str, what: impl std::fmt::Display) -> Error {
        Error(format!("{}: field {field:?}: {what}", self.file))
    }

    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    fn count(&self, field: &str) -> Result<Option<usize>> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        match v.as_u64() {
            Some(0) => Err(self.err(field, "must be at least 1")),
            // A dimension past i32 is past what any backend indexes.
            Some(n) if n > i32::MAX as u64 => Err(self.err(field, format!("{n} is too large"))),
            Some(n) => Ok(Some(n as usize)),
            None => Err(self.err(field, format!("expected a positive integer, found {v}"))),
        }
    }

    fn required_count(&self, field: &str) -> Result<usize> {
        self.count(field)?
            .ok_or_else(|| self.err(field, "missing (required)"))
    }

    fn number(&self, field: &str) -> Result<Option<f64>> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        match v.as_f64() {
            Some(x) if x.is_finite() => Ok(Some(x)),
            _ => Err(self.err(field, format!("expected a finite number, found {v}"))),
        }
    }

    fn flag(&self, field: &str) -> Result<Option<bool>> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        v.as_bool()
            .map(Some)
            .ok_or_else(|| self.err(field, format!("expected true or false, found {v}")))
    }
}

impl ModelConfig {
    /// `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<ModelConfig> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error(format!("{}: cannot read: {e}", path.display())))?;
        ModelConfig::parse(&text, &path.display().to_string())
    }

    /// The JSON text of a `config.json`; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<ModelConfig> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error(format!("{file}: not valid JSON: {e}")))?;
        let Some(map) = v.as_object() else {
            bail!("{file}: expected a JSON object");
        };
        let f = Fields { file, map };
        let arch = match f.get("model_type").and_then(Value::as_str) {
            Some("llama" | "mistral") => Arch::Llama,
            Some("qwen3") => Arch::Qwen3,
            Some(other) => {
                return Err(f.err(
                    "model_type",
                    format!("{other:?} is not built here (llama, mistral, qwen3)"),
                ))
            }
            None => return Err(f.err("model_type", "missing (required)")),
        };
        let hidden_size = f.required_count("hidden_size")?;
        let num_heads = f.required_count("num_attention_heads")?;
        let num_kv_heads = f.count("num_key_value_heads")?.unwrap_or(num_heads);
        if num_heads % num_kv_heads != 0 {
            return Err(f.err(
                "num_key_value_heads",
                format!("{num_kv_heads} does not divide num_attention_heads {num_heads}"),
            ));
        }
        let head_dim = match (f.count("head_dim")?, arch) {
            (Some(d), _) => d,
            (None, Arch::Qwen3) => return Err(f.err("head_dim", "missing (required for qwen3)")),
            (None, Arch::Llama) => {
                if hidden_size % num_heads != 0 {
                    return Err(f.err(
                        "head_dim",
                        format!(
                            "missing, and hidden_size {hidden_size} is not a multiple of \
                             num_attention_heads {num_heads}"
                        ),
                    ));
                }
                hidden_size / num_heads
            }
        };
        if head_dim % 2 != 0 {
            return Err(f.err(
                "head_dim",
                format!("{head_dim} is odd (rotary pairs need it even)"),
            ));
        }
        let eps = f
            .number("rms_norm_eps")?
            .ok_or_else(|| f.err("rms_norm_eps", "missing (required)"))?;
        if eps <= 0.0 {
            return Err(f.err("rms_norm_eps", "must be positive"));
        }
        let rope_theta = rope_theta(&f, arch)?;
        let rope_scaling = rope_scaling(&f)?;
        for unbuilt in ["attention_bias", "mlp_bias"] {
            if f.flag(unbuilt)? == Some(true) {
                return Err(f.err(
                    unbuilt,
                    "true is not built here (projections without biases only)",
                ));
            }
        }
        if let Some(types) = f.get("layer_types") {
            let all_full = types
                .as_array()
                .is_some_and(|a| a.iter().all(|t| t.as_str() == Some("full_attention")));
            if !all_full {
                return Err(f.err(
                    "layer_types",
                    "only \"full_attention\" layers are built here",
                ));
            }
        }
        let tie_word_embeddings = match (f.flag("tie_word_embeddings")?, arch) {
            (Some(t), _) => t,
            // mlx-lm's Llama ModelArgs default; its Qwen3 requires the field.
            (None, Arch::Llama) => true,
            (None, Arch::Qwen3) => {
                return Err(f.err("tie_word_embeddings", "missing (required for qwen3)"))
            }
        };
        Ok(ModelConfig {
            arch,
            vocab_size: f.required_count("vocab_size")?,
            hidden_size,
            intermediate_size: f.required_count("intermediate_size")?,
            num_layers: f.required_count("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: eps,
            rope_theta,
            rope_scaling,
            rope_traditional: f.flag("rope_traditional")?.unwrap_or(false),
            tie_word_embeddings,
            max_position_embeddings: f.count("max_position_embeddings")?,
            quantization: quantization(&f)?,
            eos_token_ids: eos_ids(&f)?,
        })
    }

    /// Elements of one cached row of K (or V): every KV head of one token.
    pub fn kv_row(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// The config as mlx-lm writes it, for the checkpoint generator.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("model_type", self.arch.name().into());
        put(
            "architectures",
            vec![match self.arch {
                Arch::Llama => "LlamaForCausalLM",
                Arch::Qwen3 => "Qwen3ForCausalLM",
            }]
            .into(),
        );
        put("vocab_size", self.vocab_size.into());
        put("hidden_size", self.hidden_size.into());
        put("intermediate_size", self.intermediate_size.into());
        put("num_hidden_layers", self.num_layers.into());
        put("num_attention_heads", self.num_heads.into());
        put("num_key_value_heads", self.num_kv_heads.into());
        put("head_dim", self.head_dim.into());
        put("rms_norm_eps", self.rms_norm_eps.into());
        put("rope_theta", self.rope_theta.into());
        put("rope_traditional", self.rope_traditional.into());
        put("tie_word_embeddings", self.tie_word_embeddings.into());
        put("attention_bias", false.into());
        put("mlp_bias", false.into());
        if let Some(n) = self.max_position_embeddings {
            put("max_position_embeddings", n.into());
        }
        match self.eos_token_ids.as_slice() {
            [] => {}
            [one] => put("eos_token_id", (*one).into()),
            many => put("eos_token_id", many.to_vec().into()),
        }
        match &self.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => put(
                "rope_scaling",
                serde_json::json!({"rope_type": "linear", "factor": factor}),
            ),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => put(
                "rope_scaling",
                serde_json::json!({
                    "rope_type": "llama3",
                    "factor": factor,
                    "low_freq_factor": low_freq_factor,
                    "high_freq_factor": high_freq_factor,
                    "original_max_position_embeddings": original_max_position_embeddings,
                }),
            ),
        }
        if let Some(q) = self.quantization {
            put(
                "quantization",
                serde_json::json!({"group_size": q.group_size, "bits": q.bits, "mode": "affine"}),
            );
        }
        Value::Object(m)
    }
}

fn eos_ids(f: &Fields) -> Result<Vec<u32>> {
    let field = "eos_token_id";
    let one = |v: &Value| {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| f.err(field, format!("expected token ids, found {v}")))
    };
    match f.get(field) {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

fn rope_theta(f: &Fields, arch: Arch) -> Result<f64> {
    let nested = match f.get("rope_parameters") {
        Some(Value::Object(p)) => p.get("rope_theta").and_then(Value::as_f64),
        _ => None,
    };
    let theta = match (f.number("rope_theta")?, nested, arch) {
        (Some(t), _, _) | (None, Some(t), _) => t,
        (None, None, Arch::Llama) => 10_000.0,
        (None, None, Arch::Qwen3) => {
            return Err(f.err("rope_theta", "missing (required for qwen3)"))
        }
    };
    if theta <= 0.0 {
        return Err(f.err("rope_theta", "must be positive"));
    }
    Ok(theta)
}

fn rope_scaling(f: &Fields) -> Result<RopeScaling> {
    let Some(v) = f.get("rope_scaling") else {
        return Ok(RopeScaling::None);
    };
    let field = "rope_scaling";
    let Some(s) = v.as_object() else {
        return Err(f.err(field, format!("expected an object, found {v}")));
    };
    let kind = s
        .get("type")
        .or_else(|| s.get("rope_type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let num = |k: &str, default: Option<f64>| -> Result<f64> {
        match s.get(k) {
            Some(x) => x
                .as_f64()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| f.err(field, format!("{k}: expected a positive number, found {x}"))),
            None => {
                default.ok_or_else(|| f.err(field, format!("{k}: missing (required for {kind})")))
            }
        }
    };
    match kind {
        "default" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear {
            factor: num("factor", None)?,
        }),
        "llama3" => {
            let s = RopeScaling::Llama3 {
                factor: num("factor", None)?,
                low_freq_factor: num("low_freq_factor", Some(1.0))?,
                high_freq_factor: num("high_freq_factor", Some(4.0))?,
                original_max_position_embeddings: num(
                    "original_max_position_embeddings",
                    Some(8192.0),
                )?,
            };
            if let RopeScaling::Llama3 {
                low_freq_factor: lo,
                high_freq_factor: hi,
                ..
            } = s
            {
                if hi <= lo {
                    return Err(f.err(field, "high_freq_factor must exceed low_freq_factor"));
                }
            }
            Ok(s)
        }
        other => Err(f.err(
            field,
            format!("rope type {other:?} is not built here (default, linear, llama3)"),
        )),
    }
}

fn quantization(f: &Fields) -> Result<Option<Quantization>> {
    let field = "quantization";
    let Some(v) = f.get(field) else {
        return Ok(None);
    };
    let Some(q) = v.as_object() else {
        return Err(f.err(field, format!("expected an object, found {v}")));
    };
    if let Some(layer) = q
        .keys()
        .find(|k| !matches!(k.as_str(), "group_size" | "bits" | "mode"))
    {
        return Err(f.err(
            field,
            format!("per-layer settings ({layer:?}) are not run here: one group size and bit width for every layer"),
        ));
    }
    match q.get("mode").and_then(Value::as_str).unwrap_or("affine") {
        "affine" => {}
        other => {
            return Err(f.err(
                field,
                format!("mode {other:?} is not run natively (affine only: MLX's quantized_matmul on packed weights)"),
            ))
        }
    }
    let int = |k: &str| -> Result<u32> {
        q.get(k)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| f.err(field, format!("{k}: missing or not a positive integer")))
    };
    let (bits, group_size) = (int("bits")?, int("group_size")?);
    if !NATIVE_BITS.contains(&bits) {
        return Err(f.err(
            field,
            format!(
                "bits {bits} is not run natively (MLX's quantized_matmul takes {NATIVE_BITS:?})"
            ),
        ));
    }
    if !NATIVE_GROUPS.contains(&group_size) {
        return Err(f.err(
            field,
            format!(
                "group_size {group_size} is not run natively (MLX's quantized_matmul takes {NATIVE_GROUPS:?})"
            ),
        ));
    }
    Ok(Some(Quantization { bits, group_size }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama() -> Value {
        serde_json::json!({
            "model_type": "llama", "vocab_size": 100, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5
        })
    }

    fn parse(v: &Value) -> Result<ModelConfig> {
        ModelConfig::parse(&v.to_string(), "m/config.json")
    }

    #[test]
    fn defaults_follow_mlx_lm_for_llama() {
        let c = parse(&llama()).unwrap();
        assert_eq!(
            (c.head_dim, c.rope_theta, c.tie_word_embeddings),
            (16, 10_000.0, true)
        );
        assert_eq!(c.quantization, None);
        assert_eq!(
            parse(&c.to_json()).unwrap(),
            c,
            "to_json reads back the same"
        );
    }

    #[test]
    fn bad_fields_are_named_with_the_file() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("model_type", "gpt2".into(), "\"gpt2\" is not built here"),
            ("hidden_size", Value::Null, "missing"),
            ("num_key_value_heads", 3.into(), "does not divide"),
            ("vocab_size", (-1).into(), "positive integer"),
            ("attention_bias", true.into(), "not built here"),
            (
                "rope_scaling",
                serde_json::json!({"rope_type": "yarn", "factor": 2}),
                "\"yarn\"",
            ),
            (
                "quantization",
                serde_json::json!({"bits": 4, "group_size": 64, "mode": "mxfp4"}),
                "not run natively",
            ),
            (
                "quantization",
                serde_json::json!({"bits": 7, "group_size": 64}),
                "bits 7",
            ),
            (
                "quantization",
                serde_json::json!({"bits": 4, "group_size": 64, "model.embed_tokens": {"bits": 8}}),
                "per-layer",
            ),
        ];
        for (field, value, want) in cases {
            let mut v = llama();
            v[field] = value;
            let e = parse(&v).unwrap_err().0;
            assert!(e.starts_with("m/config.json: field "), "{e}");
            assert!(
                e.contains(&format!("{field:?}")) && e.contains(want),
                "{field}: {e}"
            );
        }
        let mut q = llama();
        q["model_type"] = "qwen3".into();
        let e = parse(&q).unwrap_err().0;
        assert!(
            e.contains("\"head_dim\": missing (required for qwen3)"),
            "{e}"
        );
    }
}
