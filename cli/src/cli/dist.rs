//! `rlx-host worker` and `rlx-host dist pipeline|train`: rlx-runtime's
//! distributed engine with the plugin on every worker. Every process reads
//! its place in the group from rlx-driver's environment: `RANK` (0 is the
//! coordinator), `WORLD`, `PEERS` (every rank's `host:port`, comma
//! separated) and `TOPOLOGY` (`mesh`, the default, or `star`).

use crate::distributed::{self, PipelineOptions, TrainOptions, Waits};
use rlx_plugin_api::{parse_device, Mode};
use rlx_plugin_host::dist::{DeviceChoice, WorkerOptions};
use rlx_plugin_host::partition::Fallback;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The plugin's execution mode: lazy, eager or compiled.
    #[arg(long, default_value = "lazy")]
    mode: String,
    /// The plugin device (`gpu:1`, `cpu`); by default `gpu:(local rank)`
    /// where the plugin has GPUs, else `cpu:0`. The local rank is
    /// LOCAL_RANK (or OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
    /// MPI_LOCALRANKID), else RANK - 1.
    #[arg(long)]
    device: Option<String>,
    /// Fail a stage with a node the plugin does not take, naming it,
    /// instead of running that node on rlx-runtime's CPU backend.
    #[arg(long)]
    no_fallback: bool,
    /// Seconds to wait for every rank to join.
    #[arg(long, default_value_t = 60)]
    connect_timeout: u64,
}

#[derive(clap::Subcommand)]
pub enum DistAction {
    /// Cut a model into one stage per worker, ship the stages, run a
    /// batch through and compare the output with rlx-runtime's CPU backend
    /// in this process (the demo's tolerance); optionally time batches.
    Pipeline {
        /// A builtin model (`transformer`, `mlp`, ...) or a `.rlxmodel`
        /// file with one input and one output.
        model: String,
        /// The stages' device directive: `mlx`, `auto` (the plugin where a
        /// worker has one) or `cpu`.
        #[arg(long, default_value = "mlx")]
        device: String,
        /// Seed of the random input and params.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Params from a safetensors file the workers can read (its path
        /// is sent, never its tensors); without it, the seeded params are
        /// written to a temporary file here.
        #[arg(long, value_name = "FILE.safetensors")]
        params: Option<PathBuf>,
        /// The input from a safetensors or `.npy` file.
        #[arg(long, value_name = "FILE")]
        inputs: Option<PathBuf>,
        /// Write the pipeline's output to this safetensors file.
        #[arg(long, value_name = "FILE.safetensors")]
        output: Option<PathBuf>,
        /// Time this many batches through the pipeline (in flight
        /// together), and the whole model on the plugin in this process
        /// in --local-mode.
        #[arg(long, default_value_t = 0)]
        batches: usize,
        /// The mode of the one-process comparison (with --batches).
        #[arg(long, default_value = "lazy")]
        local_mode: String,
        #[command(flatten)]
        waits: WaitArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run a 2-layer MLP (ReLU) tensor parallel: each worker one share of
    /// the hidden layer, joined by MLX's collectives inside its graph
    /// (`mlx.all_sum`, or `mlx.all_gather` with --gather), against the
    /// whole MLP on the plugin in this process.
    TensorParallel(TensorParallelArgs),
    /// Train the digits MLP data-parallel on the workers (rlx-runtime's
    /// `dist::run_train`, SGD with momentum), gradients averaged by the
    /// coordinator every step; report held-out accuracy.
    Train {
        /// The digits file (`tests/data/digits/digits.csv.gz`).
        #[arg(long, value_name = "FILE.csv.gz")]
        data: Option<PathBuf>,
        #[arg(long, default_value_t = 20)]
        epochs: usize,
        /// Rows per worker per step.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// The learning rate (default 0.1 for SGD, 0.01 for Adam with
        /// --resident).
        #[arg(long)]
        lr: Option<f32>,
        #[arg(long, default_value_t = 0.9)]
        momentum: f32,
        /// The workers' device directive: `mlx`, `auto` or `cpu`.
        #[arg(long, default_value = "mlx")]
        device: String,
        /// Send each worker its shard and init params over the wire (for
        /// workers without a filesystem shared with the coordinator).
        #[arg(long)]
        push_data: bool,
        /// Keep training on the device: rlx-runtime's ResidentTrainer
        /// (Adam in the step) on every worker, gradients summed inside
        /// each step by MLX's collectives (`mlx.grad_sum`), nothing through
        /// the coordinator until the end.
        #[arg(long)]
        resident: bool,
        /// Write the trained params to this safetensors file.
        #[arg(long, value_name = "FILE.safetensors")]
        output: Option<PathBuf>,
        #[command(flatten)]
        waits: WaitArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
pub struct TensorParallelArgs {
    /// Rows of the input.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// The MLP's input and output width.
    #[arg(long, default_value_t = 1024)]
    d: usize,
    /// The MLP's hidden width (divided between the workers).
    #[arg(long, default_value_t = 4096)]
    h: usize,
    /// Gather the hidden columns (`mlx.all_gather`) instead of summing
    /// partial products (`mlx.all_sum`).
    #[arg(long)]
    gather: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Batches timed.
    #[arg(long, default_value_t = 50)]
    batches: usize,
    /// The mode of the one-process comparison (run here, on the plugin).
    #[arg(long, default_value = "lazy")]
    local_mode: String,
    #[command(flatten)]
    waits: WaitArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct WaitArgs {
    /// Seconds to wait for every rank to join.
    #[arg(long, default_value_t = 60)]
    connect_timeout: u64,
    /// Seconds to wait for any one answer from a worker (a compile, a
    /// batch's output, a gradient bucket).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

impl WaitArgs {
    fn waits(&self) -> Waits {
        Waits {
            connect: Duration::from_secs(self.connect_timeout),
            answer: Duration::from_secs(self.timeout),
        }
    }
}

fn mode(name: &str) -> Result<Mode, String> {
    Mode::from_name(name)
        .ok_or_else(|| format!("unknown mode {name:?} (expected lazy, eager or compiled)"))
}

pub fn worker(args: WorkerArgs, plugins: Vec<PathBuf>) -> Result<(), String> {
    let device = match &args.device {
        None => DeviceChoice::ByLocalRank,
        Some(d) => {
            let (k, o) = parse_device(d)
                .ok_or_else(|| format!("--device {d:?}: expected cpu, gpu or gpu:N"))?;
            DeviceChoice::Named(k, o)
        }
    };
    let opts = WorkerOptions {
        install: rlx_plugin_host::Options {
            plugins,
            mode: mode(&args.mode)?,
            fallback: if args.no_fallback {
                Fallback::Never
            } else {
                Fallback::Cpu
            },
            ..Default::default()
        },
        device,
        connect_timeout: Duration::from_secs(args.connect_timeout),
        log: true,
    };
    let r = rlx_plugin_host::dist::serve_from_env(&opts)?;
    eprintln!(
        "rlx worker {}: done ({} stage(s), {} activation(s), {} training job(s))",
        r.rank, r.stages, r.activations, r.train_jobs
    );
    Ok(())
}

pub fn dist(action: DistAction, plugins: Vec<PathBuf>) -> Result<(), String> {
    match action {
        DistAction::Pipeline {
            model,
            device,
            seed,
            params,
            inputs,
            output,
            batches,
            local_mode,
            waits,
            json,
        } => {
            let opts = PipelineOptions {
                model,
                seed,
                params,
                inputs,
                output,
                device,
                batches,
                local_mode: Some(mode(&local_mode)?),
                plugins,
                waits: waits.waits(),
            };
            let r = distributed::pipeline(&opts)?;
            let (abs, rel, ok) = r.vs_cpu;
            if json {
                let v = serde_json::json!({
                    "stages": r.stages.iter().map(|(n, d)| serde_json::json!({"nodes": n, "device": d})).collect::<Vec<_>>(),
                    "max_abs_err": abs,
                    "max_rel_err": rel,
                    "within_tolerance": ok,
                    "pipeline_batches_per_s": r.pipeline_batches_per_s,
                    "local_batches_per_s": r.local_batches_per_s,
                });
                println!("{v}");
            } else {
                for (i, (n, d)) in r.stages.iter().enumerate() {
                    println!("stage {i}: {n} nodes on rank {} ({d})", i + 1);
                }
                println!(
                    "output vs rlx-runtime's CPU backend: max abs {abs:.2e}, max rel {rel:.2e} ({})",
                    if ok { "within tolerance" } else { "BEYOND tolerance" }
                );
                if let Some(p) = r.pipeline_batches_per_s {
                    println!("pipeline: {p:.1} batches/s");
                }
                if let Some(l) = r.local_batches_per_s {
                    println!("one process on the plugin: {l:.1} batches/s");
                }
            }
            if !ok {
                return Err("the pipeline's output differs from the CPU backend's".into());
            }
            Ok(())
        }
        DistAction::TensorParallel(a) => {
            let opts = crate::distributed::TensorParallelOptions {
                batch: a.batch,
                d: a.d,
                h: a.h,
                gather: a.gather,
                seed: a.seed,
                batches: a.batches,
                local_mode: mode(&a.local_mode)?,
                plugins,
                waits: a.waits.waits(),
            };
            let r = distributed::tensor_parallel(&opts)?;
            let (abs, rel, ok) = r.vs_one_process;
            if a.json {
                let v = serde_json::json!({
                    "devices": r.devices,
                    "max_abs_err": abs,
                    "max_rel_err": rel,
                    "within_tolerance": ok,
                    "parallel_batches_per_s": r.parallel_batches_per_s,
                    "local_batches_per_s": r.local_batches_per_s,
                });
                println!("{v}");
            } else {
                for (i, d) in r.devices.iter().enumerate() {
                    println!("rank {}: {d}", i + 1);
                }
                println!(
                    "outputs vs the whole MLP in one process: max abs {abs:.2e}, max rel {rel:.2e} ({})",
                    if ok { "within tolerance" } else { "BEYOND tolerance" }
                );
                println!(
                    "tensor parallel: {:.1} batches/s; one process: {:.1} batches/s",
                    r.parallel_batches_per_s, r.local_batches_per_s
                );
            }
            if !ok {
                return Err("the tensor-parallel outputs differ from one process's".into());
            }
            Ok(())
        }
        DistAction::Train {
            data,
            epochs,
            batch,
            lr,
            momentum,
            device,
            push_data,
            resident,
            output,
            waits,
            json,
        } => {
            if resident && push_data {
                return Err("--push-data is for the coordinator-averaged training; --resident workers read their shards from files".into());
            }
            let opts = TrainOptions {
                epochs,
                batch,
                lr: lr.unwrap_or(if resident { 0.01 } else { 0.1 }),
                momentum,
                device,
                push_data,
                resident,
                output,
                ..TrainOptions::digits(
                    data.unwrap_or_else(crate::digits::default_path),
                    waits.waits(),
                )
            };
            let r = distributed::train(&opts)?;
            if json {
                let v = serde_json::json!({
                    "workers": r.workers.iter().map(|w| serde_json::json!({
                        "device": w.device, "samples": w.samples, "first_loss": w.first_loss,
                        "last_loss": w.last_loss, "compute_s": w.compute_s, "comm_s": w.comm_s,
                    })).collect::<Vec<_>>(),
                    "steps": r.steps,
                    "steps_per_s": r.steps_per_s,
                    "held_out_accuracy": r.held_out_accuracy,
                    "worker_spread": r.worker_spread,
                });
                println!("{v}");
            } else {
                for (i, w) in r.workers.iter().enumerate() {
                    println!(
                        "rank {}: {} - loss {:.4} -> {:.4}, {} samples, compute {:.2} s, reduce {:.2} s",
                        i + 1,
                        w.device,
                        w.first_loss,
                        w.last_loss,
                        w.samples,
                        w.compute_s,
                        w.comm_s
                    );
                }
                println!(
                    "{} steps, {:.1} steps/s; held-out accuracy {:.2}%",
                    r.steps,
                    r.steps_per_s,
                    100.0 * r.held_out_accuracy
                );
            }
            Ok(())
        }
    }
}
