//! The child: the MLX plugin installed for `Device::Mlx` before any test
//! runs, in the mode `RLX_SUITE_MODE` names (default lazy), and every
//! compile for the device recorded in `RLX_SUITE_EVENTS` (when set), one
//! line per compile, under the name of the thread that compiled (libtest
//! names each test's thread after the test).

use crate::{ENV_EVENTS, ENV_MODE};
use rlx_plugin_api::Mode;
use rlx_plugin_host::partition::{Plan, Side};
use rlx_runtime::Device;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

/// The environment variable naming a complete MLX plugin directory to run
/// the suite on instead of the build tree's `plugins/mlx` (the CUDA
/// plugin directory on a GPU machine).
pub const ENV_PLUGIN_DIR: &str = "RLX_TEST_MLX_DIR";

pub fn start() {
    let mode = match std::env::var(ENV_MODE) {
        Ok(m) => Mode::from_name(&m).unwrap_or_else(|| {
            eprintln!("{ENV_MODE}={m:?} is not a mode: lazy, eager or compiled");
            std::process::exit(2)
        }),
        Err(_) => Mode::Lazy,
    };
    if let Err(e) = install(mode) {
        eprintln!("rlx-runtime suite: the MLX plugin could not be installed: {e}");
        std::process::exit(2);
    }
    if let Some(path) = std::env::var_os(ENV_EVENTS) {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => {
                let _ = EVENTS.set(Mutex::new(f));
                rlx_plugin_host::backend::set_compile_observer(Some(record));
            }
            Err(e) => eprintln!("rlx-runtime suite: {}: {e}", path.to_string_lossy()),
        }
    }
}

fn install(mode: Mode) -> Result<(), String> {
    let dir = match std::env::var_os(ENV_PLUGIN_DIR) {
        Some(d) => d.into(),
        None => rlx_host::build_tree::mlx_plugin_dir(&crate::profile_dir())?,
    };
    let opts = rlx_plugin_host::Options {
        plugins: vec![dir],
        mode,
        ..Default::default()
    };
    rlx_plugin_host::install(&opts).map(|_| ())
}

static EVENTS: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

/// One compile for `Device::Mlx`: `thread \t nodes on the plugin \t nodes
/// on the CPU \t why (the CPU nodes' reasons, distinct, `; `-joined)`.
fn record(device: Device, plan: &Plan) {
    if device != Device::Mlx {
        return;
    }
    let on = |s: Side| plan.placements.iter().filter(|p| p.side == Some(s)).count();
    let mut why: Vec<&str> = plan
        .placements
        .iter()
        .filter(|p| p.side == Some(Side::Cpu))
        .map(|p| p.why.as_str())
        .collect();
    why.sort_unstable();
    why.dedup();
    let thread = std::thread::current();
    let line = format!(
        "{}\t{}\t{}\t{}\n",
        thread.name().unwrap_or("<unnamed>"),
        on(Side::Plugin),
        on(Side::Cpu),
        why.join("; ").replace(['\t', '\n'], " ")
    );
    if let Some(f) = EVENTS.get() {
        let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
        let _ = f.write_all(line.as_bytes());
    }
}
