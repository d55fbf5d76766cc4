//! Its manifest (and its entry) claim the next ABI major, and it aborts the
//! process the moment it is loaded: a library constructor, run by the
//! dynamic loader before `dlopen` returns. A host that reads the manifest
//! first refuses it without loading it; a test that survives the refusal
//! (or `plugins inspect --static` on it) proves none of its code ran.
use rlx_fixture_core::{FixtureConfig, FixturePlugin};
use rlx_plugin_api::export::EntryOptions;
use rlx_plugin_api::manifest::Manifest;
use rlx_plugin_api::version::{RlxAbiVersion, ABI_VERSION};

const NEXT_MAJOR: RlxAbiVersion = RlxAbiVersion {
    major: ABI_VERSION.major + 1,
    minor: 0,
    patch: 0,
};

rlx_plugin_api::export_plugin!(
    FixturePlugin::new(FixtureConfig {
        name: "manifest-major",
        ..Default::default()
    }),
    EntryOptions {
        abi_version: NEXT_MAJOR,
        ..EntryOptions::default()
    },
    manifest: Manifest::new("manifest-major", "0.0.1")
        .abi_version(NEXT_MAJOR)
        .devices(&["cpu"])
        .ops(&["Input", "Binary"])
);

extern "C" fn abort_on_load() {
    eprintln!("rlx_test_manifest_major was loaded: its constructor aborts the process");
    std::process::abort();
}

#[used]
#[cfg_attr(all(unix, not(target_vendor = "apple")), link_section = ".init_array")]
#[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
static ABORT_ON_LOAD: extern "C" fn() = abort_on_load;
