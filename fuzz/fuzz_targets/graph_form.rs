//! Bytes in the graph form this build writes (rlx-ir's serialisation of a
//! graph, `rlx_plugin_api::graph_forms`) into the MLX plugin's `compile_form`,
//! then a run on small generated inputs, in lazy and eager mode
//! (`src/exercise.rs`).
//!
//! The plugin is not instrumented: the coverage that guides the fuzzer is
//! that of the same decoder linked here, run on each input first. Bytes
//! it refuses are handed to the plugin too, which must refuse them.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/exercise.rs"]
mod exercise;
#[path = "../src/load.rs"]
mod load;

fuzz_target!(|data: &[u8]| {
    let p = load::plugin();
    let decoded = rlx_plugin_api::graph_forms::decode(data).is_ok();
    let modes: &[rlx_plugin_api::Mode] = if decoded {
        &exercise::FUZZ_MODES
    } else {
        &exercise::FUZZ_MODES[..1]
    };
    for &mode in modes {
        if let Err(f) = exercise::exercise_form(p, data, mode) {
            eprintln!("finding in {} mode: {}", mode.name(), f.0);
            std::process::abort();
        }
    }
});
