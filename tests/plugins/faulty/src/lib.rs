//! The fixture with fault injection on: a graph named `fault_*` returns
//! malformed outputs (tests/tests/fault_injection.rs).
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
rlx_plugin_api::export_plugin!(FixturePlugin::new(FixtureConfig {
    name: "faulty",
    faults: true,
    ..Default::default()
}));
