//! Builds the C side of the test suite with the system C compiler, against
//! `plugin-api/include/rlx_plugin.h` alone:
//! - `c/layout.c`: the header's sizes and offsets, linked into the tests
//!   (`tests/c_layout.rs` compares them with the Rust definitions);
//! - `plugins/c-plugin/c_plugin.c`: a plugin in plain C, built once per ABI
//!   minor it claims (`-DRLX_C_PLUGIN_MINOR=N`), as
//!   `$OUT_DIR/c-plugins/1.N/librlx_c_plugin.so`, and once more with
//!   `-DRLX_C_PLUGIN_FAULTS` as "c-faulty",
//!   `$OUT_DIR/c-plugins/faulty/librlx_c_faulty.so`;
//! - `hosts/c-host/c_host.c`: a host in plain C, `$OUT_DIR/rlx-c-host`.
//!
//! The tests find the artefacts through `env!("RLX_C_ARTIFACTS")`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The ABI minors the skew matrix covers (1.0 ..= 1.13).
const MINORS: [u32; 14] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let include = root.join("../plugin-api/include");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for p in [
        "c",
        "plugins/c-plugin",
        "hosts/c-host",
        "../plugin-api/include",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rustc-env=RLX_C_ARTIFACTS={}", out.display());

    cc::Build::new()
        .file(root.join("c/layout.c"))
        .include(&include)
        .std("c11")
        .warnings_into_errors(true)
        .compile("rlx_c_layout");

    let compiler = cc::Build::new().get_compiler();
    let plugin_src = root.join("plugins/c-plugin/c_plugin.c");
    if plugin_src.exists() {
        let build = |dir: &str, stem: &str, defines: &[String]| {
            let dir = out.join("c-plugins").join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            let lib = dir.join(library_file_name(stem));
            let mut cmd = compiler.to_command();
            cmd.args(["-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Werror"])
                .args(defines)
                .arg("-DRLX_BUILDING_PLUGIN")
                .arg("-fvisibility=hidden")
                .arg("-I")
                .arg(&include)
                .arg(&plugin_src)
                .arg("-o")
                .arg(&lib)
                .arg("-lm");
            run(cmd, &lib);
        };
        for minor in MINORS {
            build(
                &format!("1.{minor}"),
                "rlx_c_plugin",
                &[format!("-DRLX_C_PLUGIN_MINOR={minor}")],
            );
        }
        // "c-faulty": the newest minor with RLX_C_PLUGIN_FAULTS.
        build(
            "faulty",
            "rlx_c_faulty",
            &[
                format!("-DRLX_C_PLUGIN_MINOR={}", MINORS[MINORS.len() - 1]),
                "-DRLX_C_PLUGIN_FAULTS".into(),
            ],
        );
    }
    let host_src = root.join("hosts/c-host/c_host.c");
    if host_src.exists() {
        let exe = out.join("rlx-c-host");
        let mut cmd = compiler.to_command();
        cmd.args(["-std=c11", "-O1", "-Wall", "-Werror"])
            .arg("-I")
            .arg(&include)
            .arg(&host_src)
            .arg("-o")
            .arg(&exe)
            .arg("-ldl");
        run(cmd, &exe);
    }
}

fn library_file_name(stem: &str) -> String {
    if cfg!(target_os = "macos") {
        format!("lib{stem}.dylib")
    } else {
        format!("lib{stem}.so")
    }
}

fn run(mut cmd: Command, what: &Path) {
    let st = cmd.status().expect("run the C compiler");
    assert!(st.success(), "building {} failed: {cmd:?}", what.display());
}
