//! The fuzzers' committed corpora replayed as ordinary tests: every input
//! of `fuzz/corpus/<target>/` goes through the same steps as the fuzz
//! target (`fuzz/src/exercise.rs` for `compile_run` and `graph_form`,
//! `fuzz/src/descriptors.rs` for `descriptors`, `fuzz/src/sequences.rs`
//! with its state steps, `fuzz/src/state_steps.rs`, for `sequences`,
//! included here), on the build tree's MLX plugin, and must not be a
//! finding (a crash, a PANIC status, a deleter run too often or not at
//! all). The corpus starts from the seeds `write_seed_corpus` writes and
//! holds what `cargo fuzz` kept (fuzz/README.md).

#[path = "../../fuzz/src/descriptors.rs"]
mod descriptors;
#[path = "../../fuzz/src/exercise.rs"]
mod exercise;
#[path = "../../fuzz/src/sequences.rs"]
mod sequences;

use rlx_plugin_tests::parity::mlx;
use std::path::{Path, PathBuf};

fn fuzz_dir(kind: &str, target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(kind)
        .join(target)
}

/// The corpus the fuzzer keeps (`fuzz/corpus/<target>`, minimised) and the
/// inputs that once found a bug (`fuzz/regressions/<target>`, named for
/// it), in name order.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir(kind, target);
        if kind == "regressions" && !dir.exists() {
            continue; // a target that has found nothing yet
        }
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            out.push((p, data));
        }
    }
    out.sort();
    out
}

/// The fuzzers' limits (`fuzz/src/load.rs`): tensors capped at 64 MiB,
/// While loops at 10,000 iterations, for the tests that compile the
/// corpora's graphs. Only this test binary's process reads them.
fn fuzzer_limits() {
    std::env::set_var("RLX_MLX_MEMORY_LIMIT", "64M");
    std::env::set_var("RLX_MLX_WHILE_LIMIT", "10000");
}

/// [`inputs`] of a target whose corpus is committed (at least ten).
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let inputs = inputs(target);
    assert!(inputs.len() >= 10, "{target}: {} inputs", inputs.len());
    inputs
}

#[test]
fn the_compile_run_corpus_replays_without_a_finding() {
    fuzzer_limits();
    let plugin = mlx();
    let inputs = corpus("compile_run");
    let mut compiled = 0;
    for (path, data) in &inputs {
        let Ok(text) = std::str::from_utf8(data) else {
            continue;
        };
        for mode in exercise::FUZZ_MODES {
            if let Err(f) = exercise::exercise(&plugin, text, mode, data) {
                panic!("{} [{}]: {}", path.display(), mode.name(), f.0);
            }
        }
        compiled += plugin.compile(text, rlx_plugin_api::Mode::Lazy).is_ok() as usize;
    }
    // The seeds compile; mutants mostly do not.
    assert!(
        compiled >= 8,
        "only {compiled} of {} inputs compiled",
        inputs.len()
    );
}

#[test]
fn the_graph_form_corpus_replays_without_a_finding() {
    fuzzer_limits();
    let plugin = mlx();
    let inputs = corpus("graph_form");
    let mut decoded = 0;
    for (path, data) in &inputs {
        for mode in exercise::FUZZ_MODES {
            if let Err(f) = exercise::exercise_form(&plugin, data, mode) {
                panic!("{} [{}]: {}", path.display(), mode.name(), f.0);
            }
        }
        decoded += rlx_plugin_api::graph_forms::decode(data).is_ok() as usize;
    }
    // The seeds decode; mutants mostly do not.
    assert!(
        decoded >= 8,
        "only {decoded} of {} inputs decoded",
        inputs.len()
    );
}

/// Writes the seed corpus of `graph_form`: every graph of the
/// `compile_run` corpus that rlx-ir reads, in the graph form (the form's
/// fuzzer starts from the graphs the text fuzzer kept). Run by hand:
/// `cargo test -p rlx-plugin-tests --test fuzz_replay write_graph_form_seed_corpus -- --ignored`.
#[test]
#[ignore]
fn write_graph_form_seed_corpus() {
    let dir = fuzz_dir("corpus", "graph_form");
    std::fs::create_dir_all(&dir).unwrap();
    let mut written = 0;
    for (path, data) in inputs("compile_run") {
        let Ok(text) = std::str::from_utf8(&data) else {
            continue;
        };
        // (Text nested deeper than rlx-ir's reader takes is not a graph.)
        if rlx_plugin_api::graph_text::check_nesting(text).is_err() {
            continue;
        }
        let Ok(g) = rlx_ir::rlxmodel::from_text(text) else {
            continue;
        };
        let Ok(bytes) = rlx_plugin_api::graph_forms::encode(&g) else {
            continue;
        };
        if bytes.len() > 64 << 10 {
            continue;
        }
        let name = path.file_name().unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
        written += 1;
    }
    eprintln!("{written} seeds in {}", dir.display());
}

#[test]
fn the_descriptors_corpus_replays_without_a_finding() {
    let plugin = mlx();
    let inputs = corpus("descriptors");
    for (path, data) in &inputs {
        if let Err(f) = descriptors::one_input(&plugin, data) {
            panic!("{}: {}", path.display(), f.0);
        }
    }
}

#[test]
fn the_sequences_corpus_replays_without_a_finding() {
    let plugin = mlx();
    let inputs = corpus("sequences");
    for (path, data) in &inputs {
        if let Err(f) = sequences::one_input(&plugin, data) {
            panic!("{}: {}", path.display(), f.0);
        }
    }
}

/// Writes the seed corpus of `compile_run`: the graphs of rlx-host's
/// models and benchmark builtins as rlx-ir writes them, plus a few written
/// by hand (a 16 TB tensor, text that does not parse). Run by hand:
/// `cargo test -p rlx-plugin-tests --test fuzz_replay -- --ignored`.
#[test]
#[ignore]
fn write_seed_corpus() {
    use rlx_host::models;
    let dir = fuzz_dir("corpus", "compile_run");
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds: Vec<(String, String)> = Vec::new();
    let text = |g: &rlx_ir::Graph| rlx_ir::rlxmodel::to_text(g).unwrap();
    seeds.push((
        "matmul_relu_add".into(),
        text(&models::matmul_relu_add(4, 8, 6).graph),
    ));
    seeds.push((
        "mlp".into(),
        text(&models::mlp(&models::MlpConfig::default()).graph),
    ));
    seeds.push((
        "transformer".into(),
        text(&models::transformer(&models::TransformerConfig::default()).graph),
    ));
    for name in ["exp4", "add-broadcast", "lstm", "scan1000", "mlp-train"] {
        let m = rlx_host::bench::builtins::builtin(name).expect(name);
        seeds.push((name.into(), text(&m.graph)));
    }
    seeds.push((
        "huge".into(),
        "rlxmodel 1\nopset 1\n\ngraph @huge {\n  %x = input : f32[1, 1, 100]\n  \
         %1 = Expand{target_shape: [200000, 200000, 100]} %x : f32[200000, 200000, 100]\n  \
         %2 = Activation(Exp) %1 : f32[200000, 200000, 100]\n  return %2\n}\n"
            .into(),
    ));
    seeds.push((
        "not_a_model".into(),
        "rlxmodel 1\nopset 1\ngraph @g {\n".into(),
    ));
    for (name, t) in seeds {
        std::fs::write(dir.join(format!("seed-{name}")), t).unwrap();
    }
}
