//! The statically linked host runs: the MLX plugin registers without a
//! file or `dlopen`, and its results match rlx-runtime's CPU backend in
//! every mode (tolerance 1e-5 abs: an MLP of width 16, f32).

use std::process::Command;

#[test]
fn the_statically_linked_host_runs_the_plugin_without_a_library_file() {
    let o = Command::new(env!("CARGO_BIN_EXE_rlx-static-host"))
        .env_remove("RLX_BACKEND_PLUGINS")
        .output()
        .expect("the static host runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("plugin mlx 0.1.0 registered from static:mlx"),
        "{out}"
    );
    for mode in ["lazy", "eager", "compiled"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{mode} max abs err")))
            .unwrap_or_else(|| panic!("no {mode} line in {out}"));
        let err: f32 = line.split_whitespace().nth(6).unwrap().parse().unwrap();
        assert!(err <= 1e-5, "{line}");
        assert!(line.ends_with("over 12 values"), "{line}");
    }
    if cfg!(target_os = "linux") {
        assert!(out.contains("plugin libraries mapped: none"), "{out}");
    }
}
