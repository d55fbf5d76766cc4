//! `rlx-host run` as a user runs it: the binary, a model file, the fixture
//! plugin.

mod common;

use rlx_host::models::matmul_relu_add;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Env { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The fixture-sized model as a file.
    fn model(&self) -> PathBuf {
        let m = matmul_relu_add(4, 8, 6);
        let p = self.path("model.rlxmodel");
        std::fs::write(&p, rlx_ir::rlxmodel::to_text(&m.graph).unwrap()).unwrap();
        p
    }

    /// rlx-host with discovery limited to what the test names.
    fn rlx_host(&self, args: &[&str]) -> Output {
        self.rlx_host_with(args, &[])
    }

    /// [`Env::rlx_host`] with these variables set too.
    fn rlx_host_with(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_rlx-host"))
            .args(args)
            .env_remove("RLX_BACKEND_PLUGINS")
            .env("RLX_HOME", self.path("home"))
            .env_remove("RUST_BACKTRACE")
            .envs(vars.iter().copied())
            .output()
            .expect("spawn rlx-host")
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failure: non-zero exit and exactly one stderr line, the error.
fn assert_one_line_failure(o: &Output, must_contain: &[&str]) -> String {
    let err = stderr(o);
    assert!(
        !o.status.success(),
        "expected failure; stdout: {}",
        stdout(o)
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "stderr must be one line, got:\n{err}");
    assert!(lines[0].starts_with("rlx-host: error: "), "{err}");
    for m in must_contain {
        assert!(lines[0].contains(m), "{m:?} not in: {err}");
    }
    lines[0].to_string()
}

fn json(o: &Output) -> serde_json::Value {
    let out = stdout(o);
    assert!(
        o.status.success(),
        "rlx-host failed: {}\n{}",
        stderr(o),
        out
    );
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{out}"));
    assert!(v.is_object(), "{v}");
    v
}

#[test]
fn run_on_the_fixture_prints_one_json_object_with_small_errors() {
    let env = Env::new();
    let model = env.model();
    let fixture = common::fixture_path();
    for mode in ["lazy", "eager", "compiled"] {
        let o = env.rlx_host(&[
            "run",
            s(&model),
            "--backend",
            "fixture",
            "--plugin",
            s(&fixture),
            "--mode",
            mode,
            "--compare",
            "cpu",
            "--json",
        ]);
        let v = json(&o);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        for k in [
            "backend",
            "mode",
            "outputs",
            "compile_ms",
            "run_ms",
            "placement",
            "reference_error",
        ] {
            assert!(keys.contains(&k), "{k} missing from {v}");
        }
        assert_eq!(keys.len(), 7, "{v}");
        assert!(v["reference_error"].is_null(), "{v}");
        assert_eq!(
            v["placement"],
            serde_json::Value::Null,
            "only with --explain"
        );
        assert_eq!(v["backend"], "fixture");
        assert_eq!(v["mode"], mode);
        assert!(v["compile_ms"].as_f64().unwrap() >= 0.0);
        assert!(v["run_ms"].as_f64().unwrap() >= 0.0);
        let outs = v["outputs"].as_array().unwrap();
        assert_eq!(outs.len(), 1, "{v}");
        let o0 = &outs[0];
        assert_eq!(o0["name"], "y");
        assert_eq!(o0["shape"], serde_json::json!([4, 6]));
        assert_eq!(o0["dtype"], "f32");
        let abs = o0["max_abs_err"].as_f64().unwrap();
        let rel = o0["max_rel_err"].as_f64().unwrap();
        assert!(abs <= 1e-5, "{v}");
        assert!(rel.is_finite(), "{v}");
    }
}

#[test]
fn without_compare_the_error_fields_are_null() {
    let env = Env::new();
    let model = env.model();
    let fixture = common::fixture_path();
    let o = env.rlx_host(&[
        "run",
        s(&model),
        "--backend",
        "fixture",
        "--plugin",
        s(&fixture),
        "--json",
    ]);
    let v = json(&o);
    assert_eq!(v["mode"], "lazy");
    assert!(v["outputs"][0]["max_abs_err"].is_null(), "{v}");
    assert!(v["outputs"][0]["max_rel_err"].is_null(), "{v}");
}

#[test]
fn a_reference_that_crashes_is_reported_as_the_references_and_the_result_stands() {
    let env = Env::new();
    let model = env.model();
    let fixture = common::fixture_path();
    let run = |json: bool| {
        let mut args = vec![
            "run",
            s(&model),
            "--backend",
            "fixture",
            "--plugin",
            s(&fixture),
            "--compare",
            "cpu",
        ];
        if json {
            args.push("--json");
        }
        env.rlx_host_with(&args, &[("RLX_HOST_FAULT", "reference-abort")])
    };
    let o = run(true);
    // The comparison asked for was not made: a failure, in one line.
    let line = assert_one_line_failure(&o, &["--compare cpu: the cpu reference failed"]);
    assert!(line.contains("killed by signal"), "{line}");
    // The backend's own result is still reported, without errors.
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["backend"], "fixture");
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([4, 6]));
    assert!(v["outputs"][0]["max_abs_err"].is_null(), "{v}");
    let e = v["reference_error"].as_str().unwrap();
    assert!(e.contains("the cpu reference failed"), "{e}");
    let text = stdout(&run(false));
    assert!(
        text.contains("compare  against cpu: not made, the cpu reference failed"),
        "{text}"
    );
    assert!(text.contains("[4, 6]"), "{text}");
}

/// `--compare FILE`: outputs saved with `--output` by one run are the
/// reference of another (here the CPU backend's, then the fixture's
/// against them); a file that is not that model's outputs is refused
/// before anything runs.
#[test]
fn outputs_saved_by_one_run_are_the_reference_of_another() {
    use safetensors::tensor::{Dtype, TensorView};
    let env = Env::new();
    let model = env.model();
    let fixture = common::fixture_path();
    let saved = env.path("cpu.safetensors");
    let o = env.rlx_host(&["run", s(&model), "--backend", "cpu", "--output", s(&saved)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let against = |file: &Path, seed: &str| {
        env.rlx_host(&[
            "run",
            s(&model),
            "--backend",
            "fixture",
            "--plugin",
            s(&fixture),
            "--seed",
            seed,
            "--compare",
            s(file),
            "--json",
        ])
    };
    let v = json(&against(&saved, "0"));
    assert!(v["reference_error"].is_null(), "{v}");
    assert!(
        v["outputs"][0]["max_abs_err"].as_f64().unwrap() <= 1e-5,
        "{v}"
    );
    // Other inputs give other outputs: the saved ones are what is compared.
    let v = json(&against(&saved, "7"));
    assert!(
        v["outputs"][0]["max_abs_err"].as_f64().unwrap() > 1e-2,
        "{v}"
    );
    // A tensor of the wrong shape, another name, a path that is not there.
    let write = |name: &str, shape: Vec<usize>| {
        let bytes = vec![0u8; shape.iter().product::<usize>() * 4];
        let p = env.path(&format!("{name}.safetensors"));
        let view = TensorView::new(Dtype::F32, shape, &bytes).unwrap();
        safetensors::serialize_to_file([(name.to_string(), view)], &None, &p).unwrap();
        p
    };
    let line = assert_one_line_failure(&against(&write("y", vec![6, 4]), "0"), &["--compare"]);
    assert!(
        line.contains("shape [4, 6]") && line.contains("[6, 4]"),
        "{line}"
    );
    let line = assert_one_line_failure(&against(&write("z", vec![4, 6]), "0"), &["--compare"]);
    assert!(line.contains("\"z\" is not an output"), "{line}");
    let line = assert_one_line_failure(&against(&env.path("none.safetensors"), "0"), &[]);
    assert!(line.contains("neither `cpu`"), "{line}");
}

#[test]
fn the_cpu_backend_and_the_readable_report() {
    let env = Env::new();
    let model = env.model();
    let o = env.rlx_host(&["run", s(&model), "--backend", "cpu", "--compare", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("OUTPUT"), "{out}");
    assert!(out.contains("[4, 6]"), "{out}");
    let v = json(&env.rlx_host(&["run", s(&model), "--backend", "cpu", "--json"]));
    assert!(v["mode"].is_null(), "{v}");
}

#[test]
fn the_same_seed_gives_the_same_numbers_and_params_come_from_safetensors() {
    use safetensors::tensor::{Dtype, TensorView};
    let env = Env::new();
    let model = env.model();
    // w = 0 and b = 1 everywhere: y = relu(x @ 0) + 1 = 1 whatever x is.
    let w = vec![0u8; 8 * 6 * 4];
    let b: Vec<u8> = (0..4 * 6).flat_map(|_| 1f32.to_le_bytes()).collect();
    // b as f16: converted to the model's f32.
    let b16: Vec<u8> = (0..4 * 6)
        .flat_map(|_| half::f16::from_f32(1.0).to_le_bytes())
        .collect();
    for (file, b, bt) in [
        ("p32.safetensors", &b, Dtype::F32),
        ("p16.safetensors", &b16, Dtype::F16),
    ] {
        let tensors = vec![
            ("w", TensorView::new(Dtype::F32, vec![8, 6], &w).unwrap()),
            ("b", TensorView::new(bt, vec![4, 6], b).unwrap()),
        ];
        let p = env.path(file);
        safetensors::serialize_to_file(tensors, &None, &p).unwrap();
        // Compare against the CPU: both must see the file's params.
        let fixture = common::fixture_path();
        let v = json(&env.rlx_host(&[
            "run",
            s(&model),
            "--backend",
            "fixture",
            "--plugin",
            s(&fixture),
            "--params",
            s(&p),
            "--compare",
            "cpu",
            "--json",
        ]));
        assert_eq!(v["outputs"][0]["max_abs_err"].as_f64(), Some(0.0), "{v}");
    }
    // Seeds: the same seed is reproducible, another seed is different
    // (checked through the library, which the binary uses).
    let g = matmul_relu_add(4, 8, 6).graph;
    let a = rlx_host::run::random_data(&g, 3).unwrap();
    let b = rlx_host::run::random_data(&g, 3).unwrap();
    let c = rlx_host::run::random_data(&g, 4).unwrap();
    assert_eq!(a.inputs, b.inputs);
    assert_eq!(a.params, b.params);
    assert_ne!(a.inputs, c.inputs);
}

#[test]
fn a_missing_model_file_is_one_line() {
    let env = Env::new();
    let missing = env.path("nope.rlxmodel");
    let o = env.rlx_host(&["run", s(&missing), "--backend", "cpu"]);
    assert_one_line_failure(&o, &["cannot read model", "nope.rlxmodel"]);
}

#[test]
fn an_unparsable_model_is_one_line() {
    let env = Env::new();
    let bad = env.path("bad.rlxmodel");
    std::fs::write(&bad, "rlxmodel 1\nopset 1\nthis is not a graph {{{\n").unwrap();
    let o = env.rlx_host(&["run", s(&bad), "--backend", "cpu"]);
    assert_one_line_failure(&o, &["bad.rlxmodel", "not a valid .rlxmodel"]);
}

#[test]
fn an_unknown_backend_is_one_line_listing_what_was_found() {
    let env = Env::new();
    let model = env.model();
    let fixture = common::fixture_path();
    let o = env.rlx_host(&[
        "run",
        s(&model),
        "--backend",
        "nosuch",
        "--plugin",
        s(&fixture),
    ]);
    let line = assert_one_line_failure(&o, &["no plugin named \"nosuch\"", "fixture"]);
    assert!(line.contains("loaded"), "{line}");
    // A named plugin file that does not exist is listed as rejected.
    // (The name must be one no default directory provides: the workspace's
    // build puts the MLX plugin in target/<profile>/plugins/.)
    let o = env.rlx_host(&[
        "run",
        s(&model),
        "--backend",
        "nosuch",
        "--plugin",
        s(&env.path("librlx_nosuch.so")),
    ]);
    assert_one_line_failure(
        &o,
        &["no plugin named \"nosuch\"", "librlx_nosuch.so: rejected"],
    );
}

#[test]
fn a_params_file_with_a_wrong_shape_is_one_line_naming_both_shapes() {
    use safetensors::tensor::{Dtype, TensorView};
    let env = Env::new();
    let model = env.model();
    let w = vec![0u8; 6 * 8 * 4];
    let p = env.path("wrong.safetensors");
    safetensors::serialize_to_file(
        vec![("w", TensorView::new(Dtype::F32, vec![6, 8], &w).unwrap())],
        &None,
        &p,
    )
    .unwrap();
    let fixture = common::fixture_path();
    let o = env.rlx_host(&[
        "run",
        s(&model),
        "--backend",
        "fixture",
        "--plugin",
        s(&fixture),
        "--params",
        s(&p),
        "--json",
    ]);
    assert_one_line_failure(&o, &["param \"w\"", "[8, 6]", "[6, 8]"]);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
}

#[test]
fn a_plugin_failure_inside_rlx_runtime_is_one_line() {
    // The fixture does not run Tanh: the plugin's compile error (raised
    // as a panic inside Session::compile) is caught and reported.
    let env = Env::new();
    let mut g = rlx_ir::Graph::new("tanh");
    let x = g.input("x", rlx_ir::Shape::new(&[2, 2], rlx_ir::DType::F32));
    let y = rlx_ir::infer::GraphExt::tanh(&mut g, x);
    g.set_outputs(vec![y]);
    let p = env.path("tanh.rlxmodel");
    std::fs::write(&p, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    let fixture = common::fixture_path();
    let o = env.rlx_host(&[
        "run",
        s(&p),
        "--backend",
        "fixture",
        "--plugin",
        s(&fixture),
    ]);
    assert_one_line_failure(&o, &["fixture plugin:"]);
}

#[test]
fn plugins_listing_still_works() {
    let env = Env::new();
    let fixture = common::fixture_path();
    let o = env.rlx_host(&["plugins", "--plugin", s(&fixture), "--json"]);
    let v = json(&o);
    assert_eq!(v["candidates"][0]["name"], "fixture");
    let o = env.rlx_host(&["plugins", "inspect", s(&fixture)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("MatMul"));
}

/// y = fft(x), z = ifft(w): a c64 input and a c64 param, both [4, 8]
/// (Fft on c64 is claimed by the MLX plugin). A c64 element is two values
/// (re, im); a run that fed one value per element failed with "input `x`
/// got 16 values; its shape [4, 8] holds 32".
fn c64_model(env: &Env) -> PathBuf {
    let mut g = rlx_ir::Graph::new("c64");
    let x = g.input("x", rlx_ir::Shape::new(&[4, 8], rlx_ir::DType::C64));
    let w = g.param("w", rlx_ir::Shape::new(&[4, 8], rlx_ir::DType::C64));
    let y = g.fft(x, false);
    let z = g.fft(w, true);
    g.set_outputs(vec![y, z]);
    let p = env.path("c64.rlxmodel");
    std::fs::write(&p, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    p
}

/// Both outputs are c64 [4, 8] and, with `--compare cpu`, within `tol` of
/// the CPU (an unnormalized 8-point FFT of values in [-1, 1)).
fn assert_c64_outputs(v: &serde_json::Value, tol: f64) {
    let outs = v["outputs"].as_array().unwrap();
    assert_eq!(outs.len(), 2, "{v}");
    for o in outs {
        assert_eq!(o["shape"], serde_json::json!([4, 8]), "{v}");
        assert_eq!(o["dtype"], "c64", "{v}");
        let abs = o["max_abs_err"].as_f64().unwrap();
        assert!(abs <= tol, "{v}");
    }
}

#[test]
fn a_c64_model_runs_on_the_cpu_and_the_mlx_plugin_in_every_mode() {
    let env = Env::new();
    let model = c64_model(&env);
    let v = json(&env.rlx_host(&[
        "run",
        s(&model),
        "--backend",
        "cpu",
        "--compare",
        "cpu",
        "--json",
    ]));
    assert_c64_outputs(&v, 0.0);
    let mlx = common::mlx_plugin_dir();
    for mode in ["lazy", "eager", "compiled"] {
        let v = json(&env.rlx_host(&[
            "run",
            s(&model),
            "--backend",
            "mlx",
            "--plugin",
            s(&mlx),
            "--mode",
            mode,
            "--compare",
            "cpu",
            "--json",
        ]));
        assert_eq!(v["mode"], mode);
        // An 8-point FFT of values of order 1 in f32: a few ulps of ~8.
        assert_c64_outputs(&v, 1e-5);
    }
}

#[test]
fn a_c64_param_comes_from_safetensors_as_a_float_tensor_with_a_pair_axis() {
    use safetensors::tensor::{Dtype, TensorView};
    let env = Env::new();
    let model = c64_model(&env);
    let w: Vec<u8> = (0..4 * 8 * 2)
        .flat_map(|i| (i as f32 * 0.01).to_le_bytes())
        .collect();
    let p = env.path("w.safetensors");
    safetensors::serialize_to_file(
        vec![("w", TensorView::new(Dtype::F32, vec![4, 8, 2], &w).unwrap())],
        &None,
        &p,
    )
    .unwrap();
    let mlx = common::mlx_plugin_dir();
    let v = json(&env.rlx_host(&[
        "run",
        s(&model),
        "--backend",
        "mlx",
        "--plugin",
        s(&mlx),
        "--params",
        s(&p),
        "--compare",
        "cpu",
        "--json",
    ]));
    assert_c64_outputs(&v, 1e-5);
    // The element shape alone holds half the values: one line naming the
    // layout a complex param needs.
    let p = env.path("half.safetensors");
    safetensors::serialize_to_file(
        vec![(
            "w",
            TensorView::new(Dtype::F32, vec![4, 8], &w[..4 * 8 * 4]).unwrap(),
        )],
        &None,
        &p,
    )
    .unwrap();
    let o = env.rlx_host(&["run", s(&model), "--backend", "cpu", "--params", s(&p)]);
    assert_one_line_failure(&o, &["param \"w\"", "c64", "[4, 8, 2]", "[4, 8]"]);
}
