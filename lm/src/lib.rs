//! `rlx_lm`: language models on rlx's MIT/Apache crates. It reads
//! mlx-community and Hugging Face checkpoints of Llama and Qwen3 (with
//! rlx-mlx-io; mlx-lm's quantized layout stays packed), builds their
//! prefill and decode graphs, and generates text (tokenizers and sampling
//! from rlx-text) on rlx-runtime's CPU backend or on an RLX backend
//! plugin with the KV caches kept on the plugin's device.
//!
//! It depends on rlx-runtime, rlx-ir and the host library
//! (`rlx-plugin-host`), never on the command line or on a plugin's own
//! crates, nor on rlx's GPL model crates.

mod error;

pub mod config;
pub mod engine;
pub mod generate;
pub mod graph;
pub mod plugin_engine;
pub mod rope;
pub mod synth;
pub mod weights;

pub use error::{Error, Result};
