//! `.rlxmodel` text into the MLX plugin's compile, then a run on small
//! generated inputs, in lazy and eager mode (`src/exercise.rs`).
//!
//! The plugin (`src/load.rs`) is not instrumented, so the coverage that
//! guides the fuzzer is that of rlx-ir's
//! parser, linked here: each input is parsed in-process first (the same
//! parser, same version, the plugin runs), and text that does not parse is
//! also handed to the plugin, which must refuse it. Tensors are capped at
//! 64 MiB for the plugin (`RLX_MLX_MEMORY_LIMIT`), so the limit's refusal
//! path is fuzzed too and no input can exhaust the machine.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/exercise.rs"]
mod exercise;
#[path = "../src/load.rs"]
mod load;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let p = load::plugin();
    // The parse is for coverage; a panic in it is rlx-ir's own (the plugin
    // catches its copy's) and must not end the run.
    // Text nested too deep for rlx-ir's recursive reader is refused before
    // it (by the plugin too, which this checks).
    let parsed = std::panic::catch_unwind(|| {
        rlx_plugin_api::graph_text::check_nesting(text).is_ok()
            && rlx_ir::rlxmodel::from_text(text).is_ok()
    });
    let modes: &[rlx_plugin_api::Mode] = match parsed {
        Ok(true) => &exercise::FUZZ_MODES,
        // Refused text: one mode is enough.
        _ => &exercise::FUZZ_MODES[..1],
    };
    for &mode in modes {
        if let Err(f) = exercise::exercise(p, text, mode, data) {
            eprintln!("finding in {} mode: {}", mode.name(), f.0);
            std::process::abort();
        }
    }
});
