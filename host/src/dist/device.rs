//! Which device a worker runs on: the plugin device picked by local rank,
//! and a stage's or training job's device directive resolved against what
//! this worker has (never silently another device).

use rlx_plugin_api::{DeviceInfo, DeviceKind};
use rlx_plugin_loader::LoadedPlugin;
use rlx_runtime::Device;

/// The variables launchers set for a process's index among those on its
/// host, in the order they are read.
const LOCAL_RANK_VARS: [&str; 4] = [
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
];

/// This worker's index among the workers on its host, and where it came
/// from: the first of `LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`,
/// `SLURM_LOCALID`, `MPI_LOCALRANKID` that is set, else `rank - 1` (rank 0
/// is the coordinator, so workers 1..=n on one host are 0..n).
pub fn local_rank(rank: u32) -> Result<(u32, String), String> {
    for var in LOCAL_RANK_VARS {
        if let Ok(v) = std::env::var(var) {
            let n = v
                .trim()
                .parse()
                .map_err(|_| format!("{var}={v:?} is not a non-negative integer"))?;
            return Ok((n, format!("{var}={n}")));
        }
    }
    let n = rank.saturating_sub(1);
    Ok((n, format!("{n} (RANK - 1; no LOCAL_RANK set)")))
}

/// How a worker picks its plugin device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// `gpu:(local rank)` where the plugin has GPUs, else `cpu:0`.
    #[default]
    ByLocalRank,
    /// This device (`--device gpu:1`).
    Named(DeviceKind, u32),
}

/// The plugin device a worker uses: by local rank among the plugin's GPUs
/// (an error when there are fewer GPUs than the local rank needs: two
/// workers sharing a GPU is a placement mistake, not a default), or the
/// one named, which must exist.
pub fn pick_plugin_device(
    plugin: &LoadedPlugin,
    choice: DeviceChoice,
    local_rank: u32,
) -> Result<DeviceInfo, String> {
    let devices = &plugin.descriptor().device_infos;
    let list = || {
        devices
            .iter()
            .map(DeviceInfo::label)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let name = &plugin.descriptor().name;
    let (kind, ordinal) = match choice {
        DeviceChoice::Named(k, o) => (k, o),
        DeviceChoice::ByLocalRank => {
            let gpus = devices.iter().filter(|d| d.kind == DeviceKind::Gpu).count() as u32;
            if gpus == 0 {
                (DeviceKind::Cpu, 0)
            } else if local_rank < gpus {
                (DeviceKind::Gpu, local_rank)
            } else {
                return Err(format!(
                    "local rank {local_rank} needs gpu:{local_rank}, but plugin {name} has {gpus} GPU(s) here ({}); start one worker per GPU, or name a device",
                    list()
                ));
            }
        }
    };
    devices
        .iter()
        .find(|d| d.kind == kind && d.ordinal == ordinal)
        .cloned()
        .ok_or_else(|| {
            format!(
                "plugin {name} has no device {}:{ordinal} (it has {})",
                kind.name(),
                list()
            )
        })
}

/// A device directive (`StageSpec::device`, `TrainSpec::device`) on this
/// worker: `auto` (or empty) is the plugin when one is installed (on the
/// device picked for it, its GPU where it has one), else rlx-runtime's CPU
/// backend; `mlx` or the plugin's name is the plugin, an error without
/// one; any other name is that rlx-runtime device if it is available here.
pub fn resolve_directive(
    directive: &str,
    plugin: Option<&LoadedPlugin>,
    no_plugin: Option<&str>,
) -> Result<Device, String> {
    let d = directive.trim();
    if d.is_empty() || d.eq_ignore_ascii_case("auto") {
        return Ok(if plugin.is_some() {
            Device::Mlx
        } else {
            Device::Cpu
        });
    }
    let names_plugin = d.eq_ignore_ascii_case("mlx")
        || plugin.is_some_and(|p| d.eq_ignore_ascii_case(&p.descriptor().name));
    if names_plugin {
        return match plugin {
            Some(_) => Ok(Device::Mlx),
            None => Err(format!(
                "the stage asks for device {d:?}, and this worker has no MLX plugin ({})",
                no_plugin.unwrap_or("none was installed")
            )),
        };
    }
    let dev = rlx_runtime::parse_device(d).map_err(|e| format!("device {d:?}: {e}"))?;
    if rlx_runtime::is_available(dev) {
        Ok(dev)
    } else {
        Err(format!(
            "device {d:?} is not available on this worker (it has: {})",
            available_tokens().join(", ")
        ))
    }
}

/// rlx-runtime's devices available here, as `Device::as_arg` tokens.
pub fn available_tokens() -> Vec<String> {
    rlx_runtime::available_devices()
        .into_iter()
        .map(|d| d.as_arg().to_string())
        .collect()
}
