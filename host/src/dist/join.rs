//! Joining a group without waiting forever for a peer that never comes.

use rlx_runtime::dist::node::{NodeConfig, ProcessGroup};
use std::sync::Arc;
use std::time::Duration;

/// Join the group `cfg` describes, or fail after `timeout`: rlx-driver's
/// mesh set-up waits without limit for a lower rank to connect, so a peer
/// that never starts would hang this process. (The thread left waiting is
/// abandoned; the caller exits.)
pub fn connect(cfg: &NodeConfig, timeout: Duration) -> Result<Arc<ProcessGroup>, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let c = cfg.clone();
    std::thread::Builder::new()
        .name("rlx-dist-connect".into())
        .spawn(move || {
            let _ = tx.send(c.connect());
        })
        .map_err(|e| e.to_string())?;
    match rx.recv_timeout(timeout) {
        Ok(Ok(g)) => Ok(g),
        Ok(Err(e)) => Err(format!(
            "rank {} could not join the group of {}: {e}",
            cfg.rank, cfg.world
        )),
        Err(_) => Err(format!(
            "rank {} could not join the group of {} within {:.0} s: a peer did not start or cannot be reached (check PEERS and that every rank runs)",
            cfg.rank,
            cfg.world,
            timeout.as_secs_f64()
        )),
    }
}
