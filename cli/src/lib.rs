//! `rlx_host`: the `rlx-host` program, a thin user of the host library
//! `rlx_plugin_host` (discovery, the rlx-runtime adapter, custom ops),
//! whose modules it re-exports under their earlier names:
//!
//! - [`rlx_backend`] (`rlx_plugin_host::backend`): the adapter that
//!   registers a loaded plugin as an rlx-runtime backend
//!   (`register_plugin_backend`), so `rlx_runtime::Session::new(device)`
//!   compiles and runs through it;
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
pub mod demo;
pub mod digits;
pub mod distributed;
pub mod generate;
pub mod model_data;
pub mod models;
pub mod run;
pub mod tables;
pub mod tensor_files;

pub use rlx_plugin_host::backend as rlx_backend;
pub use rlx_plugin_host::{custom_ops, guard, kernel_cache, malloc_policy};
pub use rlx_plugin_host::{register_plugin_backend, set_plugin_mode, with_mode};
