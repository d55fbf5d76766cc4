//! `rlx-host demo`: discover plugins from the default places, print the
//! plugin table, build a decoder transformer, and run it on the `mlx`
//! plugin in every mode (through `Session::new(Device::Mlx)`) and on
//! rlx-runtime's CPU backend, printing parity, timing and one line that
//! says which was faster and why.

mod progress;
mod verdict;

use crate::models::{transformer, TransformerConfig};
use crate::run::{execute, execute_with, find_plugin, parity, random_data, PLUGIN_DEVICE};
use crate::tables::{print_candidates, print_table};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend as rlx_backend;
use rlx_runtime::Device;
use std::path::PathBuf;

/// A backend's output agrees with the CPU reference when every element is
/// within `ATOL + RTOL * |reference|` (f32 backends computing in a different
/// order differ by ~1e-6 relative; a wrong kernel differs by O(1)).
pub const ATOL: f64 = 1e-4;
pub const RTOL: f64 = 1e-3;

/// Does `got` agree with `want` within [`ATOL`] / [`RTOL`]?
pub fn close(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(&a, &b)| {
            let (a, b) = (a as f64, b as f64);
            (a - b).abs() <= ATOL + RTOL * b.abs() || (a.is_nan() && b.is_nan())
        })
}

/// The demo's models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoModel {
    /// A decoder of a real small model's size (8 layers, d_model 512), a
    /// 128-token prompt: `rlx-host bench decoder-s128`.
    Decoder,
    /// The 1-layer toy (d_model 64, 8 tokens): every run is mostly per-op
    /// overhead.
    Small,
}

impl DemoModel {
    fn config(self) -> TransformerConfig {
        match self {
            DemoModel::Decoder => TransformerConfig::decoder(128),
            DemoModel::Small => TransformerConfig::default(),
        }
    }
}

pub fn demo(
    explicit: Vec<PathBuf>,
    backend: &str,
    which: DemoModel,
    runs: usize,
    seed: u64,
) -> Result<(), String> {
    println!("== plugins ==");
    let set = rlx_plugin_loader::PluginSet::load_from_env(explicit);
    print_candidates(&set);
    println!();
    let plugin = find_plugin(&set, backend)?;
    let d = plugin.descriptor();
    println!(
        "using plugin {} {} ({}) from {}",
        d.name,
        d.version,
        d.description,
        plugin.path().display()
    );
    for (k, v) in &d.build_info {
        println!("  {k} = {v}");
    }
    // The device the plugin's executables run on: its first (a GPU where
    // MLX has one).
    let device = d
        .device_infos
        .first()
        .map(|i| i.label())
        .unwrap_or_else(|| "cpu:0".into());
    let on_gpu = device.starts_with("gpu");
    println!("  runs on {device}");

    let cfg = which.config();
    let model = transformer(&cfg);
    let data = random_data(&model.graph, seed)?;
    let (n_params, n_elems) = crate::run::param_count(&data);
    println!("\n== model ==");
    println!("{}", model.description);
    println!(
        "{} nodes, {} param tensors ({} weights), input {} {:?} (token ids), seed {seed}",
        model.graph.len(),
        n_params,
        n_elems,
        model.inputs[0].name,
        model.inputs[0].shape
    );

    rlx_backend::register_plugin_backend(plugin.clone(), PLUGIN_DEVICE, Mode::Lazy);

    let runs = runs.max(1);
    println!("\n== runs (after compile: a first run, then {runs} timed run(s)) ==");
    let reference = execute(Device::Cpu, &model.graph, &data, runs + 1)
        .map_err(|e| format!("the CPU reference failed: {e}"))?;
    let cpu_ms = reference.steady_run_ms();
    let mut rows: Vec<[String; 8]> = vec![[
        "cpu (rlx-runtime)".into(),
        "-".into(),
        format!("{:.2}", reference.compile_ms),
        format!("{:.3}", reference.run_ms[0]),
        format!("{cpu_ms:.3}"),
        "1.00".into(),
        "reference".into(),
        String::new(),
    ]];
    let mut failures = Vec::new();
    let mut best: Option<(&str, f64)> = None;
    let caches = rlx_plugin_host::kernel_cache::mlx_cache_dirs(&d.build_info);
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        // Compiled mode's first run builds MLX's fused kernels (once per
        // machine: they are cached); say so when it keeps the user waiting.
        let mut watch = (mode == Mode::Compiled).then(|| {
            progress::FirstRunWatch::start(format!(
                "{} compiled: the first run compiles MLX's kernels for this model, once{}",
                d.name,
                caches
                    .first()
                    .map(|c| format!(
                        " (kept in {}; later runs and processes reuse them)",
                        c.display()
                    ))
                    .unwrap_or_default()
            ))
        });
        let r = rlx_backend::with_mode(mode, || {
            execute_with(PLUGIN_DEVICE, &model.graph, &data, runs + 1, &mut || {
                if let Some(w) = watch.as_mut() {
                    w.done();
                }
            })
        });
        drop(watch);
        match r {
            Ok(exec) => {
                let errs = parity(&exec.outputs, &reference.outputs)?;
                let ok = exec
                    .outputs
                    .iter()
                    .zip(&reference.outputs)
                    .all(|(a, b)| close(a, b));
                let err_s: Vec<String> = errs
                    .iter()
                    .map(|(a, r)| format!("abs {a:.2e} / rel {r:.2e}"))
                    .collect();
                if !ok {
                    let worst = errs.iter().map(|(a, _)| *a).fold(0.0, f64::max);
                    failures.push(format!(
                        "{} {}: the logits differ from the CPU backend's beyond the tolerance (max abs err {worst:.3e})",
                        d.name,
                        mode.name()
                    ));
                }
                let ms = exec.steady_run_ms();
                if ok && best.is_none_or(|(_, b)| ms < b) {
                    best = Some((mode.name(), ms));
                }
                rows.push([
                    d.name.clone(),
                    mode.name().into(),
                    format!("{:.2}", exec.compile_ms),
                    format!("{:.3}", exec.run_ms[0]),
                    format!("{ms:.3}"),
                    format!("{:.2}", ms / cpu_ms),
                    err_s.join("; "),
                    if ok { "ok".into() } else { "MISMATCH".into() },
                ]);
            }
            Err(e) => {
                failures.push(format!("{} {}: {e}", d.name, mode.name()));
                rows.push([
                    d.name.clone(),
                    mode.name().into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "failed (see below)".into(),
                    "FAILED".into(),
                ]);
            }
        }
    }
    let mean_header = format!("RUN MS (MEAN OF {runs})");
    print_table(
        &[
            "BACKEND",
            "MODE",
            "COMPILE MS",
            "FIRST RUN MS",
            &mean_header,
            "x CPU",
            "MAX ERR vs CPU (logits)",
            "PARITY",
        ],
        &rows,
    );
    println!(
        "\nparity: every element within {ATOL:e} + {RTOL:e} * |cpu|; rel = |a-b| / max(|cpu|, 1e-6)"
    );
    println!("x CPU: the mode's mean run time / the CPU backend's (below 1: faster)");
    if let Some(best) = best {
        let flops = verdict::matmul_flops(&model.graph);
        println!(
            "\n{}",
            verdict::verdict(&d.name, best, cpu_ms, flops, model.graph.len(), on_gpu)
        );
    }
    if failures.is_empty() {
        println!("all modes agree with the CPU backend");
        Ok(())
    } else {
        for f in &failures {
            println!("FAILED  {f}");
        }
        Err(format!(
            "{} of 3 {} runs failed or disagree with the CPU backend (the FAILED lines above say why)",
            failures.len(),
            d.name,
        ))
    }
}
