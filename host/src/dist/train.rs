//! Data-parallel training's two sides beyond `rlx_runtime::dist::run_train`:
//! a worker receiving the shards the coordinator pushes, and the
//! coordinator averaging the workers' gradient buckets.

use super::wire::{tag, Link, TrainResult};
use rlx_runtime::dist::TrainSpec;
use std::path::Path;
use std::time::Duration;

/// rlx-runtime's tags for pushed shards (`dist::training`, private there).
const TAG_DATA_BASE: u32 = 45;
const TAG_PARAM_BASE: u32 = 60;

/// rlx-runtime's `dist::pull_shards`, waiting through a [`Link`] so a
/// coordinator that goes away ends it: receive the init params and this
/// rank's data shards pushed by `rlx_runtime::dist::push_shards`, write
/// them under `dir` and point the spec at those files.
pub fn pull_shards(link: &Link, spec: &mut TrainSpec, dir: &Path) -> Result<(), String> {
    let write = |name: &str, vals: &[f32]| -> Result<String, String> {
        let path = dir.join(name);
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(format!("file://{}", path.display()))
    };
    let wait = Some(Duration::from_secs(120));
    for i in 0..spec.params.len() {
        let vals = link.recv_f32(
            0,
            TAG_PARAM_BASE + i as u32,
            wait,
            "receiving an init param",
        )?;
        spec.params[i].uri = write(&format!("param_{i}.bin"), &vals)?;
    }
    for i in 0..spec.data.len() {
        let vals = link.recv_f32(0, TAG_DATA_BASE + i as u32, wait, "receiving a data shard")?;
        spec.data[i].uri = write(&format!("shard_{i}.bin"), &vals)?;
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
