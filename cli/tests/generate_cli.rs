//! `rlx-host checkpoint` and `rlx-host generate` as a user runs them: a
//! random-weight checkpoint written, text generated on the MLX plugin and
//! on the CPU backend (the same tokens), with a tokenizer and without,
//! the JSON report, and bad input as one line naming what is wrong.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn rlx_host(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .arg("--plugin")
        .arg(common::mlx_plugin_dir())
        .args(args)
        .env_remove("RLX_BACKEND_PLUGINS")
        .env("RLX_HOME", home)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("spawn rlx-host")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "rlx-host failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn one_line_error(o: &Output, want: &str) {
    assert!(
        !o.status.success(),
        "succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("[")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("rlx-host: error: ") && lines[0].contains(want),
        "{err}"
    );
}

/// A word-level tokenizer over "w0".."w1023" (one word per id) split on
/// spaces, decoded with spaces between words.
fn tokenizer(dir: &Path) {
    let vocab: serde_json::Map<String, serde_json::Value> =
        (0..1024).map(|i| (format!("w{i}"), i.into())).collect();
    let t = serde_json::json!({
        "version": "1.0",
        "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"}
    });
    std::fs::write(dir.join("tokenizer.json"), t.to_string()).unwrap();
}

#[test]
fn a_checkpoint_generates_the_same_tokens_on_the_plugin_and_the_cpu_backend() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("llama");
    let out = ok(&rlx_host(
        home.path(),
        &["checkpoint", ck.to_str().unwrap(), "--arch", "llama"],
    ));
    assert!(out.contains("llama tiny"), "{out}");
    let args = |backend: &str| {
        vec![
            "generate".to_string(),
            ck.display().to_string(),
            "--prompt-ids".into(),
            "5,17,2,40".into(),
            "--max-tokens".into(),
            "12".into(),
            "--ignore-eos".into(),
            "--json".into(),
            "--backend".into(),
            backend.into(),
        ]
    };
    let run = |backend: &str| -> serde_json::Value {
        let a = args(backend);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = ok(&rlx_host(home.path(), &a));
        serde_json::from_str(out.lines().last().unwrap()).unwrap()
    };
    let mlx = run("mlx");
    let cpu = run("cpu");
    assert_eq!(mlx["tokens"], cpu["tokens"]);
    assert_eq!(mlx["tokens"].as_array().unwrap().len(), 12);
    for key in [
        "prefill_ms",
        "decode_ms_per_token",
        "compiles",
        "peak_bytes",
    ] {
        assert!(mlx[key].is_number(), "{key}: {mlx}");
    }
    assert_eq!(mlx["compiles"], 2);
    // Greedy steps chained on the device: a position in, a token out.
    assert_eq!(mlx["decode_bytes_in_per_step"], 4);
    assert_eq!(mlx["decode_bytes_out_per_step"], 4);

    // With a tokenizer: a text prompt, and the text streamed.
    tokenizer(&ck);
    let out = ok(&rlx_host(
        home.path(),
        &[
            "generate",
            ck.to_str().unwrap(),
            "--prompt",
            "w5 w17 w2 w40",
            "--max-tokens",
            "12",
            "--ignore-eos",
        ],
    ));
    let want: Vec<String> = mlx["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| format!("w{t}"))
        .collect();
    assert_eq!(out.trim(), want.join(" "), "the streamed text");
}

#[test]
fn bad_input_is_one_line_naming_what_is_wrong() {
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing");
    one_line_error(
        &rlx_host(
            home.path(),
            &["generate", missing.to_str().unwrap(), "--prompt-ids", "1"],
        ),
        "config.json: cannot read",
    );
    let ck = dir.path().join("q");
    ok(&rlx_host(
        home.path(),
        &["checkpoint", ck.to_str().unwrap(), "--arch", "qwen3"],
    ));
    let ck_s = ck.to_str().unwrap();
    one_line_error(
        &rlx_host(home.path(), &["generate", ck_s, "--prompt-ids", "5,99999"]),
        "prompt token 99999 is outside the vocabulary",
    );
    one_line_error(
        &rlx_host(home.path(), &["generate", ck_s, "--prompt", "hello"]),
        "no tokenizer.json",
    );
    one_line_error(
        &rlx_host(home.path(), &["generate", ck_s, "--prompt-ids", "5,x"]),
        "\"x\" is not a token id",
    );
    let cfg = ck.join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("\"qwen3\"", "\"gpt2\"")).unwrap();
    one_line_error(
        &rlx_host(home.path(), &["generate", ck_s, "--prompt-ids", "5"]),
        "field \"model_type\": \"gpt2\" is not built here",
    );
}
