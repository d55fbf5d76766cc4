//! `rlx-host run --explain` on a graph the MLX plugin cannot take whole:
//! it runs split with the CPU backend, matches it, and says where each node
//! ran and why; `--no-fallback` makes the first refused node the error.
//!
//! The model: y = sort(x·x, axis 1) + x (f32[3, 5]); the plugin does not
//! claim Sort. Reference: rlx-runtime's CPU backend (`--compare cpu`),
//! which runs these ops correctly; tolerance 1e-6 abs.

mod common;

use rlx_ir::{DType, Graph, Op, Shape};
use std::path::{Path, PathBuf};
use std::process::Output;

fn model(dir: &Path) -> PathBuf {
    let s = Shape::new(&[3, 5], DType::F32);
    let mut g = Graph::new("explain");
    let x = g.input("x", s.clone());
    let sq = g.binary(rlx_ir::op::BinaryOp::Mul, x, x, s.clone());
    let sorted = g.add_node(
        Op::Sort {
            axis: 1,
            descending: false,
        },
        vec![sq],
        s.clone(),
    );
    let y = g.binary(rlx_ir::op::BinaryOp::Add, sorted, x, s);
    g.set_outputs(vec![y]);
    let p = dir.join("explain.rlxmodel");
    std::fs::write(&p, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    p
}

fn rlx_host(home: &Path, args: &[&str]) -> Output {
    common::rlx_host_on_mlx(home, args)
}

#[test]
fn explain_names_where_each_node_ran_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let m = m.to_str().unwrap();
    for mode in ["lazy", "eager", "compiled"] {
        let o = rlx_host(
            dir.path(),
            &[
                "run",
                m,
                "--backend",
                "mlx",
                "--mode",
                mode,
                "--compare",
                "cpu",
                "--explain",
                "--json",
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{mode}: {}{out}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let err = v["outputs"][0]["max_abs_err"].as_f64().unwrap();
        assert!(err <= 1e-6, "{mode}: max abs err {err}");
        let nodes = v["placement"]["nodes"].as_array().unwrap();
        let sort = nodes
            .iter()
            .find(|n| n["op"] == "Sort")
            .expect("a Sort node");
        assert_eq!(sort["on"], "cpu", "{sort}");
        assert_eq!(sort["why"], "mlx does not claim Sort");
        assert!(nodes
            .iter()
            .any(|n| n["op"] == "Binary" && n["on"] == "mlx"));
        assert_eq!(v["placement"]["partitions"].as_array().unwrap().len(), 3);
        assert_eq!(v["placement"]["boundary_bytes"], 120);
    }
    let o = rlx_host(dir.path(), &["run", m, "--backend", "mlx", "--explain"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(
        text.contains("Sort f32 -> cpu [partition 1]: mlx does not claim Sort"),
        "{text}"
    );
    assert!(
        text.contains(
            "3 partition(s): 2 on mlx, 1 on cpu; 2 boundary tensor(s), 120 bytes per run"
        ),
        "{text}"
    );
}

#[test]
fn no_fallback_makes_the_refused_node_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = model(dir.path());
    let o = rlx_host(
        dir.path(),
        &[
            "run",
            m.to_str().unwrap(),
            "--backend",
            "mlx",
            "--no-fallback",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("Sort"), "{err}");
}
