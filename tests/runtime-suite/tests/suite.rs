//! rlx-runtime's own integration tests on the MLX plugin: the files are
//! rlx-runtime's, compiled in place (`build.rs` lists them); this file only
//! includes them and gives the process its role before libtest starts
//! (`rlx_runtime_suite`'s docs).
// The files are rlx-runtime's, linted by its project, not this one.
#![allow(warnings, clippy::all)]

#[ctor::ctor(unsafe)]
fn start() {
    rlx_runtime_suite::start();
}

include!(concat!(env!("OUT_DIR"), "/suite.rs"));
