//! Its constructor panics inside the entry.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
fn make() -> FixturePlugin {
    panic!("fixture constructor failed on purpose");
}
rlx_plugin_api::export_plugin!({
    let _ = FixtureConfig::default();
    make()
});
