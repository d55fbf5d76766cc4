//! Language models on the MLX plugin (`rlx_lm`): random-weight checkpoints
//! of both architectures (Llama, Qwen3) in each layout (f32, bf16, mlx-lm's
//! 4-bit affine with groups of 64), greedy for 32 tokens.
//!
//! References, both independent of the plugin:
//! - rlx-runtime's CPU backend running the same graphs (its KV caches
//!   through the host): the same tokens, and each step's log
//!   probabilities within 1e-4 (absolute; f32 arithmetic in another order);
//! - mlx-lm 0.32.2's own model code and generation loop under Python MLX
//!   (`scripts/mlx_lm_peer.py`): the same tokens, log probabilities within
//!   1e-3 (MLX's own kernels, rotary angles in f32 where rlx-lm computes
//!   them in f64). A bf16 checkpoint is compared with mlx-lm computing in
//!   f32 (`--float32`), as rlx-lm computes: both widen the same bf16
//!   weights. Without Python MLX and mlx-lm the comparison is skipped,
//!   saying so, unless `RLX_REQUIRE_MLX_LM=1` (CI), where it fails.
//!
//! Also: the plugin keeps the caches and the token on its device (a decode
//! step sends a position, and the token when it was sampled on the host,
//! and reads one token back), greedy steps submitted ahead of the token
//! read choose the tokens the one-at-a-time steps choose, a generation
//! compiles two graphs, and a client that builds and compiles its decode
//! graph every step gets the plugin's compile cache instead of a compile
//! each time.

use rlx_lm::config::{Arch, Quantization};
use rlx_lm::engine::{Engine, HostEngine, Model};
use rlx_lm::generate::{generate, Generation, Options};
use rlx_lm::plugin_engine::{Client, PluginEngine};
use rlx_lm::synth::{self, Precision, Size, Spec};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::register_plugin_backend;
use rlx_plugin_tests::parity::mlx;
use rlx_runtime::Device;
use std::path::Path;
use std::sync::Arc;

const STEPS: usize = 32;

/// One test at a time: the compile cache, whose hits the tests count, is
/// the process's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
const PROMPT: [u32; 7] = [5, 17, 2, 40, 11, 300, 7];

fn checkpoint(dir: &Path, arch: Arch, precision: Precision, bits: Option<u32>) -> Arc<Model> {
    synth::write(
        dir,
        &Spec {
            arch,
            size: Size::Tiny,
            precision,
            quantization: bits.map(|bits| Quantization {
                bits,
                group_size: 64,
            }),
            seed: 3,
        },
    )
    .unwrap();
    Arc::new(Model::load(dir).unwrap())
}

/// Greedy with each step's log probabilities: the logits read back every
/// step, so one step at a time.
fn run(engine: &mut dyn Engine, model: &Model) -> Generation {
    let opts = Options {
        max_tokens: STEPS,
        logprobs: true,
        ..Options::default()
    };
    generate(engine, model, &PROMPT, &opts, |_| true).unwrap()
}

/// Greedy, tokens only: steps chained on the device where the engine can.
fn run_chained(engine: &mut dyn Engine, model: &Model, opts: Options) -> Generation {
    generate(engine, model, &PROMPT, &opts, |_| true).unwrap()
}

fn plugin(model: &Arc<Model>, mode: Mode, client: Client) -> PluginEngine {
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    PluginEngine::new(model.clone(), Device::Mlx, mode, client)
}

fn assert_logprobs(what: &str, got: &[Vec<f32>], want: &[Vec<f32>], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: steps");
    for (s, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: step {s}: vocabulary");
        let worst = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= tol,
            "{what}: step {s}: log probabilities differ by {worst} (> {tol})"
        );
    }
}

/// mlx-lm's tokens and log probabilities, or why there are none.
fn mlx_lm(dir: &Path, float32: bool) -> Result<(Vec<u32>, Vec<Vec<f32>>), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mlx_lm_peer.py");
    let probe = std::process::Command::new("python3")
        // mlx_lm's top package imports transformers, which its model
        // code does not need (the script stands in for it): found, not
        // imported.
        .args([
            "-c",
            "import mlx.core, importlib.util as u; assert u.find_spec('mlx_lm')",
        ])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        _ => return Err("python3 with mlx and mlx_lm is not installed (pip install 'mlx[cpu]==0.32.4'; pip install --no-deps mlx-lm==0.32.2)".into()),
    }
    let ids: Vec<String> = PROMPT.iter().map(u32::to_string).collect();
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(&script)
        .arg("tokens")
        .arg(dir)
        .args(["--prompt-ids", &ids.join(",")])
        .args(["--max-tokens", &STEPS.to_string()]);
    if float32 {
        cmd.arg("--float32");
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    assert!(
        out.status.success(),
        "mlx_lm_peer.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tokens = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let lps = v["logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect();
    Ok((tokens, lps))
}

fn check(arch: Arch, precision: Precision, bits: Option<u32>) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    rlx_plugin_host::backend::compile_cache::clear();
    let what = format!("{arch:?} {precision:?} {bits:?}");
    let dir = tempfile::tempdir().unwrap();
    let model = checkpoint(dir.path(), arch, precision, bits);
    let cpu = run(&mut HostEngine::new(model.clone(), Device::Cpu), &model);
    let distinct = cpu
        .tokens
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(
        distinct > 3,
        "{what}: the checkpoint generates {distinct} distinct tokens: a weak check"
    );
    for mode in [Mode::Lazy, Mode::Compiled] {
        let w = format!("{what} [{}]", mode.name());
        rlx_plugin_host::backend::compile_cache::clear();
        let g = run(&mut plugin(&model, mode, Client::Reuse), &model);
        assert_eq!(g.tokens, cpu.tokens, "{w}: tokens against the CPU backend");
        assert_logprobs(
            &format!("{w} against the CPU backend"),
            &g.logprobs,
            &cpu.logprobs,
            1e-4,
        );
        // The caches stayed on the device; two graphs were compiled.
        let c = g.counters;
        assert_eq!(c.compiles, 2, "{w}: compiles");
        assert_eq!(c.decode_steps, STEPS as u64 - 1);
        assert_eq!(
            c.decode_bytes_in,
            c.decode_steps * 8,
            "{w}: bytes sent per step (the token and the position)"
        );
        let mut engine = plugin(&model, mode, Client::Reuse);
        let chained = run_chained(&mut engine, &model, greedy(STEPS));
        assert!(engine.chains_greedy(), "{w}: greedy steps chain");
        assert_eq!(chained.tokens, cpu.tokens, "{w}: chained steps' tokens");
        assert_eq!(
            chained.counters.decode_bytes_in,
            chained.counters.decode_steps * 4,
            "{w}: bytes sent per chained step (the position)"
        );
    }
    match mlx_lm(dir.path(), precision == Precision::Bf16) {
        Ok((tokens, lps)) => {
            assert_eq!(cpu.tokens, tokens, "{what}: tokens against mlx-lm");
            assert_logprobs(&format!("{what} against mlx-lm"), &cpu.logprobs, &lps, 1e-3);
        }
        Err(why) if std::env::var("RLX_REQUIRE_MLX_LM").is_ok_and(|v| v == "1") => {
            panic!("{what}: mlx-lm is required (RLX_REQUIRE_MLX_LM=1): {why}")
        }
        Err(why) => eprintln!("{what}: mlx-lm comparison skipped: {why}"),
    }
}

#[test]
fn llama_f32() {
    check(Arch::Llama, Precision::F32, None);
}

#[test]
fn llama_bf16() {
    check(Arch::Llama, Precision::Bf16, None);
}

#[test]
fn llama_4bit() {
    check(Arch::Llama, Precision::F32, Some(4));
}

#[test]
fn qwen3_f32() {
    check(Arch::Qwen3, Precision::F32, None);
}

#[test]
fn qwen3_bf16() {
    check(Arch::Qwen3, Precision::Bf16, None);
}

#[test]
fn qwen3_4bit() {
    check(Arch::Qwen3, Precision::F32, Some(4));
}

fn greedy(max_tokens: usize) -> Options {
    Options {
        max_tokens,
        ..Options::default()
    }
}

/// Chained steps under both clients: the tokens of one-at-a-time steps; a
/// stop token leaves steps in flight, which the next generation on the same
/// engine drops before its prefill.
#[test]
fn chained_steps_stop_and_start_again() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let model = checkpoint(dir.path(), Arch::Qwen3, Precision::F32, Some(8));
    let cpu = run(&mut HostEngine::new(model.clone(), Device::Cpu), &model);
    for mode in [Mode::Lazy, Mode::Compiled] {
        for client in [Client::Reuse, Client::Rebuild] {
            let w = format!("[{} {client:?}]", mode.name());
            rlx_plugin_host::backend::compile_cache::clear();
            let mut engine = plugin(&model, mode, client);
            let stop_at = 9;
            let stopped = run_chained(
                &mut engine,
                &model,
                Options {
                    stop: vec![cpu.tokens[stop_at]],
                    ..greedy(STEPS)
                },
            );
            let first = cpu
                .tokens
                .iter()
                .position(|&t| t == cpu.tokens[stop_at])
                .unwrap();
            assert_eq!(stopped.tokens, cpu.tokens[..=first], "{w}: stopped");
            assert!(engine.chains_greedy(), "{w}: greedy steps chain");
            let again = run_chained(&mut engine, &model, greedy(STEPS));
            assert_eq!(again.tokens, cpu.tokens, "{w}: the generation after a stop");
            let sync = run(&mut engine, &model);
            assert_eq!(
                sync.tokens, cpu.tokens,
                "{w}: one step at a time after chained steps"
            );
        }
    }
}

#[test]
fn a_client_that_rebuilds_its_step_gets_the_graph_it_compiled_before() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let model = checkpoint(dir.path(), Arch::Llama, Precision::F32, None);
    for mode in [Mode::Lazy, Mode::Compiled] {
        rlx_plugin_host::backend::compile_cache::clear();
        let reuse = run(&mut plugin(&model, mode, Client::Reuse), &model);
        rlx_plugin_host::backend::compile_cache::clear();
        let rebuild = run(&mut plugin(&model, mode, Client::Rebuild), &model);
        let w = mode.name();
        assert_eq!(rebuild.tokens, reuse.tokens, "[{w}]");
        assert_logprobs(w, &rebuild.logprobs, &reuse.logprobs, 1e-6);
        // One compile each for the prefill and the decode graph; every
        // later decode graph recognised.
        assert_eq!(rebuild.counters.compiles, 2, "[{w}]");
        assert_eq!(rebuild.counters.reused, STEPS as u64 - 1, "[{w}]");
    }
}
