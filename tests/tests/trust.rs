//! Loading a plugin runs its code: discovery refuses a plugin file, a
//! directory above it or a library it bundles that another user could
//! have written (group- or world-writable, or owned by someone other than
//! this user or root), with the reason and the override; and the override
//! loads it with a warning. Unix only.
#![cfg(unix)]

use rlx_plugin_loader::{
    CandidateState, DiscoveryConfig, LoadError, PluginSet, TrustPolicy, ENV_ALLOW_INSECURE,
};
use rlx_plugin_tests::{capture_logs, only_dir, test_plugin};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh `ROOT/plugins/fixture/librlx_test_fixture.so` (a copy, so each
/// test loads its own file).
fn fixture_tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let plugins = root.path().join("plugins");
    let dir = plugins.join("fixture");
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("librlx_test_fixture.so");
    std::fs::copy(test_plugin("fixture"), &lib).unwrap();
    chmod(&lib, 0o755);
    (root, plugins, lib)
}

fn load(plugins: &Path, trust: TrustPolicy) -> PluginSet {
    PluginSet::load(&DiscoveryConfig {
        trust,
        ..only_dir(plugins)
    })
}

/// The one candidate's refusal for trust, as the user reads it.
fn untrusted(set: &PluginSet) -> String {
    assert_eq!(set.candidates.len(), 1);
    match &set.candidates[0].state {
        CandidateState::Rejected(e @ LoadError::Untrusted { .. }) => e.to_string(),
        _ => panic!(
            "expected a refusal for trust, got {}",
            set.candidates[0].reason()
        ),
    }
}

fn loaded(set: &PluginSet) -> bool {
    set.candidates.len() == 1 && matches!(set.candidates[0].state, CandidateState::Loaded(_))
}

#[test]
fn a_world_writable_plugin_is_refused_and_then_loads_once_fixed() {
    let (_root, plugins, lib) = fixture_tree();
    chmod(&lib, 0o777);
    let why = untrusted(&load(&plugins, TrustPolicy::Strict));
    assert!(
        why.contains(&format!(
            "file {} is writable by every user (mode 0777)",
            lib.canonicalize().unwrap().display()
        )),
        "{why}"
    );
    assert!(why.contains("another user could have written it"), "{why}");
    assert!(
        why.contains(&format!("set {ENV_ALLOW_INSECURE}=1 to load it anyway")),
        "{why}"
    );
    // A refusal is not remembered: fixed, the same file loads.
    chmod(&lib, 0o755);
    assert!(loaded(&load(&plugins, TrustPolicy::Strict)));
}

/// Group-writable: refused for a group others are in, accepted for the
/// user's private group (named like the user, no other members), which
/// is root's `root` group when the tests run as root.
#[test]
fn a_group_writable_plugin_is_refused_unless_the_group_is_private() {
    if !is_root() {
        eprintln!("skipped: giving a file to another group needs root");
        return;
    }
    let (_root, plugins, lib) = fixture_tree();
    chmod(&lib, 0o775);
    std::os::unix::fs::chown(&lib, None, Some(65534)).unwrap();
    let why = untrusted(&load(&plugins, TrustPolicy::Strict));
    assert!(why.contains("is writable by group 65534"), "{why}");
    assert!(
        why.contains("(mode 0775), which is not this user's private group"),
        "{why}"
    );
    let private = std::fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("root:") && l.ends_with(':'));
    if private {
        std::os::unix::fs::chown(&lib, None, Some(0)).unwrap();
        chmod(&lib, 0o775);
        assert!(loaded(&load(&plugins, TrustPolicy::Strict)));
    }
}

#[test]
fn a_writable_directory_above_the_plugin_is_refused_unless_sticky() {
    let (_root, plugins, lib) = fixture_tree();
    let dir = lib.parent().unwrap().to_path_buf();
    chmod(&dir, 0o777);
    let why = untrusted(&load(&plugins, TrustPolicy::Strict));
    assert!(
        why.contains(&format!(
            "directory {} is writable by every user (mode 0777)",
            dir.canonicalize().unwrap().display()
        )),
        "{why}"
    );
    // Sticky, as /tmp is: others cannot replace what is in it.
    chmod(&dir, 0o1777);
    assert!(loaded(&load(&plugins, TrustPolicy::Strict)));
}

#[test]
fn the_override_loads_it_with_a_warning() {
    let logs = capture_logs(log::LevelFilter::Warn);
    let (_root, plugins, lib) = fixture_tree();
    chmod(&lib, 0o666);
    let set = load(&plugins, TrustPolicy::AllowInsecure);
    assert!(loaded(&set), "{}", set.candidates[0].reason());
    let warned = logs().iter().any(|r| {
        r.level == log::Level::Warn
            && r.message
                .contains("although another user could have written it")
            && r.message.contains("mode 0666")
    });
    assert!(warned, "no warning: {:?}", logs());
}

#[test]
fn a_plugin_owned_by_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: giving a file to another user needs root");
        return;
    }
    let (_root, plugins, lib) = fixture_tree();
    std::os::unix::fs::chown(&lib, Some(65534), Some(65534)).unwrap();
    let why = untrusted(&load(&plugins, TrustPolicy::Strict));
    assert!(why.contains("is owned by uid 65534"), "{why}");
    assert!(why.contains("not by uid 0 (this process)"), "{why}");
    // Root's own files are fine.
    std::os::unix::fs::chown(&lib, Some(0), Some(0)).unwrap();
    assert!(loaded(&load(&plugins, TrustPolicy::Strict)));
}

/// The MLX plugin directory, copied: its bundled `libmlx` made writable by
/// everyone is refused by name, although the plugin library itself is fine.
#[test]
fn a_writable_bundled_library_is_refused() {
    let src = rlx_plugin_tests::parity::mlx_plugin_dir();
    let root = tempfile::tempdir().unwrap();
    let dst = root.path().join("mlx");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&dst)
        .status()
        .unwrap();
    assert!(st.success());
    let libmlx = walk_find(&dst, "libmlx.so").expect("the plugin directory bundles libmlx.so");
    chmod(&libmlx, 0o666);
    let set = PluginSet::load_candidates_with(
        vec![rlx_plugin_loader::Candidate {
            path: rlx_plugin_loader::plugin_library(&dst).unwrap(),
            source: rlx_plugin_loader::Source::Explicit,
            exists: true,
        }],
        TrustPolicy::Strict,
    );
    let why = untrusted(&set);
    assert!(
        why.contains(&format!(
            "file {} is writable by every user (mode 0666)",
            libmlx.display()
        )),
        "{why}"
    );
}

fn walk_find(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let ft = std::fs::symlink_metadata(&p).ok()?.file_type();
        if ft.is_file() && p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
        if ft.is_dir() {
            if let Some(f) = walk_find(&p, name) {
                return Some(f);
            }
        }
    }
    None
}
