//! A worker process: joins the group, installs the plugin, says what it
//! has, and serves the coordinator's jobs (pipeline stages and
//! data-parallel training) until the coordinator ends the session.

use super::device::{self, DeviceChoice};
use super::stage::Stage;
use super::wire::{rlx_tag, tag, Link, Ready, TrainResult, WorkerInfo};
use crate::guard;
use rlx_plugin_loader::LoadedPlugin;
use rlx_runtime::dist::node::{send_caps, NodeCaps, NodeConfig, NodeRole, ProcessGroup};
use rlx_runtime::dist::{StageSpec, TrainSpec};
use rlx_runtime::Device;
use std::sync::Arc;
use std::time::Duration;

/// How a worker starts.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Plugin discovery and registration ([`crate::install`]); its
    /// `device` must stay `Device::Mlx`, the device stages name.
    pub install: crate::Options,
    /// The plugin device to run on.
    pub device: DeviceChoice,
    /// How long to wait for every peer to join.
    pub connect_timeout: Duration,
    /// Print a line per job to stderr.
    pub log: bool,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            install: crate::Options::default(),
            device: DeviceChoice::default(),
            connect_timeout: Duration::from_secs(60),
            log: true,
        }
    }
}

/// What a worker did in its session.
#[derive(Clone, Debug, Default)]
pub struct WorkerReport {
    pub rank: u32,
    /// The plugin it installed (`"mlx 0.2.19"`), if any.
    pub plugin: Option<String>,
    /// The plugin device it ran on (`"cpu:0 (...)"`), if any.
    pub plugin_device: Option<String>,
    pub stages: usize,
    pub activations: usize,
    pub train_jobs: usize,
}

/// [`serve`] with the group from rlx-driver's environment (`RANK`,
/// `WORLD`, `PEERS`, `TOPOLOGY`: `rlx_runtime::dist::node::NodeConfig::from_env`).
pub fn serve_from_env(opts: &WorkerOptions) -> Result<WorkerReport, String> {
    let cfg = NodeConfig::from_env()?;
    serve(&cfg, opts)
}

/// Be a worker of the group `cfg` describes until the coordinator (rank 0)
/// ends the session: `Ok` then, an error naming the cause when a job
/// fails, the coordinator goes away or a peer the job needs does. Before
/// returning an error it tells the coordinator why (when it still can).
pub fn serve(cfg: &NodeConfig, opts: &WorkerOptions) -> Result<WorkerReport, String> {
    let (rank, world) = (cfg.rank, cfg.world);
    if rank == 0 {
        return Err("RANK=0 is the coordinator; a worker has rank 1 or above".into());
    }
    if rank >= world {
        return Err(format!("RANK={rank} is not below WORLD={world}"));
    }
    let mut report = WorkerReport {
        rank,
        ..Default::default()
    };
    let (local, local_from) = device::local_rank(rank)?;
    // Before the plugin starts: MLX's collectives read these (the
    // hostfile is removed when this returns).
    let _hostfile = super::mlx_env::prepare(cfg)?;
    // The plugin first, so the capabilities sent next are true.
    let (plugin, no_plugin) = match crate::install(&opts.install) {
        Ok(i) => (Some(i.plugin), None),
        Err(e) => (None, Some(e)),
    };
    let mut plugin_device = None;
    if let Some(p) = &plugin {
        let d = device::pick_plugin_device(p, opts.device, local)?;
        crate::backend::set_plugin_device(opts.install.device, Some((d.kind, d.ordinal)));
        report.plugin = Some(format!(
            "{} {}",
            p.descriptor().name,
            p.descriptor().version
        ));
        report.plugin_device = Some(d.to_string());
        plugin_device = Some(d);
    }
    let group = super::join::connect(cfg, opts.connect_timeout)?;
    let mut devices = device::available_tokens();
    if let (Some(p), Some(used)) = (&plugin, &plugin_device) {
        // Beside rlx-runtime's tokens: the plugin's devices (`mlx:gpu:1`)
        // and the one its stages use (`mlx@gpu:0`).
        devices.extend(
            p.descriptor()
                .device_infos
                .iter()
                .map(|d| format!("mlx:{}", d.label())),
        );
        devices.push(format!("mlx@{}", used.label()));
    }
    let caps = NodeCaps {
        rank,
        role: NodeRole::Worker,
        devices,
        platform: rlx_runtime::dist::node::platform_tag().into(),
    };
    send_caps(&group, &caps)?;
    let info = WorkerInfo {
        rank,
        plugin: report.plugin.clone(),
        no_plugin: no_plugin.clone(),
        plugin_device: report.plugin_device.clone(),
        mode: opts.install.mode.name().to_string(),
        local_rank: local_from,
    };
    let link = Link::new(&group, vec![0], false);
    link.send(
        0,
        tag::INFO,
        &serde_json::to_vec(&info).map_err(|e| e.to_string())?,
        "this worker's information",
    )?;
    if opts.log {
        eprintln!(
            "rlx worker {rank}/{world}: plugin {}, device {}",
            report.plugin.as_deref().unwrap_or("none"),
            report
                .plugin_device
                .as_deref()
                .unwrap_or("cpu (rlx-runtime)")
        );
    }
    let mut session = Session {
        group: &group,
        plugin: plugin.as_deref(),
        no_plugin: no_plugin.as_deref(),
        report,
        log: opts.log,
    };
    let result = session.run();
    if let Err(e) = &result {
        // Tell the coordinator, if it is still there, then leave.
        let _ = group.transport().send_bytes(0, tag::ERROR, e.as_bytes());
        std::thread::sleep(Duration::from_millis(50));
    }
    result.map(|()| session.report)
}

/// A message that starts or ends a job.
enum Job {
    /// A pipeline stage (rlx's protocol).
    Stage(Vec<u8>),
    /// A stage run side by side with the other workers' (tensor parallel).
    Parallel(Vec<u8>),
    Train(Vec<u8>),
    /// Data-parallel training kept on the device (`ResidentTrainSpec`).
    ResidentTrain(Vec<u8>),
    End,
}

/// The sources of a job message, in [`Job`] order.
const JOB_SOURCES: [(u32, u32); 5] = [
    (0, rlx_tag::SPEC),
    (0, tag::PARALLEL),
    (0, rlx_tag::CAPS_OR_TRAIN),
    (0, tag::RESIDENT_TRAIN),
    (0, tag::END),
];

fn job(index: usize, bytes: Vec<u8>) -> Job {
    match index {
        0 => Job::Stage(bytes),
        1 => Job::Parallel(bytes),
        2 => Job::Train(bytes),
        3 => Job::ResidentTrain(bytes),
        _ => Job::End,
    }
}

struct Session<'a> {
    group: &'a Arc<ProcessGroup>,
    plugin: Option<&'a LoadedPlugin>,
    no_plugin: Option<&'a str>,
    report: WorkerReport,
    log: bool,
}

impl Session<'_> {
    fn run(&mut self) -> Result<(), String> {
        let link = Link::new(self.group, vec![0], false);
        let mut next = {
            let (i, b) = link.recv_any(&JOB_SOURCES, None, "waiting for a job")?;
            job(i, b)
        };
        loop {
            next = match next {
                Job::End => return Ok(()),
                Job::Stage(bytes) => self.stage(&bytes, false)?,
                Job::Parallel(bytes) => self.stage(&bytes, true)?,
                Job::Train(bytes) => self.train(&bytes)?,
                Job::ResidentTrain(bytes) => self.train_resident(&bytes)?,
            };
        }
    }

    fn ready(&self, result: Result<String, String>) -> Result<(), String> {
        let link = Link::new(self.group, vec![0], false);
        let bytes = serde_json::to_vec(&Ready { result }).map_err(|e| e.to_string())?;
        link.send(0, tag::READY, &bytes, "the job's set-up result")
    }

    /// Set up a stage, then run activations until the next job: in a
    /// pipeline from the previous rank into the next (rank 0 after the
    /// last); side by side (`parallel`), from rank 0 back to it.
    fn stage(&mut self, bytes: &[u8], parallel: bool) -> Result<Job, String> {
        let (rank, world) = (self.group.rank(), self.group.world_size());
        let setup = serde_json::from_slice::<StageSpec>(bytes)
            .map_err(|e| format!("the stage spec does not parse: {e}"))
            .and_then(|spec| {
                let dev = device::resolve_directive(&spec.device, self.plugin, self.no_plugin)?;
                let nodes = spec.graph.len();
                Stage::build(spec, dev).map(|s| (s, nodes))
            });
        let (mut stage, nodes) = match setup {
            Ok(s) => s,
            Err(e) => {
                // The coordinator reports it; this worker waits for what
                // comes next (another job, or the end).
                self.ready(Err(e))?;
                return self.wait_job();
            }
        };
        self.ready(Ok(device_label(stage.device, &self.report)))?;
        self.report.stages += 1;
        if self.log {
            eprintln!(
                "rlx worker {rank}: stage of {nodes} nodes on {}",
                device_label(stage.device, &self.report)
            );
        }
        let (prev, next) = if parallel {
            (0, 0)
        } else {
            (rank - 1, if rank + 1 < world { rank + 1 } else { 0 })
        };
        let mut watch = vec![0, prev, next];
        watch.sort_unstable();
        watch.dedup();
        let link = Link::new(self.group, watch, false);
        let mut sources = vec![(prev, rlx_tag::ACT)];
        sources.extend(JOB_SOURCES);
        loop {
            let (i, bytes) = link.recv_any(&sources, None, "waiting for an activation")?;
            if i > 0 {
                return Ok(job(i - 1, bytes));
            }
            let y = stage.run(&super::wire::f32s(&bytes))?;
            link.send_f32(next, rlx_tag::ACT, &y, "the stage's output")?;
            self.report.activations += 1;
        }
    }

    fn wait_job(&self) -> Result<Job, String> {
        let link = Link::new(self.group, vec![0], false);
        let (i, b) = link.recv_any(&JOB_SOURCES, None, "waiting for a job")?;
        Ok(job(i, b))
    }

    /// A data-parallel training job: rlx-runtime's `dist::run_train` on
    /// this worker's shard, its gradient buckets averaged by the
    /// coordinator (sent on GRAD, the mean back on MEAN).
    fn train(&mut self, bytes: &[u8]) -> Result<Job, String> {
        let rank = self.group.rank();
        let setup = serde_json::from_slice::<TrainSpec>(bytes)
            .map_err(|e| format!("the training spec does not parse: {e}"))
            .and_then(|mut spec| {
                let dev = device::resolve_directive(&spec.device, self.plugin, self.no_plugin)?;
                // run_train resolves the directive again: give it the one
                // just checked, so it cannot pick another device.
                spec.device = dev.as_arg().to_string();
                Ok((spec, dev))
            });
        let (mut spec, dev) = match setup {
            Ok(s) => s,
            Err(e) => {
                self.ready(Err(e))?;
                return self.wait_job();
            }
        };
        let link = Link::new(self.group, vec![0], false);
        let dir = tempfile_dir(rank)?;
        if spec.push_data {
            super::train::pull_shards(&link, &mut spec, &dir)?;
        }
        self.ready(Ok(device_label(dev, &self.report)))?;
        if self.log {
            eprintln!(
                "rlx worker {rank}: training on {} ({} epochs, batch {})",
                device_label(dev, &self.report),
                spec.lr_per_epoch.len(),
                spec.batch
            );
        }
        let world = self.group.world_size() - 1;
        let reduce = |flat: &[f32]| -> Vec<f32> {
            let mean = link
                .send_f32(0, tag::GRAD, flat, "a gradient bucket")
                .and_then(|()| {
                    link.recv_f32(0, tag::MEAN, None, "waiting for the averaged gradients")
                });
            match mean {
                Ok(m) if m.len() == flat.len() => m,
                Ok(m) => panic!(
                    "the coordinator averaged {} values for a bucket of {}",
                    m.len(),
                    flat.len()
                ),
                // run_train's reduce has no error channel: unwind to the
                // catch below, which reports it.
                Err(e) => panic!("{e}"),
            }
        };
        let (metrics, params) = guard::catch("training", || {
            rlx_runtime::dist::run_train(&spec, world, |_uri| Vec::new(), reduce, false)
        })??;
        let _ = std::fs::remove_dir_all(&dir);
        let result = TrainResult {
            device: device_label(dev, &self.report),
            samples: metrics.samples,
            wall_s: metrics.wall_s,
            compute_s: metrics.compute_s,
            comm_s: metrics.comm_s,
            first_loss: metrics.first_loss,
            last_loss: metrics.last_loss,
            params,
        };
        self.finish_training(&result)
    }

    /// Send a training job's result; then wait for the next job.
    fn finish_training(&mut self, result: &TrainResult) -> Result<Job, String> {
        let link = Link::new(self.group, vec![0], false);
        link.send(
            0,
            tag::RESULT,
            &serde_json::to_vec(result).map_err(|e| e.to_string())?,
            "the training result",
        )?;
        self.report.train_jobs += 1;
        self.wait_job()
    }

    /// Data-parallel training kept on the device: a `ResidentTrainer` on
    /// this worker's shard, gradients summed between the workers inside
    /// each step by MLX's collectives.
    fn train_resident(&mut self, bytes: &[u8]) -> Result<Job, String> {
        let rank = self.group.rank();
        let setup = serde_json::from_slice::<super::train::ResidentTrainSpec>(bytes)
            .map_err(|e| format!("the training spec does not parse: {e}"))
            .and_then(|spec| {
                let dev = device::resolve_directive(&spec.device, self.plugin, self.no_plugin)?;
                super::train::ResidentJob::build(spec, dev).map(|j| (j, dev))
            });
        let (job, dev) = match setup {
            Ok(j) => j,
            Err(e) => {
                self.ready(Err(e))?;
                return self.wait_job();
            }
        };
        let label = format!(
            "{}{}",
            device_label(dev, &self.report),
            if job.is_resident() {
                ", resident"
            } else {
                ", host-chained"
            }
        );
        self.ready(Ok(label.clone()))?;
        if self.log {
            eprintln!("rlx worker {rank}: training on {label}");
        }
        let result = job.train(label)?;
        self.finish_training(&result)
    }
}

/// `mlx (cpu:0 ...)` for the plugin, rlx-runtime's name otherwise.
fn device_label(dev: Device, report: &WorkerReport) -> String {
    match (dev, &report.plugin_device) {
        (Device::Mlx, Some(d)) => format!("mlx {d}"),
        _ => dev.as_arg().to_string(),
    }
}

/// A private directory for pushed shards.
fn tempfile_dir(rank: u32) -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("rlx-worker-{}-rank{rank}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}
