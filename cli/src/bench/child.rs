//! The child side of `rlx-host bench`: measure one backend in this
//! process and print one JSON line (a [`Row`]).
//!
//! A fresh process per backend makes every figure cold and the backend's
//! own: compile time includes the first use of rlx-runtime's pipeline (and
//! of MLX) in the process, and the peak RSS is that backend's alone.

use super::args::BenchArgs;
use super::builtins;
use super::row::Row;
use super::spec::BackendSpec;
use super::{outputs, rss, stats};
use crate::run::{self, PLUGIN_DEVICE};
use rlx_plugin_host::backend as rlx_backend;
use rlx_plugin_loader::PluginSet;
use rlx_runtime::Device;
use std::path::PathBuf;

/// Measure `spec` and print its row. An error (the model, the plugin, a
/// compile or run that failed) is returned: the process then exits
/// non-zero with one stderr line, which the parent turns into a failed
/// row.
pub fn main(args: &BenchArgs, spec: &str, plugins: Vec<PathBuf>) -> Result<(), String> {
    let spec = BackendSpec::parse_one(spec)?;
    let model = builtins::resolve(&args.model)?;
    let data = run::random_data(&model.graph, args.seed)?;
    // The first run (reported on its own: lazy set-up and tracing land
    // there), the warm-up runs, then the timed runs; `run::execute` times
    // each and binds the params before the first.
    let total = 1 + args.warmup + args.runs.max(1);
    let (mut row, exec) = match &spec {
        BackendSpec::Cpu => {
            let mut row = Row::empty("cpu", None, "cpu", "rlx");
            row.device = Some("cpu".into());
            let exec = run::execute(Device::Cpu, &model.graph, &data, total)?;
            (row, exec)
        }
        BackendSpec::Plugin {
            name,
            mode,
            after_cpu,
        } => {
            if *after_cpu {
                // What a host that uses both backends did before: the CPU
                // backend compiled and ran the model (untimed).
                run::execute(Device::Cpu, &model.graph, &data, 1)
                    .map_err(|e| format!("the CPU backend's run before the plugin's: {e}"))?;
            }
            let set = PluginSet::load_from_env(plugins);
            let plugin = run::find_plugin(&set, name)?;
            let d = plugin.descriptor();
            let mut row = Row::empty(&d.name, spec.mode_label().as_deref(), &spec.label(), "rlx");
            // The adapter compiles for the plugin's default device, the
            // first it lists (ABI 1.4; the plain device list before that).
            row.device = d
                .device_infos
                .first()
                .map(|i| i.label())
                .or_else(|| d.devices.first().cloned());
            rlx_backend::register_plugin_backend(plugin.clone(), PLUGIN_DEVICE, *mode);
            let exec = rlx_backend::with_mode(*mode, || {
                run::execute(PLUGIN_DEVICE, &model.graph, &data, total)
            })?;
            (row, exec)
        }
    };
    let timed = &exec.run_ms[(1 + args.warmup).min(exec.run_ms.len())..];
    row.compile_ms = Some(exec.compile_ms);
    row.bind_ms = Some(exec.bind_ms);
    row.first_run_ms = exec.run_ms.first().copied();
    row.median_ms = stats::median(timed);
    row.min_ms = stats::min(timed);
    row.runs_ms = timed.to_vec();
    if let Some((bytes, source)) = rss::peak_rss() {
        row.peak_rss_bytes = Some(bytes);
        row.rss_source = Some(source.into());
    }
    row.checksum = Some(outputs::checksum(&exec.outputs));
    if let Some(path) = &args.child_outputs {
        outputs::write(path, &exec.outputs)?;
    }
    println!("{}", row.to_json());
    Ok(())
}
