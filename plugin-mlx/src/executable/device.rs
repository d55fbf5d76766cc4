//! Where a run's MLX ops go: this thread's device, the process's one GPU
//! turn, and how long a run polls for its outputs before it sleeps.

use rlx_mlx_shim::array::DeviceGuard;
use rlx_plugin_api::{DeviceInfo, PluginError, PluginResult};

/// How long a run polls for its outputs before it sleeps until MLX wakes
/// it (`eval_list_spinning`): being woken costs tens of microseconds (on
/// the CPU a futex wake of MLX's stream thread's waiter, on a VM more; on
/// a CUDA GPU the driver's interrupt after a blocking-sync event), more
/// than a small graph's work. `RLX_MLX_SPIN_US` (read once) sets it for
/// every device; 0 always sleeps, as MLX's eval does. The defaults cover
/// a small graph's run and cost a larger one at most this much of one
/// core: on a GPU, where the caller only waits, a longer window, so that a
/// run of a millisecond or so is not woken late either.
pub(super) fn spin_us(on_gpu: bool) -> u32 {
    static US: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let set = *US.get_or_init(|| {
        std::env::var("RLX_MLX_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    });
    set.unwrap_or(if on_gpu {
        DEFAULT_GPU_SPIN_US
    } else {
        DEFAULT_SPIN_US
    })
}

/// See [`spin_us`].
const DEFAULT_SPIN_US: u32 = 50;
const DEFAULT_GPU_SPIN_US: u32 = 2000;

/// This thread's MLX ops go to a device while it lives; on a GPU it also
/// holds the process's GPU lock. Fields drop in order: the device is
/// restored before the lock is released.
pub struct OnDevice {
    _device: DeviceGuard,
    _gpu: Option<GpuTurn>,
}

/// One thread's turn on the GPU. MLX's CUDA backend is not safe for
/// concurrent graph building and evaluation from several threads: the
/// op suites run on eight test threads crashed the process (SIGFPE inside
/// MLX) or computed wrong values, and pass one thread at a time. So GPU
/// work is serialised per process; the GPU runs one stream at a time
/// anyway. A thread that already holds the turn (nested calls) does not
/// take it again.
struct GpuTurn(Option<std::sync::MutexGuard<'static, ()>>);

thread_local! {
    static HOLDS_GPU: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl GpuTurn {
    fn take() -> GpuTurn {
        if HOLDS_GPU.with(|h| h.get()) {
            return GpuTurn(None);
        }
        static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
        // A panic while holding it poisons nothing we rely on: the lock
        // guards no data, only MLX's global state.
        let guard = GPU.lock().unwrap_or_else(|e| e.into_inner());
        HOLDS_GPU.with(|h| h.set(true));
        GpuTurn(Some(guard))
    }
}

impl Drop for GpuTurn {
    fn drop(&mut self) {
        if self.0.is_some() {
            HOLDS_GPU.with(|h| h.set(false));
        }
    }
}

/// Build and run this thread's MLX ops on `device` while the guard lives.
pub fn on_device(device: &DeviceInfo) -> PluginResult<OnDevice> {
    let gpu = (device.kind == rlx_plugin_api::DeviceKind::Gpu).then(GpuTurn::take);
    let device_guard = DeviceGuard::set(crate::devices::shim_device(device))
        .map_err(|e| PluginError::unsupported(format!("cannot run on {}: {e}", device.label())))?;
    Ok(OnDevice {
        _device: device_guard,
        _gpu: gpu,
    })
}
