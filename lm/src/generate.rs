//! Text generation on an [`Engine`]: the prompt's prefill, then one decode
//! step per token, greedy or sampled, timed as mlx-lm's benchmark times
//! it.
//!
//! Sizes are chosen so that a generation compiles a bounded number of
//! graphs: the caches hold `capacity` rows, the prompt and the tokens to
//! generate rounded up to a multiple of 256 (mlx-lm grows its cache in
//! steps of 256), and the prompt is padded at its end to a multiple of 16
//! rows. One decode graph per capacity, one prefill graph per padded
//! length: two compiles for a generation of up to 256 tokens after a
//! prompt.

use crate::engine::{Counters, Engine, Model};
use crate::graph::ambiguous_prefill;
use crate::{bail, Result};
use rlx_text::SampleOpts;
use std::time::Instant;

/// Cache rows are allocated in steps of this many.
pub const CAPACITY_STEP: usize = 256;
/// Prompts are padded to a multiple of this many rows.
pub const PREFILL_STEP: usize = 16;

#[derive(Clone, Debug)]
pub struct Options {
    pub max_tokens: usize,
    /// Greedy when `None` (or a temperature of 0).
    pub sampling: Option<SampleOpts>,
    /// Seed of the sampler.
    pub seed: u32,
    /// Token ids that end the generation (the tokenizer's end of sequence);
    /// empty: generate `max_tokens`.
    pub stop: Vec<u32>,
    /// Keep each step's log probabilities (the logits are then read back
    /// every step).
    pub logprobs: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_tokens: 32,
            sampling: None,
            seed: 1,
            stop: Vec::new(),
            logprobs: false,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// Per generated token, `logits - logsumexp(logits)` (`Options::logprobs`).
    pub logprobs: Vec<Vec<f32>>,
    /// Compiling for this generation's sizes (zero when nothing was new).
    pub compile_ms: f64,
    /// From the start of the prefill to the first token on the host.
    pub prefill_ms: f64,
    /// From the first token to the last, per token after the first.
    pub decode_ms_per_token: f64,
    pub prompt_tokens: usize,
    pub capacity: usize,
    pub prefill_rows: usize,
    pub counters: Counters,
}

/// Cache rows for a prompt of `prompt` tokens and `max_tokens` more.
pub fn capacity(prompt: usize, max_tokens: usize) -> usize {
    (prompt + max_tokens).div_ceil(CAPACITY_STEP).max(1) * CAPACITY_STEP
}

/// Rows of the prefill graph for a prompt of `prompt` tokens: a multiple of
/// [`PREFILL_STEP`], never the head count (an Attention node of that many
/// rows could be read in either layout), never past `cap`.
pub fn prefill_rows(model: &Model, prompt: usize, cap: usize) -> usize {
    let mut len = prompt.div_ceil(PREFILL_STEP) * PREFILL_STEP;
    if ambiguous_prefill(&model.config, len) {
        len += PREFILL_STEP;
    }
    if len > cap {
        len = prompt;
        if ambiguous_prefill(&model.config, len) {
            len += 1;
        }
    }
    len.min(cap)
}

fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let lse = max + sum.ln() as f32;
    logits.iter().map(|&x| x - lse).collect()
}

/// Generate after `prompt`; `on_token` sees each token as it is chosen and
/// returns false to stop.
pub fn generate(
    engine: &mut dyn Engine,
    model: &Model,
    prompt: &[u32],
    opts: &Options,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<Generation> {
    let c = &model.config;
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    if let Some(t) = prompt.iter().find(|&&t| t as usize >= c.vocab_size) {
        bail!(
            "prompt token {t} is outside the vocabulary (0 .. {})",
            c.vocab_size
        );
    }
    if opts.max_tokens == 0 {
        bail!("max_tokens must be at least 1");
    }
    let cap = capacity(prompt.len(), opts.max_tokens);
    if let Some(max) = c.max_position_embeddings {
        if prompt.len() + opts.max_tokens > max {
            bail!(
                "{} prompt tokens and {} more exceed the model's max_position_embeddings ({max})",
                prompt.len(),
                opts.max_tokens
            );
        }
    }
    let len = prefill_rows(model, prompt.len(), cap);
    let sampling = opts.sampling.as_ref().filter(|s| !s.is_greedy());
    let want_logits = sampling.is_some() || opts.logprobs;
    let h = c.hidden_size;

    let t = Instant::now();
    engine.prepare(cap, len)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;

    let mut rng = opts.seed.max(1);
    let mut history: Vec<u32> = prompt.to_vec();
    let mut logprobs = Vec::new();
    let mut choose = |out: crate::engine::StepOut, history: &[u32]| -> u32 {
        if let Some(l) = &out.logits {
            if opts.logprobs {
                logprobs.push(log_softmax(l));
            }
        }
        match (sampling, &out.logits) {
            (Some(s), Some(l)) => rlx_text::sample_next(l, history, s, &mut rng),
            _ => out.token,
        }
    };

    let start = Instant::now();
    let mut x = vec![0f32; len * h];
    for (i, &tok) in prompt.iter().enumerate() {
        model
            .weights
            .embedding_row(tok as usize, &mut x[i * h..(i + 1) * h]);
    }
    let out = engine.prefill(&x, len, prompt.len() - 1, want_logits)?;
    let mut token = choose(out, &history);
    let first = Instant::now();
    let prefill_ms = (first - start).as_secs_f64() * 1e3;
    let mut tokens = vec![token];
    let mut last = first;
    let mut go = on_token(token) && !opts.stop.contains(&token);
    let pos = |k: usize| prompt.len() + k - 1;
    if sampling.is_none() && !opts.logprobs && engine.chains_greedy() {
        // Steps in flight: the next one starts before this one's token is
        // read, so the host's work overlaps the device's.
        const DEPTH: usize = 2;
        let mut started = 0;
        while go && tokens.len() < opts.max_tokens {
            while started < DEPTH && tokens.len() + started < opts.max_tokens {
                engine.submit_greedy(pos(tokens.len() + started))?;
                started += 1;
            }
            token = engine.wait_greedy()?;
            started -= 1;
            last = Instant::now();
            tokens.push(token);
            go = on_token(token) && !opts.stop.contains(&token);
        }
        // A stop leaves steps started past it: their tokens are dropped.
        for _ in 0..started {
            engine.wait_greedy()?;
        }
    }
    while go && tokens.len() < opts.max_tokens {
        history.push(token);
        let out = engine.decode(token, pos(tokens.len()), want_logits)?;
        token = choose(out, &history);
        last = Instant::now();
        tokens.push(token);
        go = on_token(token) && !opts.stop.contains(&token);
    }
    let steps = tokens.len().saturating_sub(1).max(1);
    Ok(Generation {
        decode_ms_per_token: (last - first).as_secs_f64() * 1e3 / steps as f64,
        tokens,
        logprobs,
        compile_ms,
        prefill_ms,
        prompt_tokens: prompt.len(),
        capacity: cap,
        prefill_rows: len,
        counters: engine.counters(),
    })
}
