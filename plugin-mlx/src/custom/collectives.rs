//! MLX's collectives as custom ops (`mlx.all_sum`, `mlx.all_gather`,
//! `mlx.sum_scatter`, `mlx.all_max`, `mlx.all_min`): graph nodes like any
//! other, so a tensor-parallel stage stays one lazy or compiled MLX graph.
//!
//! The group is the process's one MLX group, set up at the first lowering
//! of a collective from MLX's environment (`MLX_RANK`, `MLX_HOSTFILE` for
//! `ring`; `MLX_RANK`, `MLX_WORLD_SIZE`, `NCCL_HOST_IP`, `NCCL_PORT` for
//! `nccl`), which rlx-plugin-host's worker writes from its rlx rank and
//! world. The backend is `RLX_MLX_DISTRIBUTED` when set, else `nccl` when
//! building for a GPU and `ring` on the CPU. With neither `MLX_RANK` nor
//! `RLX_MLX_DISTRIBUTED` set, the group is this process alone (size 1:
//! every collective returns its input), as in MLX. Setting up waits for every
//! peer: a peer that never comes is an error after
//! `RLX_MLX_DIST_TIMEOUT` seconds (default 60), not a hang; MLX's own
//! failures (a port taken, a peer refusing) are errors with MLX's message.
//!
//! `mlx.all_gather` and `mlx.sum_scatter` change axis 0 by the group's
//! size, which shape inference needs before any group exists: their
//! attributes carry it (i32 LE), and the lowering checks it against the
//! group's.

use crate::lower::{Ctx, LResult};
use rlx_mlx_shim::{distributed as dist, ops, Array};
use rlx_plugin_api::{PluginError, PluginResult, TensorType};
use std::sync::Mutex;
use std::time::Duration;

/// A set-up group: rank, size and backend.
type Group = (i32, i32, String);

/// The set-up group, or why it could not start (kept, so later compiles
/// give the same answer instead of retrying against a half-open port).
static GROUP: Mutex<Option<Result<Group, String>>> = Mutex::new(None);

/// The backend to start, and whether it must start (false: no
/// distributed environment, a group of one).
fn backend() -> (String, bool) {
    let set = |v: &str| std::env::var(v).is_ok_and(|s| !s.is_empty());
    if !set("MLX_RANK") && !set("RLX_MLX_DISTRIBUTED") {
        return ("any".into(), false);
    }
    let b = std::env::var("RLX_MLX_DISTRIBUTED")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| {
            if rlx_mlx_shim::array::thread_device_is_gpu() {
                "nccl".into()
            } else {
                "ring".into()
            }
        });
    (b, true)
}

fn timeout() -> Duration {
    let s = std::env::var("RLX_MLX_DIST_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(60.0);
    Duration::from_secs_f64(s)
}

/// The process's group, set up on first use.
pub fn group() -> LResult<Group> {
    let mut slot = GROUP.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = slot.as_ref() {
        return r.clone().map_err(Into::into);
    }
    let (b, strict) = backend();
    if strict {
        if let Err(e) = check_device(&b) {
            *slot = Some(Err(e.clone()));
            return Err(e.into());
        }
    }
    let limit = timeout();
    let (tx, rx) = std::sync::mpsc::channel();
    let name = b.clone();
    // MLX's ring waits in accept() without a limit for a peer that never
    // connects; the wait is bounded here (the thread is left behind).
    let spawned = std::thread::Builder::new()
        .name("rlx-mlx-dist-init".into())
        .spawn(move || {
            let _ = tx.send(dist::init(&name, strict));
        });
    let r = match spawned {
        Err(e) => Err(format!("cannot start MLX's {b} group: {e}")),
        Ok(_) => match rx.recv_timeout(limit) {
            Ok(Ok((rank, size))) => {
                log::info!("MLX distributed group: {b}, rank {rank} of {size}");
                Ok((rank, size, b.clone()))
            }
            Ok(Err(e)) => Err(format!("MLX's {b} group did not start: {e} ({})", env_hint(&b))),
            Err(_) => Err(format!(
                "MLX's {b} group did not start within {:.0} s: a peer did not connect ({}; RLX_MLX_DIST_TIMEOUT sets the limit)",
                limit.as_secs_f64(),
                env_hint(&b)
            )),
        },
    };
    *slot = Some(r.clone());
    r.map_err(Into::into)
}

/// Refuse, before MLX starts a group, what MLX 0.32.4 would crash on: its
/// ring backend runs collectives on the CPU (a GPU stage's arrays would be
/// read there), and its nccl backend exits the process on any NCCL or CUDA
/// error and binds MLX rank r to gpu:(r % GPUs) itself, whatever device
/// the stage runs on.
fn check_device(backend: &str) -> Result<(), String> {
    use rlx_mlx_shim::array::{gpu_device_count, thread_device_index, thread_device_is_gpu};
    let gpu = thread_device_is_gpu();
    if gpu && backend != "nccl" {
        return Err(format!(
            "MLX's {backend} backend runs its collectives on the CPU; a stage on a GPU needs nccl (RLX_MLX_DISTRIBUTED=nccl, one GPU per process)"
        ));
    }
    if backend == "nccl" {
        if !gpu {
            return Err(
                "MLX's nccl backend runs on GPUs; this stage runs on the CPU (use ring)".into(),
            );
        }
        let rank: i32 = std::env::var("MLX_RANK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or("MLX's nccl backend needs MLX_RANK (an integer)")?;
        let n = gpu_device_count().max(1);
        let (mine, nccl) = (thread_device_index(), rank % n);
        if mine != nccl {
            return Err(format!(
                "MLX's nccl backend puts MLX rank {rank} on gpu:{nccl} (rank modulo its {n} GPU(s)), but this stage runs on gpu:{mine}: start one worker per GPU in rank order on each host, so that the local rank picks gpu:{nccl}"
            ));
        }
    }
    Ok(())
}

/// The environment a backend reads, as set here.
fn env_hint(backend: &str) -> String {
    let vars: &[&str] = match backend {
        "nccl" => &["MLX_RANK", "MLX_WORLD_SIZE", "NCCL_HOST_IP", "NCCL_PORT"],
        "ring" => &["MLX_RANK", "MLX_HOSTFILE"],
        _ => &["MLX_RANK"],
    };
    vars.iter()
        .map(|v| {
            format!(
                "{v}={}",
                std::env::var(v).unwrap_or_else(|_| "(unset)".into())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The group size an `all_gather` / `sum_scatter` node declares.
fn declared_size(name: &str, attrs: &[u8]) -> PluginResult<i64> {
    match attrs {
        [a, b, c, d] => {
            let n = i32::from_le_bytes([*a, *b, *c, *d]) as i64;
            if n >= 1 {
                Ok(n)
            } else {
                Err(PluginError::invalid_argument(format!(
                    "{name}: group size {n} (attribute, i32 LE) must be at least 1"
                )))
            }
        }
        _ => Err(PluginError::invalid_argument(format!(
            "{name} takes the group size as its attribute (4 bytes, i32 LE), got {} bytes",
            attrs.len()
        ))),
    }
}

fn check_size(name: &str, attrs: &[u8]) -> LResult<Group> {
    let declared = declared_size(name, attrs).map_err(|e| e.message)?;
    let g = group()?;
    if declared != g.1 as i64 {
        return Err(format!(
            "{name} declares a group of {declared}, but MLX's {} group has {} ranks",
            g.2, g.1
        )
        .into());
    }
    Ok(g)
}

fn no_attrs(name: &str, attrs: &[u8]) -> LResult<()> {
    if attrs.is_empty() {
        Ok(())
    } else {
        Err(format!("{name} takes no attributes, got {} bytes", attrs.len()).into())
    }
}

/// What an all-reduce `name` checks before it is built: no attributes, and
/// the process's group up.
fn reduce_ready(name: &str, attrs: &[u8]) -> LResult<()> {
    no_attrs(name, attrs)?;
    group()?;
    Ok(())
}

pub fn all_sum(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    reduce_ready("mlx.all_sum", attrs)?;
    Ok(dist::all_sum(a[0])?)
}

pub fn all_max(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    reduce_ready("mlx.all_max", attrs)?;
    Ok(dist::all_max(a[0])?)
}

pub fn all_min(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    reduce_ready("mlx.all_min", attrs)?;
    Ok(dist::all_min(a[0])?)
}

pub fn all_gather(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    check_size("mlx.all_gather", attrs)?;
    Ok(dist::all_gather(a[0])?)
}

/// MLX's ring backend has no sum_scatter: there it is the sum followed by
/// this rank's rows (the same result, twice the traffic).
pub fn sum_scatter(cx: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    let (rank, size, backend) = check_size("mlx.sum_scatter", attrs)?;
    if backend != "ring" {
        return Ok(dist::sum_scatter(a[0])?);
    }
    let dims = cx.in_dims(0);
    let rows = dims[0] / size;
    let sum = dist::all_sum(a[0])?;
    let mut start = vec![0i32; dims.len()];
    let mut stop = dims.clone();
    start[0] = rank * rows;
    stop[0] = (rank + 1) * rows;
    let strides = vec![1i32; dims.len()];
    Ok(ops::slice(&sum, &start, &stop, &strides)?)
}

/// Axis 0 times the group size.
pub fn gather_shape(ins: &[TensorType], attrs: &[u8]) -> PluginResult<TensorType> {
    let n = declared_size("mlx.all_gather", attrs)?;
    let mut t = ins[0].clone();
    match t.shape.first_mut() {
        Some(d) if *d >= 0 => *d *= n,
        Some(_) => {}
        None => {
            return Err(PluginError::invalid_argument(
                "mlx.all_gather takes an array of rank 1 or more (it gathers along axis 0)",
            ))
        }
    }
    Ok(t)
}

/// Axis 0 divided by the group size, which must divide it.
pub fn scatter_shape(ins: &[TensorType], attrs: &[u8]) -> PluginResult<TensorType> {
    let n = declared_size("mlx.sum_scatter", attrs)?;
    let mut t = ins[0].clone();
    match t.shape.first_mut() {
        Some(d) if *d >= 0 => {
            if *d % n != 0 {
                return Err(PluginError::invalid_argument(format!(
                    "mlx.sum_scatter: axis 0 ({d}) does not divide by the group size {n}"
                )));
            }
            *d /= n;
        }
        Some(_) => {}
        None => {
            return Err(PluginError::invalid_argument(
                "mlx.sum_scatter takes an array of rank 1 or more (it splits axis 0)",
            ))
        }
    }
    Ok(t)
}

/// `mlx.grad_sum`: the identity. Its gradient (rlx-plugin-host's autodiff
/// rule for it) is the sum over the group, so a data-parallel replica that
/// reads each param through it gets, from rlx's own backward, the
/// gradients summed over the workers: the in-graph gradient all-reduce.
pub fn grad_sum(_: &Ctx, a: &[&Array], attrs: &[u8]) -> LResult {
    no_attrs("mlx.grad_sum", attrs)?;
    Ok(a[0].clone_handle())
}
