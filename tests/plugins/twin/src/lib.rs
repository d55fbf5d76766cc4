//! A second plugin named "fixture", to be shadowed by the first.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
rlx_plugin_api::export_plugin!(FixturePlugin::new(FixtureConfig {
    version: "0.2.0",
    ..Default::default()
}));
