//! `RLX_MLX_TRACE_RUNS=1` makes every run print one line on stderr naming
//! its device, mode and phases with their microseconds. The variable is
//! read once per process, so the test runs the plugin in a child process
//! (this test binary again, with the variable set) and reads its stderr.

use rlx_mlx::executable::MlxExecutable;
use rlx_plugin_api::convert::f32_to_le;
use rlx_plugin_api::tensor::RawView;
use rlx_plugin_api::{CompileOptions, DType, Executable, Mode, TensorRef};

const CHILD: &str = "RLX_TEST_RUN_TRACE_CHILD";

/// `exp(x) * x` (two ops), or `exp(x)` alone.
fn graph_text(two_ops: bool) -> String {
    use rlx_ir::infer::GraphExt;
    let mut g = rlx_ir::Graph::new("g");
    let x = g.input("x", rlx_ir::Shape::new(&[4], rlx_ir::DType::F32));
    let mut y = g.exp(x);
    if two_ops {
        y = g.mul(y, x);
    }
    g.set_named_outputs([("y", y)]);
    rlx_ir::rlxmodel::to_text(&g).unwrap()
}

/// In the child: one run in each mode, then compiled mode on a graph of one
/// op (built lazily: nothing to fuse), then a sleep-free exit.
fn runs() {
    let bytes = f32_to_le(&[0.0, 1.0, 2.0, 3.0]);
    for (mode, two_ops) in [
        (Mode::Lazy, true),
        (Mode::Eager, true),
        (Mode::Compiled, true),
        (Mode::Compiled, false),
    ] {
        let text = graph_text(two_ops);
        let opts = CompileOptions {
            mode,
            device: Some((rlx_plugin_api::DeviceKind::Cpu, 0)),
            ..CompileOptions::default()
        };
        let mut exe = MlxExecutable::compile(&text, &opts).unwrap();
        let view = RawView::of(DType::F32, &[4], &bytes, 0);
        // SAFETY: the view describes `bytes`, alive for the call.
        let t = unsafe { TensorRef::from_raw(&view.raw) }.unwrap();
        exe.run_owned(&[("x", t)]).unwrap();
    }
}

/// Run this binary's test `name` again in a child process, as the child
/// (with `RLX_MLX_TRACE_RUNS=1` when `traced`): its stderr.
fn child_stderr(name: &str, traced: bool) -> String {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture"]).env(CHILD, "1");
    if traced {
        cmd.env("RLX_MLX_TRACE_RUNS", "1");
    } else {
        cmd.env_remove("RLX_MLX_TRACE_RUNS");
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed: {err}");
    err
}

#[test]
fn a_traced_run_prints_its_phases_in_order_within_its_total() {
    if std::env::var_os(CHILD).is_some() {
        runs();
        return;
    }
    let err = child_stderr(
        "a_traced_run_prints_its_phases_in_order_within_its_total",
        true,
    );
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rlx-mlx run "))
        .collect();
    assert_eq!(lines.len(), 4, "one line per run:\n{err}");
    // exp and a product of float32 on the CPU: the plugin's kernel and
    // arithmetic, evaluated on the calling thread in every mode.
    for (line, mode) in lines.iter().zip([
        "lazy-inline:",
        "eager-inline:",
        "compiled-inline:",
        "lazy-inline:",
    ]) {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(w.last(), Some(&"us"), "{line}");
        let w = &w[..w.len() - 1];
        assert_eq!(&w[2..4], ["cpu:0", mode], "{line}");
        let names: Vec<&str> = w[4..].iter().step_by(2).copied().collect();
        assert_eq!(
            names,
            ["device", "inputs", "build", "eval", "finish", "outputs", "total"],
            "{line}"
        );
        let us: Vec<f64> = w[5..]
            .iter()
            .step_by(2)
            .map(|v| v.parse().unwrap())
            .collect();
        let (phases, total) = us.split_at(us.len() - 1);
        assert!(us.iter().all(|&v| v >= 0.0), "{line}");
        assert!(total[0] > 0.0, "{line}");
        assert!(
            phases.iter().sum::<f64>() <= total[0] + 0.5,
            "phases within the total: {line}"
        );
    }
}

#[test]
fn an_untraced_process_prints_no_run_lines() {
    if std::env::var_os(CHILD).is_some() {
        runs();
        return;
    }
    let err = child_stderr("an_untraced_process_prints_no_run_lines", false);
    assert!(!err.contains("rlx-mlx run "), "{err}");
}
