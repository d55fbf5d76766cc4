//! The plugin's custom ops as a user sees them: `rlx-host plugins inspect`
//! lists them, `rlx-host run` runs a model that uses them.

mod common;

use rlx_ir::{DType, Graph, Op, Shape};
use std::process::{Command, Output};

fn rlx_host(home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .args(args)
        .env_remove("RLX_BACKEND_PLUGINS")
        .env("RLX_HOME", home)
        .output()
        .expect("spawn rlx-host")
}

fn ok_json(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "rlx-host failed: {}\n{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn inspect_lists_each_custom_op_with_origin_kind_arity_and_shape_rule() {
    let home = tempfile::tempdir().unwrap();
    let dir = common::mlx_plugin_dir();
    let d = dir.to_str().unwrap();
    let o = rlx_host(home.path(), &["plugins", "inspect", d]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("mlx.logaddexp"))
        .unwrap_or_else(|| panic!("no mlx.logaddexp row:\n{text}"));
    for want in [
        "plugin/native",
        "2 -> 1",
        "broadcast of the inputs",
        "logaddexp",
    ] {
        assert!(line.contains(want), "{want:?} not in {line:?}");
    }
    let v = ok_json(&rlx_host(home.path(), &["plugins", "inspect", d, "--json"]));
    let ops = v["custom_ops"].as_array().unwrap();
    let erfinv = ops
        .iter()
        .find(|o| o["name"] == "mlx.erfinv")
        .expect("mlx.erfinv");
    assert_eq!(erfinv["origin"], "plugin");
    assert_eq!(erfinv["kind"], "native");
    assert_eq!(erfinv["n_inputs"], 1);
    assert_eq!(erfinv["shape_rule"], "same as input 0");
}

#[test]
fn run_executes_a_model_using_the_plugins_own_custom_ops_in_every_mode() {
    let home = tempfile::tempdir().unwrap();
    // Built without the plugin's registry: the file only names the ops.
    let mut g = Graph::new("uses_plugin_ops");
    let x = g.input("x", Shape::new(&[3, 5], DType::F32));
    let b = g.input("b", Shape::new(&[5], DType::F32));
    let custom = |name: &str, n: u32, attrs: Vec<u8>| Op::Custom {
        name: name.into(),
        num_inputs: n,
        attrs,
    };
    let lae = g.add_node(
        custom("mlx.logaddexp", 2, vec![]),
        vec![x, b],
        Shape::new(&[3, 5], DType::F32),
    );
    let y = g.add_node(
        custom("mlx.logcumsumexp", 1, (-1i32).to_le_bytes().to_vec()),
        vec![lae],
        Shape::new(&[3, 5], DType::F32),
    );
    g.set_outputs(vec![y]);
    let model = home.path().join("custom.rlxmodel");
    std::fs::write(&model, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    let dir = common::mlx_plugin_dir();
    for mode in ["lazy", "eager", "compiled"] {
        let v = ok_json(&rlx_host(
            home.path(),
            &[
                "run",
                model.to_str().unwrap(),
                "--backend",
                "mlx",
                "--plugin",
                dir.to_str().unwrap(),
                "--mode",
                mode,
                "--json",
            ],
        ));
        assert_eq!(v["mode"], mode);
        let out = &v["outputs"][0];
        assert_eq!(out["shape"], serde_json::json!([3, 5]), "{v}");
    }
}
