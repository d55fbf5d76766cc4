//! Claims the next ABI major.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
use rlx_plugin_api::export::EntryOptions;
use rlx_plugin_api::version::{RlxAbiVersion, ABI_VERSION};
rlx_plugin_api::export_plugin!(
    FixturePlugin::new(FixtureConfig {
        name: "major-new",
        ..Default::default()
    }),
    EntryOptions {
        abi_version: RlxAbiVersion {
            major: ABI_VERSION.major + 1,
            minor: 0,
            patch: 0
        },
        ..EntryOptions::default()
    }
);
