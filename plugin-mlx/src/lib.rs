//! The MLX backend for RLX as a plugin: `librlx_mlx.so`.
//!
//! A `.rlxmodel` graph is parsed with rlx-ir, checked against the lowering
//! table (op kind → MLX computation, one file per op family under
//! `lower/`), and compiled into an [`executable::MlxExecutable`] that runs
//! lazily (one MLX graph, one eval), eagerly (node by node) or through
//! `mx::compile`. MLX itself is reached only through `rlx-mlx-shim`.
//! A plugin links the ABI crate (`rlx-plugin-api`) alone of this
//! workspace: it must not depend on the loader, the runtime adapter or
//! rlx-runtime, which are the host's.

pub mod blas;
pub mod bounds;
pub mod contraction;
pub mod custom;
pub mod devices;
pub mod dtype;
pub mod eager;
pub mod executable;
pub mod expected_panic;
pub mod graph_check;
pub mod graph_source;
pub mod graph_text;
pub mod kernel_builder;
pub mod kernel_cache;
pub mod lower;
pub mod manifest;
pub mod memory;
pub mod op_counts;
pub mod plugin;
pub mod table;
pub mod trace;

rlx_plugin_api::export_plugin!(plugin::MlxPlugin::new(), manifest: manifest::MANIFEST);
