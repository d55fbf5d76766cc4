//! Claims the current ABI but was built against a table whose
//! `descriptor` field has another type: its published layout differs.
use abi_stable::StableAbi;
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
use rlx_plugin_api::export::EntryOptions;
use rlx_plugin_api::version::RlxAbiVersion;
use rlx_plugin_api::RlxStr;

/// The root table as a diverged copy of rlx-plugin-api would define it.
#[repr(C)]
#[derive(StableAbi)]
pub struct RlxPluginApi {
    pub struct_size: usize,
    pub abi_version: RlxAbiVersion,
    pub refusal_code: u32,
    pub refusal_message: RlxStr,
    pub rust_layout_tag: RlxStr,
    pub rust_layout: *const std::ffi::c_void,
    pub descriptor: *const u64,
}

rlx_plugin_api::export_plugin!(
    FixturePlugin::new(FixtureConfig {
        name: "layout-mismatch",
        ..Default::default()
    }),
    EntryOptions {
        rust_layout: Some(<RlxPluginApi as StableAbi>::LAYOUT),
        ..EntryOptions::default()
    }
);
