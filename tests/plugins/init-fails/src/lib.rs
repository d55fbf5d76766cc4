//! Its registration returns an error.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
rlx_plugin_api::export_plugin!(FixturePlugin::new(FixtureConfig {
    name: "init-fails",
    fail_init: Some("cannot register lowerings: backend library not initialised"),
    ..Default::default()
}));
