//! Compiles the C++ the `cxx` faults throw from (cpp/throw.cc).
fn main() {
    cxx_build::bridge("src/lib.rs")
        .file("cpp/throw.cc")
        .std("c++17")
        .compile("rlx_test_faulty_cxx");
    println!("cargo:rerun-if-changed=cpp/throw.cc");
    println!("cargo:rerun-if-changed=cpp/throw.h");
}
