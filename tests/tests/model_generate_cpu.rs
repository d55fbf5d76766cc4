//! The tiny decoder package (`rlx_plugin_tests::decoder_package`) through
//! rlx-runtime's model API on its CPU backend: greedy generation from the
//! resident caches matches a full recompute of every token, across the
//! decode buckets and up to the last cache row, and speculative decoding
//! gives the same tokens.
//!
//! Is the resident cache path live? Nothing in the public model API says
//! (no log, counter or option; the caches read back the same either way).
//! rlx-runtime 0.2.19 takes it exactly when the package declares
//! `state_update: "replace"` with every state of kind `rows` and one row
//! width (the builder writes that) and the backend's `bind_gpu_handle` and
//! `register_kv_row_feed` both answer true (`GraphLm::bind_resident`);
//! otherwise it silently passes the caches through the host. So
//! `the_cpu_backend_keeps_a_step_s_caches` makes those very calls on a step
//! of this package, and speculative decoding, which refuses to run without
//! them ("the backend keeps no caches for the check"), shows them on the
//! model path. A plugin backend can count its `register_kv_row_feed` /
//! `feed_kv_row` calls to see it directly.

use rlx_plugin_tests::decoder_package::{self as dp, DecoderConfig, DecoderPackage};
use rlx_runtime::model::Model;
use serde_json::json;

/// Logits of the cached steps and of the recompute may differ by rounding
/// (other summation orders); relative to the largest logit.
const TOL: f32 = 1e-4;

fn package() -> (tempfile::TempDir, DecoderPackage) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = dp::write_decoder_package(dir.path(), &DecoderConfig::default()).expect("write");
    (dir, pkg)
}

fn open(pkg: &DecoderPackage, options: serde_json::Value) -> Box<dyn Model> {
    dp::open(pkg, options).unwrap_or_else(|e| panic!("open {}: {e}", pkg.path.display()))
}

/// The reference: each token's logits from the prefill function over the
/// whole context, no cache carried from one token to the next. The
/// context must fit one prefill, else the runtime would step it through
/// the very caches under test. (A one-token context is a single step from
/// an empty cache: it reads no cached row.)
fn recompute(reference: &mut dyn Model, prompt: &[u32], n: usize) -> Vec<(u32, Vec<f32>)> {
    let longest = DecoderConfig::default()
        .prefill_seqs
        .into_iter()
        .max()
        .unwrap();
    let lm = reference.lm().expect("a language model");
    let mut context = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..n {
        assert!(
            context.len() <= longest,
            "the reference outgrew its prefill"
        );
        let logits = lm.prefill_logits(&context).expect("prefill");
        let next = dp::argmax(&logits);
        out.push((next, logits));
        context.push(next);
    }
    out
}

/// The model's own logits along `tokens` after `prompt`, through the
/// caches: the prompt, then one step per token, as `generate` runs.
fn cached_logits(model: &mut dyn Model, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    let lm = model.lm().expect("a language model");
    let mut all = vec![lm.prefill_logits(prompt).expect("prompt")];
    for &t in &tokens[..tokens.len() - 1] {
        all.push(lm.decode_logits(t).expect("step"));
    }
    all
}

/// `model` greedy after `prompt` matches the recompute, token for token
/// and logit for logit; returns the tokens.
fn check_against_reference(
    model: &mut dyn Model,
    reference: &mut dyn Model,
    prompt: &[u32],
    n: usize,
) -> Vec<u32> {
    let tokens = dp::generate(model, prompt, n).expect("generate");
    let want = recompute(reference, prompt, n);
    let want_tokens: Vec<u32> = want.iter().map(|(t, _)| *t).collect();
    assert_eq!(tokens, want_tokens, "prompt {prompt:?}");
    for (i, (got, (_, want))) in cached_logits(model, prompt, &tokens)
        .iter()
        .zip(&want)
        .enumerate()
    {
        let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
        let diff = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            diff <= TOL * scale,
            "prompt {prompt:?}, token {i}: logits differ by {diff} (scale {scale})"
        );
        // The picks must not hang on rounding, or a backend compared later
        // could differ by a tie: logits within TOL * scale of each other
        // keep the same argmax when the top two are 10x that apart.
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        assert!(
            sorted[0] - sorted[1] > 10.0 * TOL * scale,
            "prompt {prompt:?}, token {i}: top logits {} and {} nearly tie",
            sorted[0],
            sorted[1]
        );
    }
    tokens
}

#[test]
fn greedy_generation_matches_a_full_recompute() {
    let (_dir, pkg) = package();
    let mut model = open(&pkg, json!({"device": "cpu"}));
    let mut reference = open(&pkg, json!({"device": "cpu"}));
    let first_cap = pkg.config.decode_caps[0];
    assert!(first_cap < pkg.config.max_context());

    // (a) Short prompts: one token (stepped, no prefill), then several
    // (prefill, then steps), all within the first decode function.
    let short = [vec![3], vec![5, 17, 2, 40, 11]];
    let mut first = Vec::new();
    for prompt in &short {
        let n = first_cap - prompt.len();
        first.push(check_against_reference(
            &mut *model,
            &mut *reference,
            prompt,
            n,
        ));
    }

    // (b) A context that outgrows the first function (its caches move to
    // the next) and fills the last one to its final row: exactly the most
    // tokens the package holds.
    let prompt = [7, 1, 30, 30, 9];
    let n = pkg.max_new_tokens(prompt.len(), false);
    assert!(prompt.len() + n - 1 == pkg.config.max_context());
    check_against_reference(&mut *model, &mut *reference, &prompt, n);
    // A prompt longer than the first function, straight into the next.
    let vocab = pkg.token_ids().end;
    let long: Vec<u32> = (0..first_cap as u32 + 4).map(|i| (i * 7) % vocab).collect();
    check_against_reference(&mut *model, &mut *reference, &long, 8);

    // One token more than the caches hold is refused, not wrapped around.
    let e = dp::generate(&mut *model, &prompt, n + 1).unwrap_err();
    assert!(e.to_string().contains("the context is full"), "{e}");

    // The short prompts again, now in the longest function (the runtime
    // keeps it): the one-token prompt is stepped into caches that still
    // hold the last generation's rows past it (no prefill rebinds them),
    // which the mask must keep out.
    for (prompt, want) in short.iter().zip(&first) {
        let got = dp::generate(&mut *model, prompt, want.len()).expect("generate");
        assert_eq!(&got, want, "prompt {prompt:?} after a long context");
    }
}

/// (c) Speculative decoding (drafts by prompt lookup, each checked in one
/// run of the check function) picks what one token at a time does.
#[test]
fn speculative_decoding_gives_the_greedy_tokens() {
    let (_dir, pkg) = package();
    let mut plain = open(&pkg, json!({"device": "cpu"}));
    let mut spec = open(&pkg, json!({"device": "cpu", "speculative": true}));
    // A repetitive prompt, so lookup drafts are proposed from the start.
    let prompts = [vec![5, 17, 2, 40, 11], vec![4, 9, 4, 9, 4, 9, 4], vec![3]];
    for prompt in &prompts {
        let n = pkg.max_new_tokens(prompt.len(), true);
        let want = dp::generate(&mut *plain, prompt, n).expect("greedy");
        let got = dp::generate(&mut *spec, prompt, n).expect("speculative");
        assert_eq!(got, want, "prompt {prompt:?}");
    }
    // Speculative decoding holds `check_tokens` fewer tokens than plain:
    // its last run writes `check_tokens - 1` rows past the last position,
    // and rlx-runtime asks for one row more than that (`prompt + n - 1 +
    // q` rows).
    let prompt = &prompts[0];
    let n = pkg.max_new_tokens(prompt.len(), false);
    let e = dp::generate(&mut *spec, prompt, n).unwrap_err();
    assert!(e.to_string().contains("the context is full"), "{e}");
}

/// The calls `bind_resident` / `step_resident` make, on a step of this
/// package compiled for the CPU: each answers true and moves the new row.
#[test]
fn the_cpu_backend_keeps_a_step_s_caches() {
    let cfg = DecoderConfig::default();
    let (cap, d) = (cfg.decode_caps[0], cfg.d_model);
    let graph = dp::step_graph(&cfg, cap);
    let mut step = rlx_runtime::Session::new(rlx_runtime::Device::Cpu).compile(graph);
    for w in dp::weights(&cfg) {
        step.set_param(&w.name, &w.to_f32().unwrap());
    }
    let states = dp::state_names(&cfg);
    for (i, name) in states.iter().enumerate() {
        assert!(step.bind_gpu_handle(name, &vec![0.0; cap * d]), "{name}");
        assert!(step.register_kv_row_feed(name, i + 1), "{name}");
    }
    let past = 3;
    let logits = step.run_read_outputs(
        &[("input_ids", &[5.0]), ("position", &[past as f32])],
        Some(&[0]),
    );
    assert_eq!(logits[0].len(), cfg.vocab);
    assert!(step.feed_kv_row(past, past, d));
    for (i, name) in states.iter().enumerate() {
        let cache = step.read_gpu_handle(name).expect("a kept cache");
        let written = step
            .read_output_row(i + 1, past, d)
            .expect("the step's row");
        assert_eq!(&cache[past * d..(past + 1) * d], &written[..], "{name}");
        assert!(written.iter().any(|v| *v != 0.0), "{name}");
        let others = cache[..past * d].iter().chain(&cache[(past + 1) * d..]);
        assert!(others.into_iter().all(|v| *v == 0.0), "{name}");
    }
    // A row past the cache (a step at `past == cap`, which the runtime's
    // bucket choice never makes) is dropped, yet reported done: the CPU
    // backend skips it silently rather than refuse.
    let before = step.read_gpu_handle(&states[0]).unwrap();
    assert!(step.feed_kv_row(past, cap, d));
    assert_eq!(step.read_gpu_handle(&states[0]).unwrap(), before);
}
