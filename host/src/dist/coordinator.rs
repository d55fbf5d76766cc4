//! Rank 0: gathers what the workers have, ships them pipeline stages or
//! training jobs, feeds and collects, and reports any worker's failure as
//! one error.

use super::wire::{rlx_tag, tag, Link, Ready, TrainResult, WorkerInfo};
use rlx_runtime::dist::node::{NodeCaps, NodeConfig, PeerSource, ProcessGroup};
use rlx_runtime::dist::{push_shards, StageSpec, TrainSpec};
use std::sync::Arc;
use std::time::Duration;

/// One worker as it introduced itself.
#[derive(Clone, Debug)]
pub struct Worker {
    pub caps: NodeCaps,
    pub info: WorkerInfo,
}

/// The coordinator of a group whose other ranks run [`super::serve`].
/// Dropping it ends the session (the workers exit).
pub struct Coordinator {
    group: Arc<ProcessGroup>,
    pub workers: Vec<Worker>,
    /// The longest wait for any one answer (a compile, a batch's output).
    pub timeout: Duration,
    /// Each rank's host, from static peers (None with discovery).
    hosts: Vec<Option<String>>,
    ended: bool,
}

/// Two workers on one host and one GPU, by rank: NCCL (MLX's GPU
/// collectives) refuses a GPU twice in a group, and MLX exits the process
/// when it does. `hosts` by rank (0 the coordinator), `devices` the
/// workers' plugin devices (`gpu:0 (...)`), from rank 1.
pub fn shared_gpu(hosts: &[Option<String>], devices: &[Option<String>]) -> Option<String> {
    let mut seen: Vec<(&str, &str, usize)> = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        let (Some(d), Some(Some(h))) = (d, hosts.get(i + 1)) else {
            continue;
        };
        let label = d.split_whitespace().next().unwrap_or(d);
        if !label.starts_with("gpu:") {
            continue;
        }
        if let Some((_, _, r)) = seen.iter().find(|(sh, sl, _)| *sh == h && *sl == label) {
            return Some(format!(
                "ranks {r} and {} both run on {label} of {h}: MLX's GPU collectives (NCCL) need one GPU per worker",
                i + 1
            ));
        }
        seen.push((h, label, i + 1));
    }
    None
}

impl Coordinator {
    /// [`Coordinator::connect`] with the group from rlx-driver's
    /// environment (`RANK=0`, `WORLD`, `PEERS`, `TOPOLOGY`).
    pub fn from_env(connect_timeout: Duration, timeout: Duration) -> Result<Self, String> {
        Self::connect(&NodeConfig::from_env()?, connect_timeout, timeout)
    }

    /// Join as rank 0 and read every worker's capabilities and
    /// information.
    pub fn connect(
        cfg: &NodeConfig,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Self, String> {
        if cfg.rank != 0 {
            return Err(format!("the coordinator is rank 0 (RANK={})", cfg.rank));
        }
        if cfg.world < 2 {
            return Err("WORLD must be at least 2: the coordinator and a worker".into());
        }
        let group = super::join::connect(cfg, connect_timeout)?;
        let mut workers = Vec::new();
        let link = Link::new(&group, (1..cfg.world).collect(), true);
        for r in 1..cfg.world {
            let what = format!("waiting for rank {r}'s capabilities");
            let caps = link.recv(r, rlx_tag::CAPS_OR_TRAIN, Some(timeout), &what)?;
            let caps: NodeCaps = serde_json::from_slice(&caps)
                .map_err(|e| format!("rank {r}'s capabilities do not parse: {e}"))?;
            let info = link.recv(r, tag::INFO, Some(timeout), &what)?;
            let info: WorkerInfo = serde_json::from_slice(&info).map_err(|e| {
                format!("rank {r} is not an rlx-plugin-host worker (its information does not parse: {e})")
            })?;
            workers.push(Worker { caps, info });
        }
        drop(link);
        let hosts = match &cfg.peers {
            PeerSource::Static(p) => p
                .iter()
                .map(|a| a.rsplit_once(':').map(|(h, _)| h.to_string()))
                .collect(),
            _ => Vec::new(),
        };
        Ok(Coordinator {
            group,
            workers,
            timeout,
            hosts,
            ended: false,
        })
    }

    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.group
    }

    /// Waits that watch every worker and read their error reports.
    fn link(&self) -> Link<'_> {
        Link::new(&self.group, (1..self.group.world_size()).collect(), true)
    }

    /// Fail before shipping when a job names the plugin and the worker has
    /// none.
    fn check_device(&self, rank: u32, directive: &str) -> Result<(), String> {
        let w = &self.workers[rank as usize - 1];
        let d = directive.trim();
        if d.eq_ignore_ascii_case("mlx") && w.info.plugin.is_none() {
            return Err(format!(
                "rank {rank} cannot run a job on device \"mlx\": it has no MLX plugin ({}); its devices: {}",
                w.info.no_plugin.as_deref().unwrap_or("none installed"),
                w.caps.devices.join(", ")
            ));
        }
        Ok(())
    }

    /// Jobs joined by MLX's collectives need each worker on its own GPU.
    fn check_gpus_distinct(&self) -> Result<(), String> {
        let devices: Vec<Option<String>> = self
            .workers
            .iter()
            .map(|w| w.info.plugin_device.clone())
            .collect();
        match shared_gpu(&self.hosts, &devices) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Wait for every worker's set-up answer; the devices they use.
    fn wait_ready(&self, link: &Link, job: &str) -> Result<Vec<String>, String> {
        let mut devices = Vec::new();
        for r in 1..self.group.world_size() {
            let what = format!("waiting for rank {r} to set up its {job}");
            let bytes = link.recv(r, tag::READY, Some(self.timeout), &what)?;
            let ready: Ready = serde_json::from_slice(&bytes)
                .map_err(|e| format!("rank {r}'s answer does not parse: {e}"))?;
            devices.push(ready.result.map_err(|e| format!("rank {r}: {e}"))?);
        }
        Ok(devices)
    }

    /// Check one spec per worker, ship `specs[i]` to rank `i + 1` on
    /// `tag` (each naming its device directive through `device`), and
    /// return the waits that follow.
    fn ship<S: serde::Serialize>(
        &self,
        specs: &[S],
        device: impl Fn(&S) -> &str,
        tag: u32,
        what: &str,
    ) -> Result<Link<'_>, String> {
        let n = self.group.world_size() - 1;
        if specs.len() != n as usize {
            return Err(format!(
                "{} {what}(s) for {n} worker(s): one per worker",
                specs.len()
            ));
        }
        for (i, s) in specs.iter().enumerate() {
            self.check_device(i as u32 + 1, device(s))?;
        }
        let link = self.link();
        for (i, s) in specs.iter().enumerate() {
            let bytes = serde_json::to_vec(s).map_err(|e| e.to_string())?;
            link.send(i as u32 + 1, tag, &bytes, what)?;
        }
        Ok(link)
    }

    /// Ship `stages[i]` to rank `i + 1` (one stage per worker, in pipeline
    /// order) and wait until each has compiled it.
    pub fn pipeline(&self, stages: Vec<StageSpec>) -> Result<Pipeline<'_>, String> {
        let link = self.ship(&stages, |s| &s.device, rlx_tag::SPEC, "stage")?;
        let devices = self.wait_ready(&link, "stage")?;
        Ok(Pipeline { co: self, devices })
    }

    /// Ship `stages[i]` to rank `i + 1`, all run side by side on the same
    /// input (each worker's share of a tensor-parallel layer, joined by
    /// MLX's collectives inside the stages), and wait until each has
    /// compiled it. The workers set up MLX's group as they compile.
    pub fn parallel(&self, stages: Vec<StageSpec>) -> Result<Parallel<'_>, String> {
        self.check_gpus_distinct()?;
        let link = self.ship(&stages, |s| &s.device, tag::PARALLEL, "stage")?;
        let devices = self.wait_ready(&link, "stage")?;
        Ok(Parallel { co: self, devices })
    }

    /// Ship `specs[i]` to rank `i + 1` (each with its own shard), push
    /// the shards of those that ask (`push_data`), then average gradients
    /// until every worker has finished; their results, by rank.
    pub fn train(&self, specs: &[TrainSpec]) -> Result<Vec<TrainResult>, String> {
        let link = self.ship(
            specs,
            |s| &s.device,
            rlx_tag::CAPS_OR_TRAIN,
            "training spec",
        )?;
        for (i, s) in specs.iter().enumerate() {
            if s.push_data {
                push_shards(&self.group, i as u32 + 1, s, |uri| {
                    log::warn!("no resolver for {uri}");
                    Vec::new()
                })?;
            }
        }
        self.wait_ready(&link, "training")?;
        super::train::serve_reduce(&link, self.timeout)
    }

    /// Ship `specs[i]` to rank `i + 1` (each with its own shard) and wait
    /// for every worker's result: training kept on the device, the
    /// gradients summed inside each step by MLX's collectives (so nothing
    /// passes through this rank while it trains).
    pub fn train_resident(
        &self,
        specs: &[super::train::ResidentTrainSpec],
    ) -> Result<Vec<TrainResult>, String> {
        self.check_gpus_distinct()?;
        let link = self.ship(specs, |s| &s.device, tag::RESIDENT_TRAIN, "training spec")?;
        self.wait_ready(&link, "training")?;
        (1..self.group.world_size())
            .map(|r| {
                let what = format!("waiting for rank {r}'s training result");
                let bytes = link.recv(r, tag::RESULT, Some(self.timeout), &what)?;
                serde_json::from_slice(&bytes)
                    .map_err(|e| format!("rank {r}'s training result does not parse: {e}"))
            })
            .collect()
    }

    /// End the session: every worker exits cleanly.
    pub fn end(mut self) {
        self.send_end();
    }

    fn send_end(&mut self) {
        if !self.ended {
            self.ended = true;
            for r in 1..self.group.world_size() {
                let _ = self.group.transport().send_bytes(r, tag::END, &[]);
            }
            // Let the messages leave before the sockets close.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.send_end();
    }
}

/// Stages shipped and compiled, ready for batches.
pub struct Pipeline<'c> {
    co: &'c Coordinator,
    /// The device each worker runs its stage on, by rank.
    pub devices: Vec<String>,
}

impl Pipeline<'_> {
    /// One batch through every stage; the last stage's output.
    pub fn run(&self, x: &[f32]) -> Result<Vec<f32>, String> {
        self.run_many(&[x]).map(|mut v| v.remove(0))
    }

    /// Batches in flight together (each stage works on one while the
    /// next works on the one before); their outputs in order.
    pub fn run_many<X: AsRef<[f32]>>(&self, xs: &[X]) -> Result<Vec<Vec<f32>>, String> {
        let link = self.co.link();
        let last = self.co.group.world_size() - 1;
        for x in xs {
            link.send_f32(1, rlx_tag::ACT, x.as_ref(), "a batch")?;
        }
        xs.iter()
            .map(|_| {
                link.recv_f32(
                    last,
                    rlx_tag::ACT,
                    Some(self.co.timeout),
                    "waiting for the pipeline's output",
                )
            })
            .collect()
    }
}

/// Stages running side by side, ready for inputs.
pub struct Parallel<'c> {
    co: &'c Coordinator,
    /// The device each worker runs its stage on, by rank.
    pub devices: Vec<String>,
}

impl Parallel<'_> {
    /// `x` to every worker; each worker's output, by rank.
    pub fn run(&self, x: &[f32]) -> Result<Vec<Vec<f32>>, String> {
        let link = self.co.link();
        let n = self.co.group.world_size();
        // The same bytes to every worker, made once.
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        for r in 1..n {
            link.send(r, rlx_tag::ACT, &bytes, "an input")?;
        }
        (1..n)
            .map(|r| {
                link.recv_f32(
                    r,
                    rlx_tag::ACT,
                    Some(self.co.timeout),
                    &format!("waiting for rank {r}'s output"),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::shared_gpu;

    #[test]
    fn two_workers_on_one_gpu_of_one_host_are_refused() {
        let h = |s: &str| Some(s.to_string());
        let hosts = [h("10.0.0.1"), h("10.0.0.1"), h("10.0.0.1"), h("10.0.0.2")];
        let gpu0 = h("gpu:0 (NVIDIA H100)");
        // Ranks 1 and 2 share 10.0.0.1's gpu:0.
        let e = shared_gpu(&hosts, &[gpu0.clone(), gpu0.clone(), gpu0.clone()]).unwrap();
        assert!(e.contains("ranks 1 and 2") && e.contains("gpu:0"), "{e}");
        // One per GPU, or the same ordinal on another host: fine.
        assert!(shared_gpu(&hosts, &[gpu0.clone(), h("gpu:1 (x)"), gpu0.clone()]).is_none());
        // CPU devices share freely.
        assert!(shared_gpu(&hosts, &[h("cpu:0 (cpu)"), h("cpu:0 (cpu)")]).is_none());
    }
}
