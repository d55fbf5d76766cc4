//! Past one device: rlx-runtime's distributed engine (`rlx_runtime::dist`
//! over rlx-driver's process groups) with the plugin as each worker's
//! backend, one process per device.
//!
//! - [`serve`] / [`serve_from_env`]: a worker. It installs the plugin,
//!   picks its device by local rank ([`device::local_rank`]), joins the
//!   group, advertises its devices in rlx's `NodeCaps` (the plugin's as
//!   `mlx:gpu:N`, and `mlx@gpu:N`, the one it uses) and serves the coordinator's jobs: pipeline
//!   stages (rlx's `StageSpec`) and data-parallel training (rlx's
//!   `TrainSpec`, run by `rlx_runtime::dist::run_train`), until the
//!   coordinator ends the session.
//! - [`Coordinator`]: rank 0. It reads every worker's capabilities, ships
//!   stages ([`Coordinator::pipeline`]) or training jobs
//!   ([`Coordinator::train`]), and turns any worker's failure into one
//!   error naming the rank.
//!   Stages run side by side ([`Coordinator::parallel`]) are tensor
//!   parallel: MLX's collectives (the plugin's `mlx.all_sum`, ...) join
//!   them inside their graphs, over the MLX group [`mlx_env`] describes.
//! - [`split`]: cutting a graph into pipeline stages.
//!
//! Only specs and activations (and gradient buckets) cross the wire:
//! weights are resolved on each worker from the URIs in its spec.
//! Every wait ends: a peer that goes away is noticed within a fraction of
//! a second ([`wire::Link`]), and the coordinator's waits have a limit.
//! `docs/DISTRIBUTED.md` describes the whole.

mod coordinator;
pub mod device;
mod join;
pub mod mlx_env;
pub mod split;
mod stage;
mod train;
pub mod wire;
mod worker;

pub use coordinator::{shared_gpu, Coordinator, Parallel, Pipeline, Worker};
pub use device::DeviceChoice;
pub use join::connect;
pub use stage::Stage;
pub use train::{write_f32, ResidentTrainSpec};
pub use wire::{TrainResult, WorkerInfo};
pub use worker::{serve, serve_from_env, WorkerOptions, WorkerReport};
