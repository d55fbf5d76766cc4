//! `rlx_host`: the `rlx-host` program's library, built on the host library
//! `rlx_plugin_host` (discovery, the rlx-runtime adapter, custom ops) and
//! `rlx_lm`; it must not reach plugins other than through them.
//!
//! - [`models`]: deterministic graph builders (an MLP, a small decoder
//!   transformer, a fixture-sized matmul graph);
//! - [`run`]: seeded data, safetensors params, running on a device and
//!   parity against rlx-runtime's CPU backend (`rlx-host run`);
//! - [`demo`]: `rlx-host demo`;
//! - [`generate`]: `rlx-host generate` and `rlx-host checkpoint` (language
//!   models, `rlx_lm`);
//! - [`build_tree`]: the MLX plugin directory of a cargo build tree (for
//!   examples and tests run from a checkout);
//! - [`bench`]: `rlx-host bench` (timing backends side by side);
//! - [`conformance`]: the conformance kit (`rlx-host plugins check`);
//! - [`cli`]: the command line (`plugins`, `plugins inspect`, `plugins check`,
//!   `run`, `demo`);
//! - [`distributed`]: `rlx-host dist` workers and coordinators.

pub mod bench;
pub mod build_tree;
pub mod cli;
pub mod conformance;
pub mod demo;
pub mod digits;
pub mod distributed;
pub mod generate;
pub mod model_data;
pub mod models;
pub mod run;
pub mod tables;
pub mod tensor_files;
