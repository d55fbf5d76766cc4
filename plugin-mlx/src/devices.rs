//! The devices MLX can run on here, found once when the plugin loads, and
//! which one an executable runs on.
//!
//! The same `librlx_mlx.so` serves every MLX build: with the CPU wheel's
//! libmlx it has the CPU; with the CUDA wheel's (the `plugins/mlx-cuda/`
//! directory) it also has every CUDA device MLX sees, and the first GPU is
//! the default. Which build is loaded is asked of libmlx itself (its
//! `cu::is_available()`, true in every CUDA build), so a CUDA build on a
//! machine without a usable GPU can say so instead of quietly running on
//! the CPU.

use rlx_mlx_shim::array::Device;
use rlx_plugin_api::{DeviceInfo, DeviceKind, PluginError, PluginResult};
use std::sync::OnceLock;

/// Which MLX build this process loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    Cpu,
    Cuda,
}

impl Build {
    /// The plugin's descriptor name for this build: the CPU and CUDA
    /// directories can sit side by side in one plugins directory.
    pub fn plugin_name(self) -> &'static str {
        match self {
            Build::Cpu => "mlx",
            Build::Cuda => "mlx-cuda",
        }
    }
}

/// The loaded MLX build, as the libmlx this plugin is bound to says (not
/// what else the process has mapped: with both plugin directories loaded,
/// one process holds a CPU and a CUDA libmlx side by side).
pub fn build() -> Build {
    static B: OnceLock<Build> = OnceLock::new();
    *B.get_or_init(|| match rlx_mlx_shim::array::gpu_backend() {
        1 => Build::Cuda,
        // The Metal build serves the GPU through the same device code; its
        // directory is the macOS one and keeps the plain name.
        _ => Build::Cpu,
    })
}

/// Every device, the default first: the GPUs (CUDA build), then the CPU.
pub fn available() -> &'static [DeviceInfo] {
    static D: OnceLock<Vec<DeviceInfo>> = OnceLock::new();
    D.get_or_init(|| {
        let mut out = Vec::new();
        for i in 0..rlx_mlx_shim::array::gpu_device_count().max(0) {
            let d = Device {
                gpu: true,
                index: i,
            };
            out.push(DeviceInfo {
                kind: DeviceKind::Gpu,
                ordinal: i as u32,
                name: d.name().unwrap_or_else(|e| format!("gpu ({e})")),
                memory_bytes: d.memory().unwrap_or(0),
            });
        }
        out.push(DeviceInfo {
            kind: DeviceKind::Cpu,
            ordinal: 0,
            name: "cpu".into(),
            memory_bytes: 0,
        });
        out
    })
}

/// Why this plugin cannot serve, if it cannot: a CUDA build of MLX that
/// sees no CUDA device (no GPU, or no usable driver).
pub fn unusable_reason() -> Option<String> {
    (build() == Build::Cuda && !available().iter().any(|d| d.kind == DeviceKind::Gpu)).then(|| {
        "the CUDA build of MLX sees no CUDA device (no GPU, or the NVIDIA driver cannot be \
         used); use the CPU plugin directory (plugins/mlx) on this machine"
            .to_string()
    })
}

/// The device a compile asks for (None = the default), or UNSUPPORTED
/// naming the devices there are.
pub fn resolve(asked: Option<(DeviceKind, u32)>) -> PluginResult<&'static DeviceInfo> {
    let all = available();
    let Some((kind, ordinal)) = asked else {
        return Ok(&all[0]);
    };
    all.iter()
        .find(|d| d.kind == kind && d.ordinal == ordinal)
        .ok_or_else(|| {
            PluginError::unsupported(format!(
                "no device {}:{ordinal} in this MLX build; it has {}",
                kind.name(),
                all.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// The shim's form of a device.
pub fn shim_device(d: &DeviceInfo) -> Device {
    Device {
        gpu: d.kind == DeviceKind::Gpu,
        index: d.ordinal as i32,
    }
}

/// Whether the host asked for TF32 (`RLX_MLX_TF32=1`); otherwise f32 is
/// true f32 on the GPU.
pub fn tf32_requested() -> bool {
    std::env::var("RLX_MLX_TF32").is_ok_and(|v| v == "1")
}

/// Make MLX's CUDA backend compute f32 matmul and conv in true f32 unless
/// the host opted into TF32: MLX reads `MLX_ENABLE_TF32` once per process,
/// on first use, and defaults to TF32. Called when the plugin loads, before
/// MLX computes anything. A value the user set themselves is kept.
pub fn choose_tf32() -> &'static str {
    static CHOICE: OnceLock<&'static str> = OnceLock::new();
    CHOICE.get_or_init(|| match std::env::var("MLX_ENABLE_TF32") {
        Ok(v) if v == "0" => "off (MLX_ENABLE_TF32=0)",
        Ok(_) => "on (MLX_ENABLE_TF32 set by the user)",
        Err(_) => {
            let on = tf32_requested();
            // SAFETY (of the call, not an unsafe block): the plugin sets the
            // variable once, at load, from the loading thread, before MLX
            // or any thread of ours reads the environment.
            std::env::set_var("MLX_ENABLE_TF32", if on { "1" } else { "0" });
            if on {
                "on (RLX_MLX_TF32=1)"
            } else {
                "off (true f32; RLX_MLX_TF32=1 opts into TF32)"
            }
        }
    })
}
