//! The command line of `rlx-host bench`.

use std::path::PathBuf;

/// The help of MODEL (a test checks it names every `builtins::NAMES`).
const MODEL_HELP: &str = "A checkpoint directory (config.json and safetensors: language-model generation against mlx-lm), a `.rlxmodel` file, or a builtin model: mlp, mlp-bf16, matmuls, gelu, add-broadcast, exp4, transformer, decoder-s1, decoder-s128, lstm, scan1000, mlp-train, params-1g, pocketfft, pocketfft-op, pocketfft-rows, transfer";

/// `rlx-host bench MODEL [--runs N] [--warmup N] [--backends LIST] [--json] [--peers]`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    #[arg(help = MODEL_HELP)]
    pub model: String,
    /// Timed runs per backend (after the first run and the warm-up runs).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Untimed runs between the first run and the timed ones.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Comma-separated backends: `cpu` (rlx-runtime's CPU backend),
    /// `NAME:lazy`, `NAME:eager`, `NAME:compiled` for a loaded plugin, or
    /// `NAME` for all three of its modes; `+cpu` after a plugin entry
    /// (`mlx:lazy+cpu`) measures it in a process where the CPU backend
    /// ran the model first. Default: `cpu,mlx`.
    #[arg(long, value_name = "LIST")]
    pub backends: Option<String>,
    /// Seconds one backend's child process may take (compile, every run,
    /// the outputs); beyond it the child is killed and its row fails.
    #[arg(long, default_value_t = 600.0, value_name = "SECS", value_parser = positive_secs)]
    pub timeout: f64,
    /// Seed of the random inputs and params.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also time the same builtin graph in Python (MLX eager, MLX
    /// `mx.compile`, PyTorch eager) with scripts/bench_peers.py.
    #[arg(long)]
    pub peers: bool,
    /// Checkpoints: the decode clients to measure, comma-separated:
    /// `reuse` (one decode graph, compiled once), `rebuild` (built and
    /// compiled every step). Default: `reuse`.
    #[arg(long, value_name = "LIST")]
    pub clients: Option<String>,
    /// Checkpoints: prompt tokens (random, seeded).
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Checkpoints: tokens generated per trial (greedy, end of sequence
    /// ignored).
    #[arg(long, default_value_t = 128)]
    pub generation_tokens: usize,
    /// Checkpoints: timed generations per process, after one warm-up.
    #[arg(long, default_value_t = 5)]
    pub trials: usize,
    /// Checkpoints: how many times every entry and the peer are measured,
    /// alternated, each round's figure compared with the peer's.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Internal: measure this one backend in this process and print one
    /// JSON line (the parent process starts one child per backend).
    #[arg(long, hide = true, value_name = "BACKEND")]
    pub child: Option<String>,
    /// Internal: where a child writes its outputs for the parent's
    /// comparison against the CPU backend.
    #[arg(long, hide = true, value_name = "FILE", requires = "child")]
    pub child_outputs: Option<PathBuf>,
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_help_names_every_builtin() {
        for n in super::super::builtins::NAMES {
            assert!(super::MODEL_HELP.contains(n), "{n}");
        }
    }
}
