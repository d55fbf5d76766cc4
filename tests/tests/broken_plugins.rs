//! Purpose-built broken plugins, each in a temp plugins directory beside
//! the working fixture: each is rejected with its exact error (or, for the
//! version-skew cases that must work, loads), and the host goes on to load
//! the fixture.

use rlx_plugin_api::version::{VersionMismatch, ABI_VERSION};
use rlx_plugin_api::{HostTensor, StatusCode};
use rlx_plugin_loader::{CandidateState, LoadError, PluginSet};
use rlx_plugin_tests::{only_dir, plugins_dir, test_plugin};
use std::path::Path;

/// Load a dir holding `broken` (as `file_name`) plus the fixture; check
/// that the fixture loaded and return the broken candidate's state.
fn load_beside_fixture(prepare: impl FnOnce(&Path)) -> CandidateState {
    let dir = plugins_dir(&[(&test_plugin("fixture"), "librlx_test_fixture.so")]);
    prepare(dir.path());
    let set = PluginSet::load(&only_dir(dir.path()));
    assert_eq!(set.candidates.len(), 2, "both files are candidates");
    let fixture = set
        .report_for(&dir.path().join("librlx_test_fixture.so"))
        .expect("fixture candidate");
    assert!(
        matches!(fixture.state, CandidateState::Loaded(_)),
        "the good plugin must still load: {}",
        fixture.reason()
    );
    let p = set.get("fixture").unwrap();
    let out = p
        .execute_custom_op(
            "fixture.scale2",
            &[HostTensor::from_f32(vec![1], &[2.]).unwrap()],
            1,
        )
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), vec![4.]);
    set.candidates
        .into_iter()
        .find(|c| !c.path.ends_with("librlx_test_fixture.so"))
        .unwrap()
        .state
}

fn copy_as<'a>(name: &str, file: &'a str) -> impl FnOnce(&Path) + 'a {
    let src = test_plugin(name);
    move |dir: &Path| {
        std::fs::copy(src, dir.join(file)).unwrap();
    }
}

fn rejected(state: CandidateState) -> LoadError {
    match state {
        CandidateState::Rejected(e) => e,
        CandidateState::Loaded(p) => {
            panic!("expected a rejection, but {} loaded", p.descriptor().name)
        }
        CandidateState::Shadowed { by, .. } => {
            panic!("expected a rejection, got shadowed by {}", by.display())
        }
        CandidateState::Skipped(why) => panic!("expected a rejection, got skipped: {why}"),
    }
}

#[test]
fn a_file_that_is_not_a_library() {
    let e = rejected(load_beside_fixture(|d| {
        std::fs::write(d.join("libnotes.so"), "just some text\n").unwrap()
    }));
    let LoadError::NotALibrary { detail } = &e else {
        panic!("{e:?}")
    };
    assert!(detail.contains("no ELF, Mach-O or PE header"), "{e}");
    assert!(e.to_string().starts_with("not a shared library"), "{e}");
}

#[test]
fn a_truncated_library() {
    let e = rejected(load_beside_fixture(|d| {
        let bytes = std::fs::read(test_plugin("fixture")).unwrap();
        std::fs::write(d.join("libtruncated.so"), &bytes[..4096]).unwrap();
    }));
    assert!(matches!(e, LoadError::InvalidLibrary { .. }), "{e:?}");
    assert!(e.to_string().contains("corrupt or truncated"), "{e}");
}

#[test]
fn a_library_without_the_entry_symbol() {
    let e = rejected(load_beside_fixture(copy_as(
        "no_entry",
        "librlx_test_no_entry.so",
    )));
    assert_eq!(e, LoadError::MissingEntrySymbol);
    assert!(
        e.to_string().contains("does not export `rlx_plugin_entry`"),
        "{e}"
    );
}

#[test]
fn abi_major_too_new() {
    let e = rejected(load_beside_fixture(copy_as(
        "major_new",
        "librlx_test_major_new.so",
    )));
    let LoadError::AbiMismatch(VersionMismatch::PluginTooNew { plugin, host }) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(plugin.major, ABI_VERSION.major as u64 + 1);
    assert_eq!(*host, ABI_VERSION.to_semver());
    let msg = e.to_string();
    assert!(
        msg.contains(&plugin.to_string()) && msg.contains(&host.to_string()),
        "{msg}"
    );
    assert!(msg.contains("upgrade the host"), "{msg}");
}

#[test]
fn abi_major_too_old() {
    let e = rejected(load_beside_fixture(copy_as(
        "major_old",
        "librlx_test_major_old.so",
    )));
    let LoadError::AbiMismatch(VersionMismatch::PluginTooOld { plugin, host }) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(plugin.to_string(), format!("{}.4.0", ABI_VERSION.major - 1));
    assert_eq!(*host, ABI_VERSION.to_semver());
    assert!(e.to_string().contains("upgrade the plugin"), "{e}");
}

#[test]
fn a_newer_minor_with_a_larger_table_loads() {
    let state = load_beside_fixture(copy_as("next_minor", "librlx_test_next_minor.so"));
    let CandidateState::Loaded(p) = state else {
        panic!("next-minor must load")
    };
    assert_eq!(p.abi_version().minor, ABI_VERSION.minor + 1);
    assert_eq!(p.descriptor().name, "next-minor");
    assert!(p.has_custom_ops());
    assert_eq!(p.supported_ops().len(), 6);
}

#[test]
fn an_older_minor_with_a_smaller_table_loads_without_the_newer_fields() {
    let state = load_beside_fixture(copy_as("prev_minor", "librlx_test_prev_minor.so"));
    let CandidateState::Loaded(p) = state else {
        panic!("prev-minor must load")
    };
    assert_eq!(p.abi_version().minor, 0);
    // Its `custom_ops` slot (beyond its struct_size) holds a poison address;
    // the host must treat the field as absent, not read it.
    assert!(!p.has_custom_ops());
    let e = p.list_custom_ops().unwrap_err();
    assert_eq!(e.code, StatusCode::Unsupported);
    assert!(e.message.contains("added in ABI 1.1"), "{e}");
    // Everything 1.0 defines works.
    assert!(p.lowering_table().iter().any(|l| l.op_kind == "MatMul"));
}

#[test]
fn an_entry_that_returns_null() {
    let e = rejected(load_beside_fixture(copy_as(
        "null_entry",
        "librlx_test_null_entry.so",
    )));
    assert_eq!(e, LoadError::EntryReturnedNull);
}

#[test]
fn an_entry_that_panics() {
    let e = rejected(load_beside_fixture(copy_as(
        "entry_panics",
        "librlx_test_entry_panics.so",
    )));
    let LoadError::EntryPanicked { message } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        message,
        "plugin entry panicked: fixture constructor failed on purpose"
    );
}

#[test]
fn a_registration_that_returns_an_error() {
    let e = rejected(load_beside_fixture(copy_as(
        "init_fails",
        "librlx_test_init_fails.so",
    )));
    let LoadError::RegistrationFailed(err) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(err.code, StatusCode::Internal);
    assert_eq!(
        err.message,
        "plugin registration failed: cannot register lowerings: backend library not initialised"
    );
}

#[test]
fn a_library_whose_dependency_is_missing() {
    let e = rejected(load_beside_fixture(copy_as(
        "missing_dep",
        "librlx_test_missing_dep.so",
    )));
    let LoadError::MissingDependency { library, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(library, "librlx_test_absent_dep.so");
    assert!(
        e.to_string()
            .contains("a library it depends on is missing: librlx_test_absent_dep.so"),
        "{e}"
    );
}

#[test]
fn a_layout_mismatch() {
    let e = rejected(load_beside_fixture(copy_as(
        "layout_mismatch",
        "librlx_test_layout_mismatch.so",
    )));
    let LoadError::LayoutMismatch { detail } = &e else {
        panic!("{e:?}")
    };
    assert!(!detail.is_empty());
    assert!(e.to_string().contains("rebuild the plugin"), "{e}");
}

#[test]
fn two_plugins_with_the_same_name() {
    // Discovery order is file-name order inside one directory:
    // librlx_test_fixture.so comes before librlx_test_twin.so.
    let state = load_beside_fixture(copy_as("twin", "librlx_test_twin.so"));
    let CandidateState::Shadowed { plugin, by } = state else {
        panic!("the twin must be shadowed")
    };
    assert_eq!(plugin.descriptor().name, "fixture");
    assert_eq!(plugin.descriptor().version, "0.2.0");
    assert!(by.ends_with("librlx_test_fixture.so"), "{}", by.display());
}

#[test]
fn explicit_paths_come_first_and_missing_ones_are_reported() {
    let dir = plugins_dir(&[
        (&test_plugin("fixture"), "librlx_test_fixture.so"),
        (&test_plugin("twin"), "librlx_test_twin.so"),
    ]);
    let missing = dir.path().join("nope/libmissing.so");
    let cfg = rlx_plugin_loader::DiscoveryConfig {
        explicit: vec![dir.path().join("librlx_test_twin.so"), missing.clone()],
        ..only_dir(dir.path())
    };
    let set = PluginSet::load(&cfg);
    // twin (explicit) wins over fixture (env dir); the missing path is reported.
    assert_eq!(set.get("fixture").unwrap().descriptor().version, "0.2.0");
    let states: Vec<String> = set.candidates.iter().map(|c| c.reason()).collect();
    assert_eq!(set.candidates.len(), 3, "{states:?}");
    assert_eq!(states[1], "rejected: no such file");
    assert!(states[2].starts_with("shadowed by"), "{states:?}");
}
