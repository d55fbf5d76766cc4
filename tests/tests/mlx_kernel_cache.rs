//! Compiled mode loads the kernels MLX's CPU backend compiles from
//! `$TMPDIR/mlx/<version>/cpu`; the plugin uses that cache only when it is
//! the user's own with mode 0700 and nothing above it is writable by
//! another user. A planted cache (world-writable, or owned by someone
//! else) is refused: the graph runs lazily, with a warning saying why, and
//! nothing is read from or written to the planted directory. Each case
//! runs `rlx-host` in its own process with its own `TMPDIR`. Unix only.
#![cfg(unix)]

use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_tests::parity::mlx_plugin_dir;
use rlx_plugin_tests::profile_dir;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MLX_VERSION: &str = "0.32.4";

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// (x * x + x) * x - x + x * x: arithmetic MLX fuses into one JIT-compiled
/// kernel, which compiled mode uses (fusion removes most of its ops: the
/// plugin's recorded plan is not preferred, `plan.rs`).
fn model(dir: &Path) -> String {
    let s = Shape::new(&[257], DType::F32);
    let mut g = Graph::new("fused_cache_probe");
    let x = g.input("x", s.clone());
    let sq = g.binary(BinaryOp::Mul, x, x, s.clone());
    let a = g.binary(BinaryOp::Add, sq, x, s.clone());
    let m = g.binary(BinaryOp::Mul, a, x, s.clone());
    let d = g.binary(BinaryOp::Sub, m, x, s.clone());
    let o = g.binary(BinaryOp::Add, d, sq, s);
    g.set_outputs(vec![o]);
    let p = dir.join("probe.rlxmodel");
    std::fs::write(&p, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    p.to_str().unwrap().to_string()
}

/// `rlx-host run MODEL --mode compiled --compare cpu` with `TMPDIR=tmp`,
/// the kernels built by the run (`RLX_MLX_BACKGROUND_COMPILE=0`).
fn run_compiled(tmp: &Path) -> Output {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let m = model(work.path());
    Command::new(profile_dir().join("rlx-host"))
        .args([
            "run",
            &m,
            "--backend",
            "mlx",
            "--mode",
            "compiled",
            "--compare",
            "cpu",
            "--json",
        ])
        .env("RLX_BACKEND_PLUGINS", mlx_plugin_dir())
        .env("RLX_HOME", home.path())
        .env("HOME", home.path())
        .env("TMPDIR", tmp)
        // Its one run builds the kernels itself: in the background, a
        // process of one run ends before the build would start.
        .env("RLX_MLX_BACKGROUND_COMPILE", "0")
        .env_remove("TMP")
        .env_remove("TEMP")
        .env_remove("TEMPDIR")
        .output()
        .expect("spawn rlx-host")
}

fn cpu_dir(tmp: &Path) -> PathBuf {
    tmp.join("mlx").join(MLX_VERSION).join("cpu")
}

/// Its outputs matched the CPU backend (the graph ran, lazily or not).
fn assert_ran_and_matched(o: &Output) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "rlx-host failed: {err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let e = v["outputs"][0]["max_abs_err"]
        .as_f64()
        .expect("max_abs_err");
    // Arithmetic on [0,1)-ish random data: f32 rounding, far below any
    // real error.
    assert!(e < 1e-5, "max abs err {e}");
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_fresh_cache_is_made_private_and_used() {
    let tmp = tempfile::tempdir().unwrap();
    let o = run_compiled(tmp.path());
    assert_ran_and_matched(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("runs graph"), "unexpected fallback: {err}");
    let cpu = cpu_dir(tmp.path());
    for d in [
        tmp.path().join("mlx"),
        cpu.parent().unwrap().to_path_buf(),
        cpu.clone(),
    ] {
        let mode = std::fs::metadata(&d).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} has mode {mode:o}", d.display());
    }
    // Compiled mode really compiled: its kernel library is in the cache.
    assert!(
        names(&cpu).iter().any(|n| n.ends_with(".so")),
        "no kernel in {}: {:?}",
        cpu.display(),
        names(&cpu)
    );
}

#[test]
fn an_own_cache_that_others_cannot_write_is_tightened_to_0700() {
    let tmp = tempfile::tempdir().unwrap();
    let cpu = cpu_dir(tmp.path());
    std::fs::create_dir_all(&cpu).unwrap();
    chmod(&cpu, 0o755);
    let o = run_compiled(tmp.path());
    assert_ran_and_matched(&o);
    assert_eq!(std::fs::metadata(&cpu).unwrap().mode() & 0o777, 0o700);
    assert!(names(&cpu).iter().any(|n| n.ends_with(".so")));
}

#[test]
fn a_world_writable_cache_is_refused_and_the_graph_runs_lazily() {
    let tmp = tempfile::tempdir().unwrap();
    let cpu = cpu_dir(tmp.path());
    std::fs::create_dir_all(&cpu).unwrap();
    chmod(&cpu, 0o777);
    // What a planter would leave: a "kernel" that is not even a library.
    std::fs::write(cpu.join("libplanted.so"), b"not a library").unwrap();
    let before = names(&cpu);
    let o = run_compiled(tmp.path());
    assert_ran_and_matched(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("compiled mode runs graph \"fused_cache_probe\" lazily"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "directory {} is writable by every user (mode 0777)",
            cpu.canonicalize().unwrap().display()
        )),
        "{err}"
    );
    assert_eq!(names(&cpu), before, "the refused cache was written to");
    assert_eq!(std::fs::metadata(&cpu).unwrap().mode() & 0o777, 0o777);
}

#[test]
fn a_writable_mlx_directory_above_the_cache_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mlx = tmp.path().join("mlx");
    std::fs::create_dir_all(cpu_dir(tmp.path())).unwrap();
    chmod(&cpu_dir(tmp.path()), 0o700);
    chmod(&mlx, 0o777);
    let o = run_compiled(tmp.path());
    assert_ran_and_matched(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("lazily"), "{err}");
    assert!(
        err.contains("is writable by every user (mode 0777)"),
        "{err}"
    );
    assert!(!names(&cpu_dir(tmp.path()))
        .iter()
        .any(|n| n.ends_with(".so")));
}

#[test]
fn a_cache_owned_by_another_user_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: giving a directory to another user needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mlx = tmp.path().join("mlx");
    let cpu = cpu_dir(tmp.path());
    std::fs::create_dir_all(&cpu).unwrap();
    for d in [&mlx, &cpu.parent().unwrap().to_path_buf(), &cpu] {
        chmod(d, 0o700);
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    let o = run_compiled(tmp.path());
    assert_ran_and_matched(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("lazily"), "{err}");
    assert!(err.contains("is owned by uid 65534"), "{err}");
    assert!(names(&cpu).is_empty(), "{:?}", names(&cpu));
}
