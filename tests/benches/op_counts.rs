//! The MLX work of one training step, op kind by op kind: the plugin's
//! resident `ResidentTrainer` step (rlx's autodiff and Adam, lowered)
//! against Python MLX's `value_and_grad` + `Adam` step of the same MLP
//! (`scripts/op_counts.py`), lazy and under `mx.compile`. Device-independent
//! (MLX's graph, not its timing): it runs on the CPU.
//!
//! ```sh
//! cargo bench -p rlx-plugin-tests --bench op_counts [-- --python PYTHON]
//! ```
//!
//! Each plugin mode runs in a process of its own with
//! `RLX_MLX_OP_COUNTS` set (every run appends its op counts to a file;
//! `plugin-mlx/src/op_counts.rs`) and the kernels built in the run
//! (`RLX_MLX_BACKGROUND_COMPILE=0`, so compiled mode's step is the compiled
//! function's); the third step's line is the one compared. Every fused
//! kernel (`Compiled...`) is one row, "fused kernels". The goal (issue 37):
//! the plugin's total at or below MLX's in the same mode.

#[path = "resident/mlp.rs"]
mod mlp;

use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{register_plugin_backend, set_resident};
use rlx_runtime::train::{AdamSpec, ResidentTrainer};
use rlx_runtime::Device;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

const STEPS: usize = 3;
const FUSED: &str = "fused kernels (Compiled...)";

/// One column: who, in which mode, and its count per kind.
struct Column {
    label: String,
    total: u64,
    ops: BTreeMap<String, u64>,
}

impl Column {
    /// From one JSON line of either side; fused kernels in one row.
    fn parse(label: String, line: &str) -> Result<Column, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        let mut ops = BTreeMap::new();
        for (k, n) in v["ops"].as_object().ok_or("no ops")? {
            let kind = if k.starts_with("Compiled") {
                FUSED.to_string()
            } else {
                k.clone()
            };
            *ops.entry(kind).or_default() += n.as_u64().ok_or("a count")?;
        }
        Ok(Column {
            label,
            total: v["total"].as_u64().ok_or("no total")?,
            ops,
        })
    }
}

/// In a child: `STEPS` resident steps in `mode`, counted to `RLX_MLX_OP_COUNTS`.
fn child(mode: Mode) {
    register_plugin_backend(rlx_plugin_tests::parity::mlx(), Device::Mlx, mode);
    set_resident(Device::Mlx, true);
    let (g, wrt) = mlp::mlp();
    let mut t = ResidentTrainer::new(&g, &wrt, &mlp::initial(), &AdamSpec::new(1e-3), Device::Mlx)
        .expect("the MLP trains on the plugin");
    assert!(t.is_resident(), "the step is not resident");
    let (x, y) = mlp::batch();
    for _ in 0..STEPS {
        let loss = t.step(&[("x", &x), ("t", &y)])[0][0];
        assert!(loss.is_finite(), "the loss went to {loss}");
    }
}

/// The plugin's column for `mode`: the last step's line.
fn plugin(mode: Mode) -> Result<Column, String> {
    let file = std::env::temp_dir().join(format!(
        "rlx-op-counts-{}-{}.jsonl",
        std::process::id(),
        mode.name()
    ));
    let _ = std::fs::remove_file(&file);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--child", mode.name()])
        .env("RLX_MLX_OP_COUNTS", &file)
        .env("RLX_MLX_BACKGROUND_COMPILE", "0")
        .output()
        .map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        return Err(why_it_failed(&out));
    }
    // The trainer's step graph is the one run every step; its last run.
    let lines: Vec<&str> = text.lines().collect();
    let line = lines.last().ok_or("no run was counted")?;
    if lines.len() < STEPS {
        return Err(format!("{} runs counted for {STEPS} steps", lines.len()));
    }
    Column::parse(format!("rlx-mlx {}", mode.name()), line)
}

/// A failed child's reason: the last line it wrote on stderr.
fn why_it_failed(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("failed")
        .to_string()
}

/// Python MLX's columns (lazy, compiled), or why there are none.
fn python_mlx(python: &str) -> Result<Vec<Column>, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/op_counts.py");
    let out = Command::new(python)
        .arg(script)
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    if !out.status.success() {
        return Err(why_it_failed(&out));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).map_err(|e| e.to_string())?;
            let label = format!(
                "{} {}",
                v["framework"].as_str().unwrap_or("mlx"),
                v["mode"].as_str().unwrap_or("?")
            );
            Column::parse(label, l)
        })
        .collect()
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(m) = arg(&args, "--child") {
        child(Mode::from_name(&m).expect("a mode"));
        return;
    }
    let python = arg(&args, "--python").unwrap_or_else(|| "python3".into());
    let mut cols = Vec::new();
    for mode in [Mode::Lazy, Mode::Compiled] {
        match plugin(mode) {
            Ok(c) => cols.push(c),
            Err(e) => println!("rlx-mlx {}: {e}", mode.name()),
        }
    }
    let peers = python_mlx(&python);
    match &peers {
        Ok(p) => cols.extend(p.iter().map(|c| Column {
            label: c.label.clone(),
            total: c.total,
            ops: c.ops.clone(),
        })),
        Err(e) => println!("Python MLX skipped: {e}"),
    }
    println!(
        "MLX primitives evaluated in one training step of the MLP {}x{} -> {} -> {} (Adam)",
        mlp::BATCH,
        mlp::D_IN,
        mlp::D_HID,
        mlp::D_OUT
    );
    let kinds: BTreeSet<&String> = cols.iter().flat_map(|c| c.ops.keys()).collect();
    let width = kinds.iter().map(|k| k.len()).max().unwrap_or(8).max(8);
    print!("{:<width$}", "op kind");
    for c in &cols {
        print!(" {:>18}", c.label);
    }
    println!();
    for k in &kinds {
        print!("{k:<width$}");
        for c in &cols {
            print!(" {:>18}", c.ops.get(*k).copied().unwrap_or(0));
        }
        println!();
    }
    print!("{:<width$}", "total");
    for c in &cols {
        print!(" {:>18}", c.total);
    }
    println!();
    // The goal, mode against mode.
    for mode in ["lazy", "compiled"] {
        let ours = cols.iter().find(|c| c.label == format!("rlx-mlx {mode}"));
        let theirs = cols
            .iter()
            .find(|c| !c.label.starts_with("rlx-mlx") && c.label.ends_with(mode));
        if let (Some(o), Some(t)) = (ours, theirs) {
            println!(
                "{mode}: rlx-mlx {} against {} ({:.2}x): goal (at or below) {}",
                o.total,
                t.total,
                o.total as f64 / t.total as f64,
                if o.total <= t.total { "met" } else { "NOT met" }
            );
        }
    }
}
