//! Build a stub shared library whose SONAME (`librlx_test_absent_dep.so`)
//! matches no file on disk, and link against it: the resulting plugin's
//! NEEDED entry can never be satisfied at load time.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let src = out.join("stub.c");
    std::fs::write(&src, "int rlx_test_absent_dep_value(void) { return 7; }\n").unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-shared",
            "-fPIC",
            "-Wl,-soname,librlx_test_absent_dep.so",
            "-o",
        ])
        .arg(out.join("librlx_test_stubdep.so"))
        .arg(&src)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "building the stub dependency failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=dylib=rlx_test_stubdep");
    println!("cargo:rerun-if-changed=build.rs");
}
