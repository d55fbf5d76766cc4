//! Backend plugins for any program that uses rlx-runtime: the adapter
//! between rlx-runtime's `Backend` and a loaded plugin. It must not depend
//! on a plugin's own crates (plugins are reached through the loader) or on
//! the command line.
//!
//! One call, [`install`], discovers plugins (the order and rules of
//! `rlx_plugin_loader::discover`: explicit paths, `RLX_BACKEND_PLUGINS`,
//! `<executable dir>/plugins`, `$RLX_HOME/plugins` or `~/.rlx/plugins`),
//! picks the one serving a backend name (a GPU variant such as `mlx-cuda`
//! for `mlx` where one loaded) and registers it with rlx-runtime for a
//! device, after which `rlx_runtime::Session::new(device)` compiles and
//! runs there:
//!
//! ```no_run
//! use rlx_ir::{DType, Graph, Shape};
//! use rlx_runtime::{Device, Session};
//!
//! let installed = rlx_plugin_host::install(&rlx_plugin_host::Options::default())?;
//! println!("running on {}", installed.plugin.descriptor().name);
//!
//! let mut g = Graph::new("double");
//! let x = g.input("x", Shape::new(&[3], DType::F32));
//! let y = g.binary(rlx_ir::op::BinaryOp::Add, x, x, Shape::new(&[3], DType::F32));
//! g.set_outputs(vec![y]);
//! let mut exe = Session::new(Device::Mlx).compile(g);
//! let out = exe.run(&[("x", &[1.0, 2.0, 3.0][..])]);
//! assert_eq!(out[0], vec![2.0, 4.0, 6.0]);
//! # Ok::<(), String>(())
//! ```
//!
//! The parts, for programs that want them one by one:
//! - [`backend`]: the adapter itself ([`register_plugin_backend`],
//!   [`set_plugin_mode`], [`with_mode`]);
//! - [`custom_ops`]: a plugin's custom ops as rlx-ir ops, and host kernels
//!   registered with the plugin, rlx-ir and rlx-cpu in one call;
//! - [`dist`]: a worker process of rlx-runtime's distributed engine with
//!   the plugin as its backend, and the coordinator that drives workers;
//! - [`guard`]: rlx-runtime's panics as one-line errors;
//! - [`partition`]: where each node runs when the plugin cannot take a
//!   graph whole (the rest runs on rlx-runtime's CPU backend), and the
//!   explanation [`backend::explain`] returns;
//! - process-wide policy a program may opt into at the start of `main`,
//!   before it starts threads: [`kernel_cache::use_stable_cache`] (keep
//!   compiled kernels between processes) and
//!   [`malloc_policy::keep_run_buffers`].

mod abi_names;
pub mod backend;
mod collective_grads;
mod cpu_bridge;
pub mod custom_ops;
pub mod dist;
pub mod guard;
mod install;
pub mod kernel_cache;
pub mod malloc_policy;
pub mod partition;

pub use backend::{register_plugin_backend, set_plugin_mode, with_mode};
pub use install::{
    find_plugin, install, install_static, missing_plugin_message, Installed, Options,
};
