//! The environment MLX's collectives read, written from the worker's rlx
//! rank and world, so a tensor-parallel stage's `mlx.all_sum` (and the
//! others) joins the other workers without the user describing the group
//! twice. The MLX group is the workers only (rank 0 coordinates): rlx rank
//! `r` is MLX rank `r - 1` of `WORLD - 1`.
//!
//! Set only where unset (a user's own `MLX_*` / `NCCL_*` win), and only
//! with two workers or more:
//! - `MLX_RANK`, `MLX_WORLD_SIZE`;
//! - `MLX_HOSTFILE` (the ring backend): a JSON file, one `host:port` per
//!   worker, each worker's rlx address with its port plus
//!   `RLX_MLX_PORT_OFFSET` (default 1000);
//! - `NCCL_HOST_IP`, `NCCL_PORT` (the nccl backend): rank 1's host and its
//!   port plus twice the offset.
//!
//! Only static peers (`PEERS`) describe the addresses; with discovery, set
//! these yourself.

use rlx_runtime::dist::node::{NodeConfig, PeerSource};

const DEFAULT_OFFSET: u16 = 1000;

fn set_default(var: &str, value: String) {
    if std::env::var_os(var).is_none() {
        // Set before the plugin (and MLX) start, while no other thread of
        // this crate reads the environment.
        std::env::set_var(var, value);
    }
}

/// The hostfile `prepare` wrote, removed when dropped (the worker holds it
/// while it serves: MLX reads the file when its group starts).
#[derive(Debug)]
pub struct HostFile(std::path::PathBuf);

impl Drop for HostFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Write the environment for rank `cfg.rank` (a worker, >= 1). A lone
/// worker gets none: its group is itself (MLX's ring cannot make a ring
/// of one), and every collective returns its input. The hostfile written,
/// if any, lives as long as the value returned.
pub fn prepare(cfg: &NodeConfig) -> Result<Option<HostFile>, String> {
    if cfg.world <= 2 {
        return Ok(None);
    }
    set_default("MLX_RANK", (cfg.rank - 1).to_string());
    set_default("MLX_WORLD_SIZE", (cfg.world - 1).to_string());
    let PeerSource::Static(peers) = &cfg.peers else {
        return Ok(None);
    };
    let offset: u16 = match std::env::var("RLX_MLX_PORT_OFFSET") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("RLX_MLX_PORT_OFFSET={v:?} is not a port offset"))?,
        Err(_) => DEFAULT_OFFSET,
    };
    // `host:port` (a peer as PEERS gives it) with its port moved by `by`.
    let shifted = |a: &str, by: u16| -> Result<(String, u16), String> {
        let (host, port) = a
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("peer {a:?} is not host:port"))?;
        let port = port
            .checked_add(by)
            .ok_or_else(|| format!("port {port} + {by} (RLX_MLX_PORT_OFFSET) is past 65535"))?;
        Ok((host.to_string(), port))
    };
    let mut written = None;
    if std::env::var_os("MLX_HOSTFILE").is_none() {
        let hosts = peers[1..]
            .iter()
            .map(|a| shifted(a, offset).map(|(h, p)| vec![format!("{h}:{p}")]))
            .collect::<Result<Vec<_>, _>>()?;
        let path = std::env::temp_dir().join(format!(
            "rlx-mlx-hostfile-{}-rank{}.json",
            std::process::id(),
            cfg.rank
        ));
        std::fs::write(
            &path,
            serde_json::to_vec(&hosts).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        set_default("MLX_HOSTFILE", path.display().to_string());
        written = Some(HostFile(path));
    }
    if let Some(first) = peers.get(1) {
        let (host, port) = shifted(first, offset.saturating_mul(2))?;
        set_default("NCCL_HOST_IP", host);
        set_default("NCCL_PORT", port.to_string());
    }
    Ok(written)
}
