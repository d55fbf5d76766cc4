//! What the `compile_run` and `graph_form` fuzz targets do with one input,
//! shared with the test that replays the committed corpora
//! (`tests/tests/fuzz_replay.rs` includes this file): `.rlxmodel` text, or
//! bytes in the graph form this build writes, into the plugin's compile, and
//! when that succeeds, a run on small generated inputs.
//!
//! A finding is a crash or hang of the process, or a PANIC status (a Rust
//! panic the plugin caught: a bug, even though the host survived). Any other
//! error is the plugin doing its job: refusing bad input with a message.

use rlx_plugin_api::{HostTensor, Mode, Role, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

/// Tensors above this are not generated (the plugin may still compile the
/// graph: the run is skipped).
const MAX_INPUT_BYTES: usize = 1 << 20;

/// Why an input was a finding.
#[derive(Debug)]
pub struct Finding(pub String);

/// The modes the fuzzer drives. Compiled mode is left out: on the CPU MLX
/// builds each new fused kernel with the system C++ compiler (seconds per
/// kernel), which would turn every new graph into a hang.
pub const FUZZ_MODES: [Mode; 2] = [Mode::Lazy, Mode::Eager];

fn panicked(what: &str, code: StatusCode, message: &str) -> Result<(), Finding> {
    if code == StatusCode::Panic {
        return Err(Finding(format!("{what}: PANIC status: {message}")));
    }
    if message.is_empty() {
        return Err(Finding(format!("{what}: {code} with an empty message")));
    }
    Ok(())
}

/// Compile `text` in `mode` and, when it compiles and its leaves are small,
/// run it on deterministic inputs (bytes cycling through `seed`, so floats
/// and integers of every kind turn up, NaN and infinity included).
pub fn exercise(
    plugin: &Arc<LoadedPlugin>,
    text: &str,
    mode: Mode,
    seed: &[u8],
) -> Result<(), Finding> {
    exercise_compile(plugin.compile(text, mode), seed)
}

/// As [`exercise`], for bytes in rlx-ir's serialisation of a graph (the graph
/// form this build writes, the `graph_form` target).
pub fn exercise_form(plugin: &Arc<LoadedPlugin>, bytes: &[u8], mode: Mode) -> Result<(), Finding> {
    let form = rlx_plugin_api::graph_forms::this_rlx_ir_bincode();
    let compiled = plugin.compile_form(&form, bytes, &rlx_plugin_api::CompileOptions::mode(mode));
    exercise_compile(compiled, bytes)
}

/// What a compile gave, run as [`exercise`] describes.
fn exercise_compile(
    compiled: rlx_plugin_api::PluginResult<rlx_plugin_loader::PluginExecutable>,
    seed: &[u8],
) -> Result<(), Finding> {
    let mut exe = match compiled {
        Ok(e) => e,
        Err(e) => return panicked("compile", e.code, &e.message),
    };
    let mut fill = seed.iter().copied().cycle();
    let mut tensors: Vec<(String, Role, HostTensor)> = Vec::new();
    for v in exe.signature().to_vec() {
        if v.role == Role::Output {
            continue;
        }
        let Some(shape) = v.shape.iter().copied().collect::<Option<Vec<usize>>>() else {
            return Ok(());
        };
        let bytes = shape
            .iter()
            .try_fold(v.dtype.size_bytes(), |n, d| n.checked_mul(*d))
            .filter(|b| *b <= MAX_INPUT_BYTES);
        let Some(bytes) = bytes else { return Ok(()) };
        let data: Vec<u8> = (0..bytes).map(|_| fill.next().unwrap_or(0)).collect();
        match HostTensor::new(v.dtype, shape, data) {
            Ok(t) => tensors.push((v.name, v.role, t)),
            Err(e) => return panicked("tensor", e.code, &e.message),
        }
    }
    let mut inputs = Vec::new();
    for (name, role, t) in &tensors {
        if *role == Role::Param {
            if let Err(e) = exe.bind_param(name, t) {
                return panicked("bind_param", e.code, &e.message);
            }
        } else {
            inputs.push((name.as_str(), t));
        }
    }
    // Twice: a second run reuses what the first left behind (bound params,
    // compiled state, written-back state).
    for _ in 0..2 {
        if let Err(e) = exe.run(&inputs) {
            return panicked("run", e.code, &e.message);
        }
    }
    Ok(())
}
