//! Looks like a build of a newer ABI minor: it claims 1.(current+1) and its
//! root table carries 64 more bytes than this build defines.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
use rlx_plugin_api::export::EntryOptions;
use rlx_plugin_api::version::{RlxAbiVersion, ABI_VERSION};
rlx_plugin_api::export_plugin!(
    FixturePlugin::new(FixtureConfig {
        name: "next-minor",
        ..Default::default()
    }),
    EntryOptions {
        abi_version: RlxAbiVersion {
            minor: ABI_VERSION.minor + 1,
            ..ABI_VERSION
        },
        extra_tail_bytes: 64,
        ..EntryOptions::default()
    }
);
