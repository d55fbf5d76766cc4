//! What travels between the coordinator and the workers besides rlx's own
//! messages, and waiting for a message without hanging on a peer that is
//! gone.
//!
//! rlx-runtime's `dist` protocol (stage specs on tag 40, activations on 41,
//! capabilities and training specs on 42, pushed data from 45, pushed
//! params from 60) is used as it is, so a coordinator written with
//! `rlx_runtime::dist` alone can drive these workers. rlx-driver's TCP
//! transport, though, never wakes a receive whose peer has gone: its reader
//! thread exits and the inbox waits forever. Every receive here therefore
//! waits in slices ([`Link::recv_any`]) and between them probes the peers
//! it depends on with an empty message: a write to a process that has gone
//! fails within two probes (the first is answered by a reset), and that
//! ends the wait with the peer named. The messages below use tags of their
//! own, far from rlx's and below rlx-driver's reserved range.

use rlx_runtime::dist::node::ProcessGroup;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Tags of this protocol ("RLX" in the top bytes).
pub mod tag {
    const BASE: u32 = 0x524C_5800;
    /// An empty liveness probe; drained unread.
    pub const PROBE: u32 = BASE;
    /// Worker -> 0: a [`super::WorkerInfo`] (JSON), after rlx's `NodeCaps`.
    pub const INFO: u32 = BASE + 1;
    /// Worker -> 0: a job's set-up result, a [`super::Ready`] (JSON).
    pub const READY: u32 = BASE + 2;
    /// Worker -> 0: why it stopped (UTF-8), sent before it exits.
    pub const ERROR: u32 = BASE + 3;
    /// 0 -> worker: the session is over; the worker exits cleanly.
    pub const END: u32 = BASE + 4;
    /// Worker -> 0: a flat gradient bucket to average (f32).
    pub const GRAD: u32 = BASE + 5;
    /// 0 -> worker: the averaged bucket (f32).
    pub const MEAN: u32 = BASE + 6;
    /// Worker -> 0: a training job's result, a [`super::TrainResult`] (JSON).
    pub const RESULT: u32 = BASE + 7;
    /// 0 -> worker: a stage every worker runs side by side (JSON
    /// `StageSpec`): activations come from rank 0 and go back to it.
    pub const PARALLEL: u32 = BASE + 8;
    /// 0 -> worker: a resident data-parallel training job, a
    /// [`super::super::ResidentTrainSpec`] (JSON).
    pub const RESIDENT_TRAIN: u32 = BASE + 9;
}

/// rlx-runtime's own tags (`dist::inference`, `dist::training`), which
/// it keeps private.
pub mod rlx_tag {
    pub const SPEC: u32 = 40;
    pub const ACT: u32 = 41;
    /// Capabilities (worker -> 0) and training specs (0 -> worker).
    pub const CAPS_OR_TRAIN: u32 = 42;
}

/// What a worker tells the coordinator beside rlx's `NodeCaps`: the plugin
/// it installed (or why it has none) and the plugin device it runs on.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct WorkerInfo {
    pub rank: u32,
    /// `"mlx-cuda 0.2.19"`; None when no plugin is installed.
    pub plugin: Option<String>,
    /// Why no plugin is installed (the discovery error), when none is.
    pub no_plugin: Option<String>,
    /// The plugin device its stages run on (`"gpu:1 (NVIDIA H200)"`).
    pub plugin_device: Option<String>,
    /// The plugin's execution mode (`lazy`, `eager`, `compiled`).
    pub mode: String,
    /// The local rank it used to pick the device, and where it came from.
    pub local_rank: String,
}

/// A job's set-up result: the device it compiled for, or the error.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Ready {
    pub result: Result<String, String>,
}

/// A training worker's outcome.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TrainResult {
    pub device: String,
    pub samples: usize,
    pub wall_s: f64,
    pub compute_s: f64,
    pub comm_s: f64,
    pub first_loss: f32,
    pub last_loss: f32,
    /// The final (averaged, hence identical on every worker) params.
    pub params: Vec<(String, Vec<f32>)>,
}

/// How long a waiting receive waits on its first source before looking
/// at the others: from the shortest, doubling while nothing comes, up to
/// the longest (a message on the first source wakes it at once; one on
/// another waits out the slice, so a busy exchange stays quick and an
/// idle one costs a wake-up per 20 ms).
const SLICE_MIN: Duration = Duration::from_micros(100);
const SLICE: Duration = Duration::from_millis(20);
const PROBE_EVERY: Duration = Duration::from_millis(200);

/// Receives that end when a peer they depend on goes away.
pub struct Link<'g> {
    group: &'g ProcessGroup,
    /// Ranks whose departure ends any wait (probed).
    watch: Vec<u32>,
    /// Whether ERROR messages from the watched ranks end a wait (rank 0's
    /// view: a worker says why before it exits).
    read_errors: bool,
}

impl<'g> Link<'g> {
    pub fn new(group: &'g ProcessGroup, watch: Vec<u32>, read_errors: bool) -> Self {
        Link {
            group,
            watch,
            read_errors,
        }
    }

    pub fn group(&self) -> &'g ProcessGroup {
        self.group
    }

    /// Send, naming the peer and what was sent on failure.
    pub fn send(&self, to: u32, tag: u32, bytes: &[u8], what: &str) -> Result<(), String> {
        self.group
            .transport()
            .send_bytes(to, tag, bytes)
            .map_err(|e| self.gone_or(to, format!("sending {what} to rank {to}: {e}")))
    }

    /// rlx-driver's `send_f32` (the bytes rlx's `recv_activation` reads).
    pub fn send_f32(&self, to: u32, tag: u32, data: &[f32], what: &str) -> Result<(), String> {
        self.group
            .send_f32(to, tag, data)
            .map_err(|e| self.gone_or(to, format!("sending {what} to rank {to}: {e}")))
    }

    /// Wait for the first message among `wants` (`(from, tag)`), checked
    /// in order; `Ok((index, payload))`. Ends with an error when a watched
    /// rank goes away or reports an error, or after `timeout` (None: no
    /// limit). `what` names the wait in those errors.
    pub fn recv_any(
        &self,
        wants: &[(u32, u32)],
        timeout: Option<Duration>,
        what: &str,
    ) -> Result<(usize, Vec<u8>), String> {
        let t = self.group.transport();
        let start = Instant::now();
        let mut last_probe = Instant::now();
        let mut slice = SLICE_MIN;
        loop {
            for (i, &(from, tag)) in wants.iter().enumerate() {
                // The first source waits its slice (woken at once by its
                // message); the others are looked at without waiting.
                let wait = if i == 0 { slice } else { Duration::ZERO };
                match t.recv_bytes_timeout(from, tag, wait) {
                    Ok(Some(bytes)) => return Ok((i, bytes)),
                    Ok(None) => {}
                    Err(e) => return Err(format!("{what}: receiving from rank {from}: {e}")),
                }
            }
            slice = (slice * 2).min(SLICE);
            self.check_errors(what)?;
            self.drain_probes();
            if last_probe.elapsed() >= PROBE_EVERY {
                last_probe = Instant::now();
                for &r in &self.watch {
                    if t.send_bytes(r, tag::PROBE, &[]).is_err() {
                        // A worker may have said why before it went.
                        self.check_errors(what)?;
                        return Err(format!("{what}: {}", gone(r)));
                    }
                }
            }
            if let Some(limit) = timeout {
                if start.elapsed() >= limit {
                    return Err(format!(
                        "{what}: nothing arrived within {:.0} s (the peers are still connected)",
                        limit.as_secs_f64()
                    ));
                }
            }
        }
    }

    /// [`Link::recv_any`] for one source.
    pub fn recv(
        &self,
        from: u32,
        tag: u32,
        timeout: Option<Duration>,
        what: &str,
    ) -> Result<Vec<u8>, String> {
        self.recv_any(&[(from, tag)], timeout, what).map(|(_, b)| b)
    }

    pub fn recv_f32(
        &self,
        from: u32,
        tag: u32,
        timeout: Option<Duration>,
        what: &str,
    ) -> Result<Vec<f32>, String> {
        self.recv(from, tag, timeout, what).map(|b| f32s(&b))
    }

    /// A failed send's error, replaced by the peer's own ERROR message
    /// when it sent one.
    fn gone_or(&self, peer: u32, err: String) -> String {
        if self.read_errors {
            if let Some(e) = self.error_from(peer) {
                return e;
            }
        }
        err
    }

    fn error_from(&self, r: u32) -> Option<String> {
        let t = self.group.transport();
        match t.recv_bytes_timeout(r, tag::ERROR, Duration::ZERO) {
            Ok(Some(msg)) => Some(format!("rank {r}: {}", String::from_utf8_lossy(&msg))),
            _ => None,
        }
    }

    fn check_errors(&self, what: &str) -> Result<(), String> {
        if !self.read_errors {
            return Ok(());
        }
        for &r in &self.watch {
            if let Some(e) = self.error_from(r) {
                return Err(format!("{what}: {e}"));
            }
        }
        Ok(())
    }

    /// Throw away the probes peers sent (they only test the connection).
    fn drain_probes(&self) {
        let t = self.group.transport();
        for r in 0..self.group.world_size() {
            if r == self.group.rank() {
                continue;
            }
            while let Ok(Some(_)) = t.recv_bytes_timeout(r, tag::PROBE, Duration::ZERO) {}
        }
    }
}

/// How a departed peer is named in errors.
fn gone(rank: u32) -> String {
    if rank == 0 {
        "the coordinator (rank 0) went away (its connection closed)".into()
    } else {
        format!("rank {rank} went away (its connection closed)")
    }
}

/// Little-endian bytes as f32 (a trailing partial value is dropped).
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
