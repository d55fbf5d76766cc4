//! `rlx-host bench DIR` for a checkpoint directory (config.json beside
//! its safetensors): language-model generation timed as mlx-lm's
//! benchmark times it, against mlx-lm itself as the peer.
//!
//! The protocol (`mlx_lm/benchmark.py`'s): a random prompt of
//! `--prompt-tokens` tokens, greedy decoding of `--generation-tokens`
//! tokens with the end of sequence ignored, one warm-up generation, then
//! `--trials` timed ones, in one process per entry. An entry is a backend
//! (`cpu`, or a plugin's mode) with a client (`reuse`: one decode graph
//! compiled once; `rebuild`: a decode graph built and compiled every
//! step). Each trial reports the prefill (from the start to the first
//! token on the host) and decode ms/token (from the first token to the
//! last, per token after the first). The peer, `scripts/mlx_lm_peer.py`,
//! runs mlx-lm's own `load_model` and `generate_step` on the same prompt,
//! with OpenBLAS preloaded where the system has it (Python MLX on Linux
//! otherwise computes with a reference BLAS).
//!
//! Machines are noisy, so entries and the peer are alternated, `--rounds`
//! times, and each entry's figure is compared with the peer's of the same
//! round: the table gives the median of those per-round ratios and their
//! range. Every entry's greedy tokens are compared with the peer's: a
//! fast wrong answer fails the benchmark.

use super::args::BenchArgs;
use super::environment::EnvSnapshot;
use super::spawn::{failure_reason, run_with_limit};
use super::stats::median;
use crate::generate::engine;
use rlx_lm::engine::Model;
use rlx_lm::generate::{generate, Options};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// Whether MODEL names a checkpoint directory.
pub fn is_checkpoint(model: &str) -> bool {
    Path::new(model).join("config.json").is_file()
}

/// The prompt every entry and the peer generate from: seeded, uniform
/// over the vocabulary (mlx-lm's benchmark draws its own the same way).
fn prompt(vocab: usize, n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

fn ids(p: &[u32]) -> String {
    p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// One entry's (or the peer's) figures from one process.
#[derive(Clone, Debug)]
struct Measured {
    prefill_ms: Vec<f64>,
    decode_ms: Vec<f64>,
    peak_bytes: Option<u64>,
    tokens: Vec<u32>,
    compiles: Option<u64>,
    reused: Option<u64>,
}

impl Measured {
    fn from_json(v: &Value) -> Result<Measured, String> {
        let trials = v["trials"].as_array().ok_or("no trials")?;
        let f = |k: &str| -> Result<Vec<f64>, String> {
            trials
                .iter()
                .map(|t| t[k].as_f64().ok_or_else(|| format!("a trial has no {k}")))
                .collect()
        };
        Ok(Measured {
            prefill_ms: f("prefill_ms")?,
            decode_ms: f("decode_ms_per_token")?,
            peak_bytes: trials.iter().filter_map(|t| t["peak_bytes"].as_u64()).max(),
            tokens: v["tokens"]
                .as_array()
                .ok_or("no tokens")?
                .iter()
                .map(|t| {
                    t.as_u64()
                        .map(|t| t as u32)
                        .ok_or("a token is not a number")
                })
                .collect::<Result<_, _>>()?,
            compiles: v["compiles"].as_u64(),
            reused: v["reused"].as_u64(),
        })
    }
}

/// `--backends` and `--clients` as entries: (backend, mode, client).
fn entries(args: &BenchArgs) -> Result<Vec<(String, String, String)>, String> {
    let backends = args.backends.as_deref().unwrap_or("mlx:lazy");
    let clients = args.clients.as_deref().unwrap_or("reuse");
    let mut out = Vec::new();
    for b in backends.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let (name, modes): (&str, Vec<&str>) = match b.split_once(':') {
            _ if b == "cpu" => ("cpu", vec!["-"]),
            Some((n, m)) => (n, vec![m]),
            None => (b, vec!["lazy", "eager", "compiled"]),
        };
        for m in modes {
            for c in clients.split(',').map(str::trim) {
                if name == "cpu" && c != "reuse" {
                    continue;
                }
                rlx_lm::plugin_engine::Client::parse(c).map_err(|e| format!("--clients: {e}"))?;
                out.push((name.to_string(), m.to_string(), c.to_string()));
            }
        }
    }
    if out.is_empty() {
        return Err("--backends names nothing to measure".into());
    }
    Ok(out)
}

fn label((b, m, c): &(String, String, String)) -> String {
    if b == "cpu" {
        "cpu".into()
    } else {
        format!("{b}:{m} {c}")
    }
}

/// The child: one entry's warm-up and trials in this process, one JSON
/// line.
pub fn child(args: &BenchArgs, entry: &str, plugins: Vec<PathBuf>) -> Result<(), String> {
    let (backend, rest) = entry.split_once(':').unwrap_or((entry, "lazy"));
    let client = args.clients.as_deref().unwrap_or("reuse");
    let model = Arc::new(Model::load(Path::new(&args.model)).map_err(|e| e.to_string())?);
    let p = prompt(model.config.vocab_size, args.prompt_tokens, args.seed);
    let mut engine = engine(backend, rest, client, model.clone(), &plugins)?;
    let opts = Options {
        max_tokens: args.generation_tokens,
        ..Options::default()
    };
    let mut trials = Vec::new();
    let mut tokens = Vec::new();
    let mut first = None;
    for i in 0..=args.trials {
        let g =
            generate(engine.as_mut(), &model, &p, &opts, |_| true).map_err(|e| e.to_string())?;
        if i == 0 {
            // What a cold generation compiles.
            first = Some(g.counters);
            continue;
        }
        trials.push(json!({
            "prefill_ms": g.prefill_ms,
            "decode_ms_per_token": g.decode_ms_per_token,
            "peak_bytes": engine.peak_bytes(),
        }));
        tokens = g.tokens;
    }
    let first = first.expect("the warm-up ran");
    println!(
        "{}",
        json!({
            "trials": trials,
            "tokens": tokens,
            "compiles": first.compiles,
            "reused": first.reused,
            "decode_bytes_in_per_step": first.decode_bytes_in / first.decode_steps.max(1),
            "decode_bytes_out_per_step": first.decode_bytes_out / first.decode_steps.max(1),
        })
    );
    Ok(())
}

/// Where the system's OpenBLAS is, for the peer (`ldconfig -p`).
fn openblas() -> Option<String> {
    let out = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| {
            l.trim_start().starts_with("libopenblas.so.0 ")
                && (l.contains("x86-64") || l.contains("AArch64"))
        })
        .and_then(|l| l.rsplit("=> ").next().map(|p| p.trim().to_string()))
}

fn json_line(out: &std::process::Output) -> Option<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
}

fn run_json(cmd: Command, timeout: f64, what: &str) -> Result<Value, String> {
    match run_with_limit(cmd, Duration::from_secs_f64(timeout)) {
        Ok(Some(out)) if out.status.success() => {
            json_line(&out).ok_or_else(|| format!("{what} printed no JSON line"))
        }
        Ok(Some(out)) => Err(format!("{what}: {}", failure_reason(&out))),
        Ok(None) => Err(format!("{what} ran past --timeout {timeout} s")),
        Err(e) => Err(format!("{what}: cannot start: {e}")),
    }
}

/// The parent: alternate the entries and the peer, compare, print.
pub fn parent(args: &BenchArgs, plugins: Vec<PathBuf>, verbose: u8) -> Result<(), String> {
    let env = EnvSnapshot::capture();
    let list = entries(args)?;
    let model = Model::load(Path::new(&args.model)).map_err(|e| e.to_string())?;
    if args.trials == 0 || args.rounds == 0 || args.generation_tokens < 2 {
        return Err(
            "--trials and --rounds must be at least 1, --generation-tokens at least 2".into(),
        );
    }
    let p = prompt(model.config.vocab_size, args.prompt_tokens, args.seed);
    drop(model);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let blas = openblas();
    let script = super::peers::find_script_named("mlx_lm_peer.py");
    // Per entry (and the peer, last): one Measured per round.
    let mut got: Vec<Vec<Result<Measured, String>>> = vec![Vec::new(); list.len() + 1];
    for round in 0..args.rounds {
        for (i, e) in list.iter().enumerate() {
            eprintln!("round {} of {}: {} ...", round + 1, args.rounds, label(e));
            let mut cmd = Command::new(&exe);
            env.apply(&mut cmd);
            for _ in 0..verbose {
                cmd.arg("-v");
            }
            for pl in &plugins {
                cmd.arg("--plugin").arg(pl);
            }
            cmd.arg("bench")
                .arg(&args.model)
                .args(["--prompt-tokens", &args.prompt_tokens.to_string()])
                .args(["--generation-tokens", &args.generation_tokens.to_string()])
                .args(["--trials", &args.trials.to_string()])
                .args(["--seed", &args.seed.to_string()])
                .args(["--clients", &e.2])
                .args(["--child", &format!("{}:{}", e.0, e.1)]);
            let m = run_json(cmd, args.timeout, &label(e)).and_then(|v| Measured::from_json(&v));
            got[i].push(m);
        }
        if args.peers {
            eprintln!("round {} of {}: mlx-lm ...", round + 1, args.rounds);
            let m = match &script {
                Ok(s) => {
                    let mut cmd = Command::new("python3");
                    env.apply(&mut cmd);
                    if let Some(b) = &blas {
                        cmd.env("LD_PRELOAD", b);
                    }
                    cmd.arg(s)
                        .arg("bench")
                        .arg(&args.model)
                        .args(["--prompt-ids", &ids(&p)])
                        .args(["--generation-tokens", &args.generation_tokens.to_string()])
                        .args(["--trials", &args.trials.to_string()]);
                    run_json(cmd, args.timeout, "mlx-lm").and_then(|v| Measured::from_json(&v))
                }
                Err(e) => Err(e.clone()),
            };
            got[list.len()].push(m);
        }
    }
    report(args, &list, &got, blas.as_deref())
}

fn report(
    args: &BenchArgs,
    list: &[(String, String, String)],
    got: &[Vec<Result<Measured, String>>],
    blas: Option<&str>,
) -> Result<(), String> {
    let peer = &got[list.len()];
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    let mut names: Vec<String> = list.iter().map(label).collect();
    if args.peers {
        names.push("mlx-lm".into());
    }
    for (i, name) in names.iter().enumerate() {
        let ok: Vec<&Measured> = got[i].iter().filter_map(|m| m.as_ref().ok()).collect();
        let errs: Vec<&String> = got[i].iter().filter_map(|m| m.as_ref().err()).collect();
        if let Some(e) = errs.first() {
            failed.push(format!("{name}: {e}"));
        }
        let all = |f: fn(&Measured) -> &Vec<f64>| -> Vec<f64> {
            ok.iter().flat_map(|m| f(m).iter().copied()).collect()
        };
        // Per round, this entry's median against the peer's.
        let ratio = |f: fn(&Measured) -> &Vec<f64>| -> Option<(f64, f64, f64)> {
            let r: Vec<f64> = got[i]
                .iter()
                .zip(peer)
                .filter_map(|(a, b)| {
                    Some(median(f(a.as_ref().ok()?))? / median(f(b.as_ref().ok()?))?)
                })
                .collect();
            Some((
                median(&r)?,
                r.iter().copied().fold(f64::INFINITY, f64::min),
                r.iter().copied().fold(0.0, f64::max),
            ))
        };
        let peer_tokens = peer.iter().find_map(|m| m.as_ref().ok()).map(|m| &m.tokens);
        let agree = match (ok.first(), peer_tokens) {
            (Some(m), Some(t)) if i < list.len() => Some(&m.tokens == t),
            _ => None,
        };
        if agree == Some(false) {
            failed.push(format!("{name}: its greedy tokens differ from mlx-lm's"));
        }
        rows.push(json!({
            "entry": name,
            "rounds": ok.len(),
            "prefill_ms": median(&all(|m| &m.prefill_ms)),
            "decode_ms_per_token": median(&all(|m| &m.decode_ms)),
            "prefill_vs_mlx_lm": ratio(|m| &m.prefill_ms).map(|r| json!({"median": r.0, "min": r.1, "max": r.2})),
            "decode_vs_mlx_lm": ratio(|m| &m.decode_ms).map(|r| json!({"median": r.0, "min": r.1, "max": r.2})),
            "peak_bytes": ok.iter().filter_map(|m| m.peak_bytes).max(),
            "compiles_cold": ok.first().and_then(|m| m.compiles),
            "reused_cold": ok.first().and_then(|m| m.reused),
            "tokens_agree_with_mlx_lm": agree,
        }));
    }
    let out = json!({
        "model": args.model,
        "prompt_tokens": args.prompt_tokens,
        "generation_tokens": args.generation_tokens,
        "trials": args.trials,
        "rounds": args.rounds,
        "peer_openblas": blas,
        "rows": rows,
    });
    if args.json {
        println!("{out}");
    } else {
        print_table(&out);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

fn print_table(out: &Value) {
    println!(
        "{}: prompt {} tokens, {} generated, {} trials x {} rounds (medians; ratios: per round against mlx-lm, median [min, max])",
        out["model"].as_str().unwrap_or(""),
        out["prompt_tokens"],
        out["generation_tokens"],
        out["trials"],
        out["rounds"]
    );
    println!(
        "{:<24} {:>11} {:>20} {:>11} {:>20} {:>9} {:>9} {:>8}",
        "entry",
        "prefill ms",
        "vs mlx-lm",
        "ms/token",
        "vs mlx-lm",
        "peak MB",
        "compiles",
        "tokens"
    );
    let num = |v: &Value, d: usize| v.as_f64().map_or("-".into(), |x| format!("{x:.d$}"));
    let ratio = |v: &Value| match v["median"].as_f64() {
        Some(m) => format!(
            "{m:.2}x [{:.2}, {:.2}]",
            v["min"].as_f64().unwrap_or(m),
            v["max"].as_f64().unwrap_or(m)
        ),
        None => "-".into(),
    };
    for r in out["rows"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:>11} {:>20} {:>11} {:>20} {:>9} {:>9} {:>8}",
            r["entry"].as_str().unwrap_or(""),
            num(&r["prefill_ms"], 2),
            ratio(&r["prefill_vs_mlx_lm"]),
            num(&r["decode_ms_per_token"], 3),
            ratio(&r["decode_vs_mlx_lm"]),
            r["peak_bytes"]
                .as_f64()
                .map_or("-".into(), |b| format!("{:.1}", b / 1e6)),
            match (r["compiles_cold"].as_u64(), r["reused_cold"].as_u64()) {
                (Some(c), Some(u)) if u > 0 => format!("{c}+{u}r"),
                (Some(c), _) => c.to_string(),
                _ => "-".into(),
            },
            match r["tokens_agree_with_mlx_lm"].as_bool() {
                Some(true) => "same",
                Some(false) => "DIFFER",
                None => "-",
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_seeded_and_in_the_vocabulary() {
        let a = prompt(1000, 128, 0);
        assert_eq!(a, prompt(1000, 128, 0));
        assert_ne!(a, prompt(1000, 128, 1));
        assert!(a.iter().all(|&t| t < 1000));
    }
}
