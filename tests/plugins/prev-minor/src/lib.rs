//! Looks like a build of ABI 1.0: its root table ends before the 1.1
//! `custom_ops` field. That field holds a poison address: a host that read
//! past `struct_size` would crash.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
use rlx_plugin_api::export::EntryOptions;
use rlx_plugin_api::tables::plugin_api_min_size;
use rlx_plugin_api::version::{RlxAbiVersion, ABI_VERSION};
rlx_plugin_api::export_plugin!(
    FixturePlugin::new(FixtureConfig {
        name: "prev-minor",
        ..Default::default()
    }),
    EntryOptions {
        abi_version: RlxAbiVersion {
            minor: 0,
            ..ABI_VERSION
        },
        struct_size: Some(plugin_api_min_size(0)),
        custom_ops_override: Some(0x10),
        ..EntryOptions::default()
    }
);
