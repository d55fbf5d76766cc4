//! `rlx-host demo`: discover plugins from the default places, print the
//! plugin table, build the small decoder transformer, and run it on the
//! `mlx` plugin in every mode (through `Session::new(Device::Mlx)`) and on
//! rlx-runtime's CPU backend, printing parity and timing.

use crate::cli::{plugins::print_candidates, print_table};
use crate::models::{transformer, TransformerConfig};
use crate::rlx_backend;
use crate::run::{execute, find_plugin, parity, random_data, PLUGIN_DEVICE};
use rlx_plugin_api::Mode;
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

pub fn demo(explicit: Vec<PathBuf>, backend: &str, runs: usize, seed: u64) -> Result<(), String> {
    println!("== plugins ==");
    let set = rlx_plugin_api::host::PluginSet::load_from_env(explicit);
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

    let cfg = TransformerConfig::default();
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
    let mut rows: Vec<[String; 7]> = vec![[
        "cpu (rlx-runtime)".into(),
        "-".into(),
        format!("{:.2}", reference.compile_ms),
        format!("{:.3}", reference.run_ms[0]),
        format!("{:.3}", reference.steady_run_ms()),
        "reference".into(),
        String::new(),
    ]];
    let mut failures = Vec::new();
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let r = rlx_backend::with_mode(mode, || {
            execute(PLUGIN_DEVICE, &model.graph, &data, runs + 1)
        });
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
                rows.push([
                    d.name.clone(),
                    mode.name().into(),
                    format!("{:.2}", exec.compile_ms),
                    format!("{:.3}", exec.run_ms[0]),
                    format!("{:.3}", exec.steady_run_ms()),
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
            "MAX ERR vs CPU (logits)",
            "PARITY",
        ],
        &rows,
    );
    println!(
        "\nparity: every element within {ATOL:e} + {RTOL:e} * |cpu|; rel = |a-b| / max(|cpu|, 1e-6)"
    );
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
