//! `rlx-host generate DIR`: text from a Llama or Qwen3 checkpoint
//! directory (`rlx_lm`), on a plugin or rlx-runtime's CPU backend; and
//! `rlx-host checkpoint DIR`: a random-weight checkpoint to try it on.

use clap::Args;
use rlx_lm::engine::{Engine, HostEngine, Model};
use rlx_lm::generate::{generate, Generation, Options};
use rlx_lm::plugin_engine::{Client, PluginEngine};
use rlx_plugin_api::Mode;
use rlx_runtime::Device;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// The device a plugin backend is registered for (as `rlx-host run`).
const PLUGIN_DEVICE: Device = Device::Mlx;

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    /// The checkpoint directory: config.json, *.safetensors, and
    /// tokenizer.json for a text prompt.
    pub model: PathBuf,
    /// The prompt as text (needs the directory's tokenizer.json).
    #[arg(long, conflicts_with = "prompt_ids")]
    pub prompt: Option<String>,
    /// The prompt as token ids, comma-separated (no tokenizer needed).
    #[arg(long, value_name = "IDS")]
    pub prompt_ids: Option<String>,
    /// Tokens to generate.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling: keep the most likely tokens up to this mass.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep only the k most likely tokens (with a temperature).
    #[arg(long)]
    pub top_k: Option<u32>,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 1)]
    pub seed: u32,
    /// Generate max-tokens tokens even past the end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// A loaded plugin's name (`mlx`), or `cpu` for rlx-runtime's CPU
    /// backend (the caches then cross to the host every step).
    #[arg(long, default_value = "mlx")]
    pub backend: String,
    /// The plugin's execution mode: lazy, eager, compiled, or auto:
    /// compiled on a GPU (the decode step's elementwise ops fused into a
    /// few kernels), lazy on the CPU (as fast per token there, without
    /// compiled mode's copy of the weights while it records its plan).
    #[arg(long, default_value = "auto")]
    pub mode: String,
    /// How the decode graph is compiled: `reuse` (once) or `rebuild`
    /// (built and compiled every step, the backend recognising it).
    #[arg(long, default_value = "reuse")]
    pub client: String,
    /// Print one JSON object at the end instead of the text and a summary.
    #[arg(long)]
    pub json: bool,
}

/// What `generate` reports.
pub struct Report {
    pub backend: String,
    pub generation: Generation,
    pub text: Option<String>,
    pub peak_bytes: Option<u64>,
}

impl Report {
    pub fn to_json(&self) -> serde_json::Value {
        let g = &self.generation;
        let c = &g.counters;
        let steps = c.decode_steps.max(1);
        serde_json::json!({
            "backend": self.backend,
            "tokens": g.tokens,
            "text": self.text,
            "prompt_tokens": g.prompt_tokens,
            "capacity": g.capacity,
            "prefill_rows": g.prefill_rows,
            "compile_ms": g.compile_ms,
            "prefill_ms": g.prefill_ms,
            "prefill_tokens_per_s": g.prompt_tokens as f64 / (g.prefill_ms / 1e3),
            "decode_ms_per_token": g.decode_ms_per_token,
            "compiles": c.compiles,
            "reused": c.reused,
            "decode_bytes_in_per_step": c.decode_bytes_in / steps,
            "decode_bytes_out_per_step": c.decode_bytes_out / steps,
            "peak_bytes": self.peak_bytes,
        })
    }

    pub fn summary(&self) -> String {
        let g = &self.generation;
        let c = &g.counters;
        let steps = c.decode_steps.max(1);
        format!(
            "{}: prefill {} tokens in {:.2} ms ({:.0} tokens/s); decode {:.3} ms/token ({:.1} tokens/s) \
             over {} tokens; {} compile(s) ({:.0} ms), {} reused; {} B to and {} B from the backend \
             per decode step; peak memory {}",
            self.backend,
            g.prompt_tokens,
            g.prefill_ms,
            g.prompt_tokens as f64 / (g.prefill_ms / 1e3),
            g.decode_ms_per_token,
            1e3 / g.decode_ms_per_token,
            g.tokens.len(),
            c.compiles,
            g.compile_ms,
            c.reused,
            c.decode_bytes_in / steps,
            c.decode_bytes_out / steps,
            self.peak_bytes
                .map_or("not reported".into(), |b| format!("{:.1} MB", b as f64 / 1e6)),
        )
    }
}

fn prompt_ids(
    args: &GenerateArgs,
    tok: Option<&rlx_text::TokenizerHandle>,
) -> Result<Vec<u32>, String> {
    match (&args.prompt, &args.prompt_ids, tok) {
        (_, Some(ids), _) => ids
            .split(',')
            .map(|t| {
                t.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("--prompt-ids: {t:?} is not a token id"))
            })
            .collect(),
        (Some(text), None, Some(tok)) => tok.encode(text, true).map_err(|e| e.to_string()),
        (Some(_), None, None) => Err(format!(
            "{}: no tokenizer.json for a text prompt; give --prompt-ids instead",
            args.model.display()
        )),
        (None, None, _) => Err("give a prompt: --prompt TEXT or --prompt-ids 1,2,3".into()),
    }
}

/// The engine for `backend` (`cpu`, or a plugin's name with its `mode`
/// and `client`), with the plugin installed.
pub fn engine(
    backend: &str,
    mode: &str,
    client: &str,
    model: Arc<Model>,
    plugins: &[PathBuf],
) -> Result<Box<dyn Engine>, String> {
    if backend == "cpu" {
        return Ok(Box::new(HostEngine::new(model, Device::Cpu)));
    }
    let named = match mode {
        "auto" => None,
        m => Some(
            Mode::from_name(m)
                .ok_or_else(|| format!("unknown mode {m:?} (lazy, eager, compiled or auto)"))?,
        ),
    };
    let installed = rlx_plugin_host::install(&rlx_plugin_host::Options {
        plugins: plugins.to_vec(),
        backend: backend.to_string(),
        device: PLUGIN_DEVICE,
        mode: named.unwrap_or(Mode::Lazy),
        ..Default::default()
    })?;
    // The plugin's default device is the first it lists.
    let on_gpu = installed
        .plugin
        .descriptor()
        .device_infos
        .first()
        .is_some_and(|d| d.kind == rlx_plugin_api::DeviceKind::Gpu);
    let mode = named.unwrap_or(if on_gpu { Mode::Compiled } else { Mode::Lazy });
    let client = Client::parse(client).map_err(|e| e.to_string())?;
    Ok(Box::new(PluginEngine::new(
        model,
        PLUGIN_DEVICE,
        mode,
        client,
    )))
}

pub fn run(args: &GenerateArgs, plugins: &[PathBuf]) -> Result<Report, String> {
    let model = Arc::new(Model::load(&args.model).map_err(|e| e.to_string())?);
    let tok_path = args.model.join("tokenizer.json");
    let tok = if tok_path.is_file() {
        Some(rlx_text::load_tokenizer(&tok_path).map_err(|e| format!("{e:#}"))?)
    } else {
        None
    };
    let prompt = prompt_ids(args, tok.as_ref())?;
    let sampling = (args.temperature > 0.0).then(|| {
        let mut s = rlx_text::SampleOpts::nucleus(args.temperature, args.top_p);
        s.top_k = args.top_k;
        s
    });
    let opts = Options {
        max_tokens: args.max_tokens,
        sampling,
        seed: args.seed,
        stop: if args.ignore_eos {
            Vec::new()
        } else {
            model.config.eos_token_ids.clone()
        },
        logprobs: false,
    };
    let mut engine = engine(
        &args.backend,
        &args.mode,
        &args.client,
        model.clone(),
        plugins,
    )?;
    let mut detok = tok
        .as_ref()
        .map(|t| rlx_text::StreamingDetokenizer::new(t, true));
    let mut out = std::io::stdout();
    let stream = !args.json;
    let mut failed = None;
    let generation = generate(engine.as_mut(), &model, &prompt, &opts, |t| {
        if stream {
            let piece = match detok.as_mut() {
                Some(d) => d.push(t).map_err(|e| e.to_string()),
                None => Ok(format!("{t} ")),
            };
            match piece {
                Ok(p) => {
                    let _ = out.write_all(p.as_bytes());
                    let _ = out.flush();
                }
                Err(e) => {
                    failed = Some(e);
                    return false;
                }
            }
        }
        true
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = failed {
        return Err(format!("detokenizing: {e}"));
    }
    if stream {
        if let Some(d) = detok.as_mut() {
            let _ = out.write_all(d.finish().unwrap_or_default().as_bytes());
        }
        let _ = out.write_all(b"\n");
    }
    let text = match &tok {
        Some(t) => Some(
            t.decode(&generation.tokens, true)
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    Ok(Report {
        backend: engine.name(),
        peak_bytes: engine.peak_bytes(),
        generation,
        text,
    })
}

#[derive(Args, Debug, Clone)]
pub struct CheckpointArgs {
    /// The directory to write (created if missing).
    pub dir: PathBuf,
    /// The architecture: llama or qwen3.
    #[arg(long, default_value = "llama")]
    pub arch: String,
    /// tiny (~1 M parameters), small (~20 M) or medium (~150 M).
    #[arg(long, default_value = "tiny")]
    pub size: String,
    /// How float tensors are stored: f32 or bf16.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Quantize every linear layer and the embedding to this many bits
    /// (mlx-lm's affine layout, groups of --group-size).
    #[arg(long)]
    pub bits: Option<u32>,
    #[arg(long, default_value_t = 64)]
    pub group_size: u32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn checkpoint(args: &CheckpointArgs) -> Result<(), String> {
    use rlx_lm::config::{Arch, Quantization};
    use rlx_lm::synth::{write, Precision, Size, Spec};
    let arch = match args.arch.as_str() {
        "llama" => Arch::Llama,
        "qwen3" => Arch::Qwen3,
        a => return Err(format!("unknown --arch {a:?} (llama, qwen3)")),
    };
    let precision = match args.dtype.as_str() {
        "f32" => Precision::F32,
        "bf16" => Precision::Bf16,
        d => return Err(format!("unknown --dtype {d:?} (f32, bf16)")),
    };
    let spec = Spec {
        arch,
        size: Size::parse(&args.size).map_err(|e| e.to_string())?,
        precision,
        quantization: args.bits.map(|bits| Quantization {
            bits,
            group_size: args.group_size,
        }),
        seed: args.seed,
    };
    let c = write(&args.dir, &spec).map_err(|e| e.to_string())?;
    let params = rlx_lm::weights::expected(&c)
        .iter()
        .map(|(_, s, _)| s.iter().product::<usize>())
        .sum::<usize>();
    println!(
        "{}: {} {} ({:.1} M parameters, {}{})",
        args.dir.display(),
        c.arch.name(),
        args.size,
        params as f64 / 1e6,
        args.dtype,
        args.bits.map_or(String::new(), |b| format!(
            ", {b}-bit groups of {}",
            args.group_size
        )),
    );
    Ok(())
}
