//! One case of the edge-attribute tests (`mlx_edge_attributes.rs`'s
//! table, `mlx_edge_mutations.rs`'s corpus-derived cases): a graph
//! compiled and run on deterministic inputs, its outcome a refusal or an
//! output. A panic anywhere fails the test: a refusal is an error the
//! plugin reports, never one it caught from itself.

use rlx_plugin_api::{HostTensor, Mode, Role, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

/// Inputs past this many bytes are not made: the case is counted as
/// refused (a graph whose inputs a test machine should not allocate).
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// What one build did with one case in one mode.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Refused,
    /// The first output's shape and bytes.
    Ran {
        shape: Vec<usize>,
        bits: Vec<u8>,
    },
}

/// Compile and run `text` in `mode`, every input and param filled with
/// small values of every low-bit pattern (finite floats, small integers:
/// indices in range for small tables). `tag` names the case in a failure.
pub fn outcome(plugin: &Arc<LoadedPlugin>, text: &str, mode: Mode, tag: &str) -> Outcome {
    let mut exe = match plugin.compile(text, mode) {
        Ok(e) => e,
        Err(e) => {
            assert_ne!(e.code, StatusCode::Panic, "{tag}: compile: {e}");
            return Outcome::Refused;
        }
    };
    let mut tensors = Vec::new();
    for v in exe.signature().to_vec() {
        if v.role == Role::Output {
            continue;
        }
        let Some(shape) = v.shape.iter().copied().collect::<Option<Vec<usize>>>() else {
            return Outcome::Refused;
        };
        let bytes = shape
            .iter()
            .try_fold(v.dtype.size_bytes(), |n, d| n.checked_mul(*d))
            .filter(|b| *b <= MAX_INPUT_BYTES);
        let Some(bytes) = bytes else {
            return Outcome::Refused;
        };
        let data: Vec<u8> = (0..bytes)
            .map(|i| [0x3c, 0x00, 0x01, 0x3f][i % 4])
            .collect();
        let t = HostTensor::new(v.dtype, shape, data).expect("a tensor of its own size");
        tensors.push((v.name, v.role, t));
    }
    let mut inputs = Vec::new();
    for (name, role, t) in &tensors {
        if *role == Role::Param {
            if let Err(e) = exe.bind_param(name, t) {
                assert_ne!(e.code, StatusCode::Panic, "{tag}: bind {name}: {e}");
                return Outcome::Refused;
            }
        } else {
            inputs.push((name.as_str(), t));
        }
    }
    match exe.run(&inputs) {
        Ok(out) => Outcome::Ran {
            shape: out[0].shape.clone(),
            bits: out[0].data.clone(),
        },
        Err(e) => {
            assert_ne!(e.code, StatusCode::Panic, "{tag}: run: {e}");
            Outcome::Refused
        }
    }
}
