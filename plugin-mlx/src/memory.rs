//! How large a tensor may be, checked at compile before anything is
//! allocated: a graph whose tensors cannot fit fails with
//! `RESOURCE_EXHAUSTED` naming the node, its shape and its bytes. Without
//! the check such a graph aborts the process (a failed Rust allocation
//! aborts; MLX's compiled kernels index past a failed buffer) instead of
//! failing one call.
//!
//! The plugin's own limit is `RLX_MLX_MEMORY_LIMIT` (bytes, with an optional
//! binary suffix `K`, `M`, `G` or `T`: `512M`, `64G`), else the memory of the
//! device compiled for (a GPU's own memory; the machine's physical memory for
//! the CPU). A host may lower it for one compile with `memory_limit_bytes` in
//! the compile options: the smaller of the two applies. It bounds each tensor
//! on its own, the graph's leaves and every node's output; what several live
//! tensors add up to is MLX's allocator's to refuse, which it reports as an
//! error, not an abort. Nested bodies (If / While / Scan) are bounded by their
//! outer node's shapes only.

use crate::graph_text::describe;
use rlx_ir::Graph;
use rlx_plugin_api::DeviceInfo;
use rlx_plugin_api::{DeviceKind, PluginError, PluginResult};

/// The environment variable that sets the per-tensor limit.
pub const LIMIT_VAR: &str = "RLX_MLX_MEMORY_LIMIT";

/// The most bytes one tensor may take, and where that figure comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    pub source: String,
}

/// The limit for tensors on `device` under the host's limit, if it set
/// one: the smaller of the two (see the module docs).
pub fn limit_with(device: &DeviceInfo, host: Option<u64>) -> PluginResult<Limit> {
    let own = limit_for(device)?;
    Ok(match host {
        Some(bytes) if bytes < own.bytes => Limit {
            bytes,
            source: "the host's limit (compile options)".into(),
        },
        _ => own,
    })
}

/// The limit for tensors on `device` without a host limit:
/// `RLX_MLX_MEMORY_LIMIT` when set (it may raise the figure, for a machine
/// with swap), else the device's memory.
pub fn limit_for(device: &DeviceInfo) -> PluginResult<Limit> {
    if let Some(v) = std::env::var_os(LIMIT_VAR) {
        let text = v.to_string_lossy();
        let bytes = parse_bytes(&text).ok_or_else(|| {
            PluginError::invalid_argument(format!(
                "{LIMIT_VAR}={text:?} is not a size (bytes, optionally with K, M, G or T)"
            ))
        })?;
        return Ok(Limit {
            bytes,
            source: format!("{LIMIT_VAR}={text}"),
        });
    }
    Ok(device_memory(device))
}

/// The memory of the device: a GPU's own, the machine's for the CPU.
fn device_memory(device: &DeviceInfo) -> Limit {
    if device.kind == DeviceKind::Gpu && device.memory_bytes > 0 {
        return Limit {
            bytes: device.memory_bytes,
            source: format!("the memory of {}", device.name),
        };
    }
    Limit {
        bytes: physical_memory(),
        source: "this machine's physical memory".into(),
    }
}

pub use rlx_plugin_api::machine::physical_memory;

/// `1234`, `64K`, `512M`, `2G`, `1T` (binary multiples; a trailing `B` or
/// `iB` is allowed: `512MiB`).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 10),
        'm' | 'M' => (&t[..t.len() - 1], 20),
        'g' | 'G' => (&t[..t.len() - 1], 30),
        't' | 'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = num.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// The bytes of a tensor of `shape` (None: beyond u64, or not static).
pub fn tensor_bytes(shape: &rlx_ir::Shape) -> Option<u64> {
    let mut n: u64 = shape.dtype().size_bytes() as u64;
    for d in shape.dims() {
        match d {
            rlx_ir::Dim::Static(k) => n = n.checked_mul(*k as u64)?,
            rlx_ir::Dim::Dynamic(_) => return None,
        }
    }
    Some(n)
}

/// Every node's output (leaves included) must fit in `limit`.
pub fn check_graph(g: &Graph, limit: &Limit) -> PluginResult<()> {
    // The bodies of its ops too (a Scan's step, a While's cond): their
    // values are built as the graph's are.
    let mut graphs = vec![g];
    while let Some(g) = graphs.pop() {
        for n in g.nodes() {
            let bytes = tensor_bytes(&n.shape);
            // No size: past 2^64 bytes, or a dynamic dim (which the graph
            // check has refused in the graph itself; a body's is left to
            // the op that binds it).
            let static_dims = || {
                n.shape
                    .dims()
                    .iter()
                    .all(|d| matches!(d, rlx_ir::Dim::Static(_)))
            };
            if bytes.map_or_else(static_dims, |b| b > limit.bytes) {
                let needs = bytes.map_or_else(|| "more than 2^64 bytes".to_string(), human);
                return Err(PluginError::resource_exhausted(format!(
                    "{}: its output needs {needs}, more than {} ({}) allows",
                    describe(g, n),
                    human(limit.bytes),
                    limit.source
                )));
            }
            graphs.extend(n.op.subgraphs());
        }
    }
    Ok(())
}

/// `16000000000000 bytes (14.6 TiB)`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut unit = "";
    for u in UNITS {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    if unit.is_empty() {
        format!("{bytes} bytes")
    } else {
        format!("{bytes} bytes ({v:.1} {unit})")
    }
}
