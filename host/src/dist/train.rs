//! Data-parallel training's two sides beyond `rlx_runtime::dist::run_train`:
//! a worker receiving the shards the coordinator pushes, and the
//! coordinator averaging the workers' gradient buckets.

use super::wire::{tag, Link, TrainResult};
use crate::guard;
use rlx_ir::{Graph, Op};
use rlx_runtime::dist::{DataRef, TrainSpec, WeightCache, WeightRef};
use rlx_runtime::train::{AdamSpec, ResidentTrainer, TrainableParam};
use rlx_runtime::Device;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// A data-parallel training job kept on the device: every worker runs
/// rlx-runtime's `ResidentTrainer` (Adam inside the step, params and
/// moments resident in the plugin) on its shard, and the gradients are
/// summed between the workers inside the step by MLX's collectives: the
/// forward reads each param through `mlx.grad_sum` and scales its loss by
/// 1 / workers. Nothing crosses rlx's transport while it trains.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ResidentTrainSpec {
    /// The replica's forward: `outputs[0]` the scalar loss.
    pub graph: Graph,
    /// Every trainable param and where its initial value is.
    pub params: Vec<WeightRef>,
    /// Inputs fed each step from this worker's shard (`rlx_runtime::dist`'s
    /// `DataRef`: the shard is `shard_start .. shard_start + shard_len`).
    pub data: Vec<DataRef>,
    pub batch: usize,
    pub epochs: usize,
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// The device directive (`mlx`, `auto`).
    pub device: String,
}

/// This worker's rows of one fed input: `elem` values a row.
fn shard(cache: &mut WeightCache, d: &DataRef) -> Result<Vec<f32>, String> {
    let all = cache
        .f32(&d.uri)
        .map_err(|e| format!("data {:?} ({}): {e}", d.input, d.uri))?;
    let (a, b) = (
        d.shard_start * d.elem,
        (d.shard_start + d.shard_len) * d.elem,
    );
    all.get(a..b).map(<[f32]>::to_vec).ok_or_else(|| {
        format!(
            "data {:?} ({}): rows {}..{} of {} values, {} a row: out of range",
            d.input,
            d.uri,
            d.shard_start,
            d.shard_start + d.shard_len,
            all.len(),
            d.elem
        )
    })
}

/// A compiled resident trainer and this worker's data, ready to train.
pub struct ResidentJob {
    trainer: ResidentTrainer,
    feeds: Vec<(String, usize, Vec<f32>)>,
    batch: usize,
    epochs: usize,
}

impl ResidentJob {
    /// Resolve the params and this worker's shards, and compile the step
    /// on `device`.
    pub fn build(spec: ResidentTrainSpec, device: Device) -> Result<ResidentJob, String> {
        let mut cache = WeightCache::new();
        let mut initial = HashMap::new();
        let mut wrt = Vec::new();
        for w in &spec.params {
            let node = spec
                .graph
                .nodes()
                .iter()
                .find(|n| matches!(&n.op, Op::Param { name } if name == &w.name))
                .ok_or_else(|| format!("param {:?} is not in the graph", w.name))?;
            let v = cache
                .f32(&w.uri)
                .map_err(|e| format!("param {:?} ({}): {e}", w.name, w.uri))?;
            wrt.push(TrainableParam {
                name: w.name.clone(),
                node: node.id,
            });
            initial.insert(w.name.clone(), v);
        }
        let feeds = spec
            .data
            .iter()
            .map(|d| Ok((d.input.clone(), d.elem, shard(&mut cache, d)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let adam = AdamSpec {
            lr: spec.lr,
            beta1: spec.beta1,
            beta2: spec.beta2,
            eps: spec.eps,
            weight_decay: spec.weight_decay,
        };
        let graph = spec.graph;
        let trainer = guard::catch(&format!("compiling the training step on {device}"), || {
            ResidentTrainer::new(&graph, &wrt, &initial, &adam, device)
        })?
        .map_err(|e| format!("the training step: {e:?}"))?;
        Ok(ResidentJob {
            trainer,
            feeds,
            batch: spec.batch,
            epochs: spec.epochs,
        })
    }

    /// Whether params and moments live in the plugin.
    pub fn is_resident(&self) -> bool {
        self.trainer.is_resident()
    }

    /// Every epoch over the shard, in order; the result with the final
    /// params. Every worker must take the same number of steps: the
    /// gradient sum inside each step waits for all of them.
    pub fn train(mut self, device: String) -> Result<TrainResult, String> {
        let rows = self.feeds.first().map_or(0, |f| f.2.len() / f.1.max(1));
        let steps = rows / self.batch.max(1);
        let start = Instant::now();
        let (mut first, mut last, mut compute) = (f32::NAN, f32::NAN, 0f64);
        for epoch in 0..self.epochs {
            let mut sum = 0f64;
            for s in 0..steps {
                let feed: Vec<(&str, &[f32])> = self
                    .feeds
                    .iter()
                    .map(|(n, e, v)| {
                        let a = s * self.batch * e;
                        (n.as_str(), &v[a..a + self.batch * e])
                    })
                    .collect();
                let t = Instant::now();
                let trainer = &mut self.trainer;
                let out = guard::catch("a training step", || trainer.step(&feed))?;
                compute += t.elapsed().as_secs_f64();
                sum += out
                    .first()
                    .and_then(|l| l.first())
                    .copied()
                    .unwrap_or(f32::NAN) as f64;
            }
            let mean = (sum / steps.max(1) as f64) as f32;
            if epoch == 0 {
                first = mean;
            }
            last = mean;
        }
        let trainer = &mut self.trainer;
        let mut params: Vec<(String, Vec<f32>)> =
            guard::catch("reading the params", || trainer.params())?
                .into_iter()
                .collect();
        params.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(TrainResult {
            device,
            samples: self.epochs * steps * self.batch,
            wall_s: start.elapsed().as_secs_f64(),
            compute_s: compute,
            comm_s: 0.0,
            first_loss: first,
            last_loss: last,
            params,
        })
    }
}

/// rlx-runtime's tags for pushed shards (`dist::training`, private there).
const TAG_DATA_BASE: u32 = 45;
const TAG_PARAM_BASE: u32 = 60;

/// Write `v` as raw little-endian f32, what a `file://` weight or data URI
/// names (`rlx_runtime::dist::WeightCache` reads it); its URI.
pub fn write_f32(path: &Path, v: &[f32]) -> Result<String, String> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(format!("file://{}", path.display()))
}

/// rlx-runtime's `dist::pull_shards`, waiting through a [`Link`] so a
/// coordinator that goes away ends it: receive the init params and this
/// rank's data shards pushed by `rlx_runtime::dist::push_shards`, write
/// them under `dir` and point the spec at those files.
pub fn pull_shards(link: &Link, spec: &mut TrainSpec, dir: &Path) -> Result<(), String> {
    let wait = Some(Duration::from_secs(120));
    for i in 0..spec.params.len() {
        let vals = link.recv_f32(
            0,
            TAG_PARAM_BASE + i as u32,
            wait,
            "receiving an init param",
        )?;
        spec.params[i].uri = write_f32(&dir.join(format!("param_{i}.bin")), &vals)?;
    }
    for i in 0..spec.data.len() {
        let vals = link.recv_f32(0, TAG_DATA_BASE + i as u32, wait, "receiving a data shard")?;
        spec.data[i].uri = write_f32(&dir.join(format!("shard_{i}.bin")), &vals)?;
        spec.data[i].shard_start = 0;
    }
    Ok(())
}

/// The coordinator's half of training: average the workers' gradient
/// buckets (every worker sends one per step; each gets the mean back)
/// until every worker has sent its result. Workers are ranks
/// `1..world`. Ends with an error when a worker fails or goes away, when
/// the workers disagree on the number of steps or a bucket's length, or
/// when nothing arrives within `timeout`.
pub fn serve_reduce(link: &Link, timeout: Duration) -> Result<Vec<TrainResult>, String> {
    let world = link.group().world_size();
    let n = (world - 1) as usize;
    let mut buckets: Vec<Option<Vec<f32>>> = vec![None; n];
    let mut results: Vec<Option<TrainResult>> = vec![None; n];
    loop {
        // Buckets first: the wait wakes at once for the first source only.
        let mut wants = Vec::new();
        for (w, (b, r)) in buckets.iter().zip(&results).enumerate() {
            if r.is_none() && b.is_none() {
                wants.push((w as u32 + 1, tag::GRAD));
            }
        }
        for (w, r) in results.iter().enumerate() {
            if r.is_none() {
                wants.push((w as u32 + 1, tag::RESULT));
            }
        }
        if wants.is_empty() {
            break;
        }
        let (i, bytes) = link.recv_any(&wants, Some(timeout), "training")?;
        let (rank, t) = wants[i];
        let w = (rank - 1) as usize;
        if t == tag::GRAD {
            buckets[w] = Some(super::wire::f32s(&bytes));
        } else {
            let r: TrainResult = serde_json::from_slice(&bytes)
                .map_err(|e| format!("rank {rank}'s training result does not parse: {e}"))?;
            results[w] = Some(r);
        }
        let got_bucket = buckets.iter().any(Option::is_some);
        let got_result = results.iter().any(Option::is_some);
        if got_bucket && got_result {
            return Err(
                "the workers disagree on the number of steps: one finished while another sent gradients (shards of different sizes?)"
                    .into(),
            );
        }
        if buckets.iter().all(Option::is_some) {
            let all: Vec<Vec<f32>> = buckets.iter_mut().map(|b| b.take().unwrap()).collect();
            let len = all[0].len();
            if let Some((r, b)) = all.iter().enumerate().find(|(_, b)| b.len() != len) {
                return Err(format!(
                    "rank {} sent a gradient bucket of {} values, rank 1 one of {len}",
                    r + 1,
                    b.len()
                ));
            }
            let mut mean = vec![0f64; len];
            for b in &all {
                for (m, v) in mean.iter_mut().zip(b) {
                    *m += *v as f64;
                }
            }
            let mean: Vec<f32> = mean.iter().map(|m| (m / n as f64) as f32).collect();
            for r in 1..world {
                link.send_f32(r, tag::MEAN, &mean, "the averaged gradients")?;
            }
        }
    }
    Ok(results.into_iter().map(Option::unwrap).collect())
}
