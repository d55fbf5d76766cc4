//! The `decode` workload: greedy decode steps of a decoder transformer
//! (d_model 512, 8 layers) with a 1,024-token KV cache, through
//! rlx-runtime's model API.

use super::{measure, Measured, Variant};
use rlx_plugin_tests::decoder_package::{self as dp, DecoderConfig};
use serde_json::json;

/// The prompt, then the context before the timed steps: past the 256-row
/// bucket, so every step runs the 1,024-row one.
const PROMPT: usize = 200;
const CONTEXT: usize = 300;

pub fn run(variant: Variant, warmup: usize, steps: usize) -> Measured {
    let device = variant.device();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = DecoderConfig::benchmark();
    let pkg = dp::write_decoder_package(dir.path(), &cfg).expect("write the package");
    let name = if device == rlx_runtime::Device::Cpu {
        "cpu"
    } else {
        "mlx"
    };
    let mut model = dp::open(&pkg, json!({"device": name})).expect("open");
    let lm = model.lm().expect("a language model");
    let prompt: Vec<u32> = (0..PROMPT).map(|i| (i * 37 % cfg.vocab) as u32).collect();
    let mut next = dp::argmax(&lm.prefill_logits(&prompt).expect("prefill"));
    for _ in PROMPT..CONTEXT {
        next = dp::argmax(&lm.decode_logits(next).expect("step"));
    }
    let before = rlx_plugin_host::backend::state_counters().row_feeds;
    let mut m = measure(warmup, steps, false, || {
        next = dp::argmax(&lm.decode_logits(next).expect("step"));
    });
    // On the plugin, the resident path feeds one row a step on the device
    // (the adapter counts them). rlx-runtime's CPU backend takes it too:
    // its executables report kv_resident (their handles are host memory).
    m.resident = match variant {
        Variant::Cpu => true,
        Variant::Mlx { .. } => rlx_plugin_host::backend::state_counters().row_feeds > before,
    };
    m
}
