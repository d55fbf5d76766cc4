//! Links against a library that is not installed anywhere: its NEEDED
//! entry names `librlx_test_absent_dep.so` (see build.rs).
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
extern "C" {
    fn rlx_test_absent_dep_value() -> i32;
}
/// Keeps the dependency referenced so the linker records it.
#[no_mangle]
pub extern "C" fn rlx_test_uses_dep() -> i32 {
    unsafe { rlx_test_absent_dep_value() }
}
rlx_plugin_api::export_plugin!(FixturePlugin::new(FixtureConfig {
    name: "missing-dep",
    ..Default::default()
}));
