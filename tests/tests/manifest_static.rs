//! Embedded manifests (docs/ABI.md §19) read without loading: the MLX
//! plugin's, and discovery refusing a library of another ABI major before
//! `dlopen`.
//!
//! Nothing in this test binary loads a plugin, so a library's absence from
//! the process's mappings shows it was read as a file only; and the
//! `manifest_major` fixture aborts the process from a constructor when it
//! is loaded, so a test that finishes proves it was not.

use rlx_plugin_api::version::{VersionMismatch, ABI_VERSION};
use rlx_plugin_loader::{plugin_library, read_manifest_file, CandidateState, LoadError, PluginSet};
use rlx_plugin_tests::{only_dir, parity::mlx_plugin_dir, plugins_dir, test_plugin};
use std::path::Path;

/// Whether `lib` is mapped into this process (Linux; elsewhere the
/// aborting fixture is the proof).
fn mapped(lib: &Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.contains(&*lib.to_string_lossy())
}

#[test]
fn the_mlx_manifest_gives_name_abi_devices_and_ops_without_loading() {
    let lib = plugin_library(&mlx_plugin_dir()).unwrap();
    let m = read_manifest_file(&lib)
        .unwrap()
        .expect("librlx_mlx carries a manifest");
    assert_eq!(m.name, "mlx");
    assert_eq!(m.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(m.abi_version, ABI_VERSION);
    assert_eq!(m.devices, ["cpu", "gpu"]);
    // What `cargo xtask package` writes into an archive's manifest.json.
    assert_eq!(m.other, [("mlx.version".to_string(), "0.32.4".to_string())]);
    for op in ["Input", "MatMul", "Attention", "Custom"] {
        assert!(
            m.ops.iter().any(|o| o == op),
            "{op} missing from {:?}",
            m.ops
        );
    }
    assert!(!mapped(&lib), "{} was mapped", lib.display());
}

#[test]
fn discovery_refuses_another_major_from_the_manifest_before_dlopen() {
    let dir = plugins_dir(&[(
        &test_plugin("manifest_major"),
        "librlx_test_manifest_major.so",
    )]);
    let set = PluginSet::load(&only_dir(dir.path()));
    assert_eq!(set.candidates.len(), 1);
    let c = &set.candidates[0];
    let CandidateState::Rejected(e @ LoadError::ManifestAbiMismatch(m)) = &c.state else {
        panic!("expected a manifest ABI refusal, got {}", c.reason());
    };
    let VersionMismatch::PluginTooNew { plugin, host } = m else {
        panic!("{m:?}");
    };
    assert_eq!(
        (plugin.major, host.major),
        (ABI_VERSION.major as u64 + 1, ABI_VERSION.major as u64)
    );
    let msg = e.to_string();
    let next = format!("{}.0.0", ABI_VERSION.major + 1);
    assert!(
        msg.contains(&next) && msg.contains(&ABI_VERSION.to_string()),
        "{msg}"
    );
    assert!(msg.contains("not loaded"), "{msg}");
    assert!(!mapped(&c.path));
}

#[test]
fn a_malformed_manifest_is_refused_before_dlopen() {
    let src = test_plugin("manifest_major");
    let mut image = std::fs::read(&src).unwrap();
    let at = image
        .windows(8)
        .position(|w| w == b"RLXMANIF")
        .expect("the fixture's manifest");
    // `name=` becomes `name_`: an entry that is not key=value.
    image[at + 32 + 4] = b'_';
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("librlx_test_bad_manifest.so");
    std::fs::write(&lib, &image).unwrap();
    let set = PluginSet::load(&only_dir(dir.path()));
    let reason = set.candidates[0].reason();
    let CandidateState::Rejected(LoadError::InvalidManifest { detail }) = &set.candidates[0].state
    else {
        panic!("expected InvalidManifest, got {reason}");
    };
    assert!(detail.contains("key=value"), "{detail}");
    assert!(reason.contains("not loaded"), "{reason}");
}

#[test]
fn a_plugin_built_without_a_manifest_has_none() {
    // Optional for plugins: the fixture's build embeds none, and it loads
    // as before (broken_plugins and fixture_plugin load it).
    assert_eq!(read_manifest_file(&test_plugin("fixture")).unwrap(), None);
}

#[test]
fn the_c_plugin_embeds_one_with_the_header_macro() {
    for minor in [0, ABI_VERSION.minor] {
        let lib = Path::new(env!("RLX_C_ARTIFACTS"))
            .join("c-plugins")
            .join(format!("1.{minor}"))
            .join(rlx_plugin_loader::library_file_name("rlx_c_plugin"));
        let m = read_manifest_file(&lib).unwrap().expect("a manifest");
        assert_eq!((m.name.as_str(), m.version.as_str()), ("c-demo", "0.1.0"));
        assert_eq!((m.abi_version.major, m.abi_version.minor), (1, minor));
        assert_eq!(m.devices, ["cpu"]);
        assert_eq!(
            m.ops,
            [
                "Input",
                "Param",
                "Constant",
                "Binary",
                "Activation",
                "MatMul"
            ]
        );
        assert!(!mapped(&lib));
    }
}
