//! The fixture with fault injection on (tests/tests/fault_injection.rs): a
//! graph named `fault_*` returns malformed outputs or faults at one ABI
//! entry (a panic, an error, or a C++ exception thrown through a cxx
//! bridge, as the MLX shim's are), and its custom ops fault in the
//! registry's execute.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};

#[cxx::bridge]
mod ffi {
    unsafe extern "C++" {
        include!("rlx-test-plugin-faulty/cpp/throw.h");
        fn throw_runtime_error(what: &str) -> Result<()>;
    }
}

fn throw_cxx(what: &str) -> Result<(), String> {
    ffi::throw_runtime_error(what).map_err(|e| e.what().to_string())
}

rlx_plugin_api::export_plugin!(FixturePlugin::new(FixtureConfig {
    name: "faulty",
    faults: true,
    throw_cxx: Some(throw_cxx),
    ..Default::default()
}));
