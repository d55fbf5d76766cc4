//! The MLX plugin directory is relocatable: copied anywhere with no build
//! tree beside it, it is found through discovery alone and works; without an
//! optimized BLAS it still works and says so. `rlx-host` links no MLX.

use rlx_plugin_tests::parity::mlx_plugin_dir;
use rlx_plugin_tests::profile_dir;
use std::path::Path;
use std::process::Command;

/// Copy a directory tree, keeping symlinks as symlinks.
fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let (s, d) = (e.path(), dst.join(e.file_name()));
        let meta = std::fs::symlink_metadata(&s).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&s).unwrap(), &d).unwrap();
        } else if meta.is_dir() {
            copy_tree(&s, &d);
        } else if !e.file_name().to_string_lossy().starts_with('.') {
            std::fs::copy(&s, &d).unwrap();
        }
    }
}

/// A sandbox: `bin/rlx-host` (a copy, so its own `plugins/` dir is empty)
/// and `elsewhere/mlx/` (a copy of the plugin directory), with HOME and
/// RLX_HOME pointing at empty directories.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::copy(
            profile_dir().join("rlx-host"),
            dir.path().join("bin/rlx-host"),
        )
        .unwrap();
        copy_tree(&mlx_plugin_dir(), &dir.path().join("elsewhere/mlx"));
        Sandbox { dir }
    }

    fn rlx_host(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(self.dir.path().join("bin/rlx-host"))
            .args(args)
            .env("RLX_BACKEND_PLUGINS", self.dir.path().join("elsewhere"))
            .env("HOME", self.dir.path().join("home"))
            .env("RLX_HOME", self.dir.path().join("home"))
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .expect("run rlx-host");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn inspect(&self) -> serde_json::Value {
        let lib = self.dir.path().join("elsewhere/mlx/librlx_mlx.so");
        let (ok, out, err) =
            self.rlx_host(&["plugins", "inspect", lib.to_str().unwrap(), "--json"]);
        assert!(ok, "inspect failed: {err}");
        serde_json::from_str(&out).unwrap()
    }
}

#[test]
fn a_copied_plugin_directory_is_found_by_discovery_and_loads() {
    let sb = Sandbox::new();
    let (ok, out, err) = sb.rlx_host(&["plugins", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cands = v["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 1, "{out}");
    assert_eq!(cands[0]["name"], "mlx");
    assert_eq!(cands[0]["state"], "loaded");
    assert_eq!(cands[0]["source"], "RLX_BACKEND_PLUGINS");
    assert!(cands[0]["path"]
        .as_str()
        .unwrap()
        .starts_with(sb.dir.path().to_str().unwrap()));

    let info = sb.inspect();
    let lib = info["descriptor"]["build_info"]["mlx.library"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        lib.starts_with(sb.dir.path().to_str().unwrap()),
        "libmlx came from {lib}, not the copy"
    );
    assert!(info["lowering_table"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["op_kind"] == "MatMul"));
}

#[test]
fn without_an_optimized_blas_it_uses_the_bundled_one_and_says_so() {
    let sb = Sandbox::new();
    let with = sb.inspect()["descriptor"]["build_info"]["blas"]
        .as_str()
        .unwrap()
        .to_string();
    if Path::new("/usr/lib/x86_64-linux-gnu/libopenblas.so.0").exists() {
        assert!(with.starts_with("OpenBLAS (optimized)"), "{with}");
    }
    std::fs::remove_dir_all(sb.dir.path().join("elsewhere/mlx/blas/optimized")).unwrap();
    let without = sb.inspect()["descriptor"]["build_info"]["blas"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        without.starts_with("reference BLAS bundled with mlx-cpu"),
        "{without}"
    );
    assert!(
        without.contains(sb.dir.path().to_str().unwrap()),
        "{without}"
    );
}

#[test]
fn rlx_host_links_no_mlx() {
    let out = Command::new("ldd")
        .arg(profile_dir().join("rlx-host"))
        .output();
    let Ok(out) = out else {
        return; // no ldd on this platform
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.is_empty());
    assert!(
        !text.to_lowercase().contains("mlx"),
        "rlx-host links MLX:\n{text}"
    );
}

#[test]
fn rlx_host_run_through_discovery_only_matches_the_cpu_backend() {
    use rlx_ir::op::BinaryOp;
    use rlx_ir::{DType, Graph, Shape};
    let sb = Sandbox::new();
    // x·w + b → softmax over the last axis.
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let mut g = Graph::new("affine_softmax");
    let x = g.input("x", f(&[4, 16]));
    let w = g.param("w", f(&[16, 10]));
    let b = g.param("b", f(&[10]));
    let m = g.matmul(x, w, f(&[4, 10]));
    let a = g.binary(BinaryOp::Add, m, b, f(&[4, 10]));
    let s = g.softmax(a, 1, f(&[4, 10]));
    g.set_outputs(vec![s]);
    let model = sb.dir.path().join("model.rlxmodel");
    std::fs::write(&model, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    for mode in ["lazy", "eager", "compiled"] {
        let (ok, out, err) = sb.rlx_host(&[
            "run",
            model.to_str().unwrap(),
            "--backend",
            "mlx",
            "--mode",
            mode,
            "--compare",
            "cpu",
            "--seed",
            "7",
            "--json",
        ]);
        assert!(ok, "[{mode}] {err}");
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(v["backend"], "mlx");
        assert_eq!(v["mode"], mode);
        let outs = v["outputs"].as_array().unwrap();
        assert_eq!(outs.len(), 1);
        assert_eq!(outs[0]["shape"], serde_json::json!([4, 10]));
        assert_eq!(outs[0]["dtype"], "f32");
        let abs = outs[0]["max_abs_err"].as_f64().unwrap();
        assert!(abs < 1e-5, "[{mode}] max abs err {abs}");
        assert!(v["compile_ms"].as_f64().unwrap() >= 0.0 && v["run_ms"].as_f64().unwrap() >= 0.0);
    }
    // A model the plugin cannot run fails with one line naming the cause.
    let bad = sb.dir.path().join("bad.rlxmodel");
    std::fs::write(&bad, "rlxmodel 1\nopset 1\ngraph @g { oops }\n").unwrap();
    let (ok, out, err) = sb.rlx_host(&["run", bad.to_str().unwrap(), "--backend", "mlx", "--json"]);
    assert!(!ok && out.is_empty());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A plugin directory under a path that is not UTF-8 loads and runs: paths
/// are OS strings on the host side and cross the plugin's C++ lossily (an
/// earlier shim aborted the host there, std::terminate in a noexcept
/// bridge). `plugins inspect` also takes the directory itself.
#[test]
fn a_plugin_under_a_non_utf8_directory_loads_and_runs() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"plugins-\xff\xfe"));
    copy_tree(&mlx_plugin_dir(), &odd.join("mlx"));
    let out = Command::new(profile_dir().join("rlx-host"))
        .args(["plugins", "inspect", "--json"])
        .arg(odd.join("mlx"))
        .env("HOME", dir.path())
        .env("RLX_HOME", dir.path())
        .output()
        .expect("run rlx-host");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "inspect failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["descriptor"]["name"], "mlx");
    let library = v["descriptor"]["build_info"]["mlx.library"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        library.contains("plugins-\u{fffd}\u{fffd}") && library.ends_with("mlx/lib/libmlx.so"),
        "{library}"
    );

    // Discovery through the environment, and a run on the plugin.
    let model = dir.path().join("m.rlxmodel");
    let m = rlx_host::models::mlp(&rlx_host::models::MlpConfig::default());
    std::fs::write(&model, rlx_ir::rlxmodel::to_text(&m.graph).unwrap()).unwrap();
    let out = Command::new(profile_dir().join("rlx-host"))
        .arg("run")
        .arg(&model)
        .args(["--backend", "mlx", "--compare", "cpu", "--json"])
        .env("RLX_BACKEND_PLUGINS", &odd)
        .env("HOME", dir.path())
        .env("RLX_HOME", dir.path())
        .output()
        .expect("run rlx-host");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let err = v["outputs"][0]["max_abs_err"].as_f64().unwrap();
    assert!(err < 1e-4, "max abs error {err} against the CPU backend");
}
