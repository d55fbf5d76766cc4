//! `rlx_host`: an RLX runtime host for backend plugins.
//!
//! - [`rlx_backend`]: the adapter that registers a loaded plugin as an
//!   rlx-runtime backend (`register_plugin_backend`), so
//!   `rlx_runtime::Session::new(device)` compiles and runs through it;
//! - [`models`]: deterministic graph builders (an MLP, a small decoder
//!   transformer, a fixture-sized matmul graph);
//! - [`run`]: seeded data, safetensors params, running on a device and
//!   parity against rlx-runtime's CPU backend (`rlx-host run`);
//! - [`demo`]: `rlx-host demo`;
//! - [`build_tree`]: the MLX plugin directory of a cargo build tree (for
//!   examples and tests run from a checkout);
//! - [`bench`]: `rlx-host bench` (timing backends side by side);
//! - [`custom_ops`]: plugin custom ops as rlx-ir ops, and host kernels
//!   registered with the plugin, rlx-ir and rlx-cpu in one call;
//! - [`conformance`]: the conformance kit (`rlx-host plugins check`);
//! - [`cli`]: the command line (`plugins`, `plugins inspect`, `plugins check`,
//!   `run`, `demo`);
//! - [`guard`]: panics from rlx-runtime as one-line errors;
//! - [`kernel_cache`]: where compiled kernels are kept between processes;
//! - [`malloc_policy`]: keeping run buffers mapped between runs.

pub mod bench;
pub mod build_tree;
pub mod cli;
pub mod conformance;
pub mod custom_ops;
pub mod demo;
pub mod guard;
pub mod kernel_cache;
pub mod malloc_policy;
pub mod models;
pub mod rlx_backend;
pub mod run;
pub mod tensor_files;

pub use rlx_backend::{register_plugin_backend, set_plugin_mode, with_mode};
