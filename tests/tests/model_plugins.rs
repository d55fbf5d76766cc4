//! Backend plugins and rlx-runtime's model plugins share `$RLX_HOME/plugins`
//! (docs/ABI.md §15): the model plugin (tests/plugins/model-plugin, made
//! with `rlx_runtime::export_model_plugin!`) directly in it, the MLX plugin
//! directory in a subdirectory (`plugins/mlx/`). Then
//! - backend discovery loads the MLX plugin and skips the model plugin
//!   without running any of its code, logging nothing above debug level;
//! - rlx-runtime's model-plugin loader, in a child process (it loads once
//!   per process) built without and with its `model-plugins` feature, says
//!   nothing about the MLX plugin and maps none of it; with the feature it
//!   registers the model plugin's provider, which answers.
//!
//! The model plugin's constructor writes `<library>.loaded`: the feature
//! build shows that the trace appears when the library is loaded, so its
//! absence after discovery means discovery ran none of it. A backend plugin
//! dropped directly into the directory is the case the placement rule
//! avoids: that loader reports it (the negative control).

#![cfg(target_os = "linux")]

use rlx_plugin_loader::{
    load_plugin, CandidateState, DiscoveryConfig, LoadError, PluginSet, SkipReason,
};
use rlx_plugin_tests::parity::mlx_plugin_dir;
use rlx_plugin_tests::{capture_logs, profile_dir, test_plugin};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MODEL_LIB: &str = "librlx_test_model_plugin.so";
const MLX_LIB: &str = "librlx_mlx.so";

/// A temp `$RLX_HOME`: `plugins/` holds the model plugin and `plugins/mlx/`
/// a copy of the MLX plugin directory.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::copy(test_plugin("model_plugin"), plugins.join(MODEL_LIB)).unwrap();
        copy_tree(&mlx_plugin_dir(), &plugins.join("mlx"));
        Home { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn plugins(&self) -> PathBuf {
        self.path().join("plugins")
    }

    fn model_plugin(&self) -> PathBuf {
        self.plugins().join(MODEL_LIB)
    }

    /// What the model plugin's constructor writes when it is loaded.
    fn marker(&self) -> PathBuf {
        self.plugins().join(format!("{MODEL_LIB}.loaded"))
    }
}

/// Copy a directory tree, keeping symlinks as symlinks.
fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let (s, d) = (e.path(), dst.join(e.file_name()));
        let meta = std::fs::symlink_metadata(&s).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&s).unwrap(), &d).unwrap();
        } else if meta.is_dir() {
            copy_tree(&s, &d);
        } else if !e.file_name().to_string_lossy().starts_with('.') {
            std::fs::copy(&s, &d).unwrap();
        }
    }
}

/// Is `path` mapped into this process (loaded)?
fn mapped(path: &Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .any(|l| l.split_whitespace().nth(5) == Some(&*path.to_string_lossy()))
}

#[test]
fn discovery_loads_the_mlx_plugin_and_skips_the_model_plugin_without_loading_it() {
    let logs = capture_logs(log::LevelFilter::Trace);
    let home = Home::new();
    // A library that is neither kind is still rejected as before.
    std::fs::copy(
        test_plugin("no_entry"),
        home.plugins().join("librlx_test_no_entry.so"),
    )
    .unwrap();
    let set = PluginSet::load(&DiscoveryConfig {
        rlx_home: Some(home.path()),
        ..Default::default()
    });
    let state = |p: &Path| {
        &set.report_for(p)
            .unwrap_or_else(|| panic!("{} was not a candidate", p.display()))
            .state
    };
    assert_eq!(
        set.candidates.len(),
        3,
        "{:?}",
        set.candidates
            .iter()
            .map(|c| c.reason())
            .collect::<Vec<_>>()
    );

    let CandidateState::Loaded(mlx) = state(&home.plugins().join("mlx").join(MLX_LIB)) else {
        panic!(
            "the MLX plugin did not load: {:?}",
            set.candidates
                .iter()
                .map(|c| c.reason())
                .collect::<Vec<_>>()
        );
    };
    assert_eq!(mlx.descriptor().name, "mlx");

    let model = set.report_for(&home.model_plugin()).unwrap();
    assert!(
        matches!(
            model.state,
            CandidateState::Skipped(SkipReason::ModelPlugin)
        ),
        "{}",
        model.reason()
    );
    assert_eq!(model.state.label(), "skipped");
    assert!(model.plugin().is_none());
    assert!(
        model
            .reason()
            .starts_with("skipped: a model plugin for rlx-runtime's model API"),
        "{}",
        model.reason()
    );
    assert!(
        matches!(
            state(&home.plugins().join("librlx_test_no_entry.so")),
            CandidateState::Rejected(LoadError::MissingEntrySymbol)
        ),
        "a library without an entry that is no model plugin is rejected as before"
    );

    // Loading it by name is refused the same way, before dlopen.
    assert_eq!(
        load_plugin(&home.model_plugin()).err(),
        Some(LoadError::ModelPlugin)
    );
    assert!(
        !mapped(&home.model_plugin()),
        "discovery mapped the model plugin"
    );
    assert!(
        !home.marker().exists(),
        "the model plugin's constructor ran: it was loaded"
    );

    // Said at debug level only: nothing a program shows its user.
    let about_model: Vec<_> = logs()
        .into_iter()
        .filter(|r| r.message.contains(MODEL_LIB))
        .collect();
    assert!(
        about_model.iter().all(|r| r.level == log::Level::Debug) && !about_model.is_empty(),
        "{about_model:?}"
    );
}

/// rlx-runtime's model-plugin loader's view of one `$RLX_HOME`: the host
/// program's JSON report and its stderr.
struct LoaderRun {
    report: Value,
    stderr: String,
}

impl LoaderRun {
    fn providers(&self) -> Vec<&str> {
        self.report["providers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect()
    }

    fn mapped(&self) -> Vec<&str> {
        self.report["mapped"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect()
    }
}

/// Run `host` (tests/src/bin/model_host.rs, built one way or the other)
/// with `home` as `$RLX_HOME` and nothing else to load, within a minute.
fn run_loader(host: &Path, home: &Path) -> LoaderRun {
    let mut child = Command::new(host)
        .env("RLX_HOME", home)
        .env("HOME", home)
        .env_remove("RLX_MODEL_PLUGINS")
        .env_remove("RLX_BACKEND_PLUGINS")
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", host.display()));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} ran for over a minute", host.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    assert!(
        status.success(),
        "{}: {status}\n{stdout}\n{stderr}",
        host.display()
    );
    LoaderRun {
        report: serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}")),
        stderr,
    }
}

/// The host program built with rlx-runtime's `model-plugins`
/// (tests/model-host), by cargo in this build's target directory, or in
/// `RLX_TEST_MODEL_HOST_TARGET_DIR` where set (CI builds it there beside
/// the tests: its features differ from the tests' build, so it compiles
/// rlx-runtime and the crates below it once more): only on request, since
/// that feature must not reach the rest of the workspace.
fn loader_with_model_plugins() -> PathBuf {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| {
        let profile = profile_dir();
        let target = std::env::var_os("RLX_TEST_MODEL_HOST_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| profile.parent().unwrap().to_path_buf());
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--locked", "-p", "rlx-test-model-host"])
            .args(["--features", "model-plugins", "--target-dir"])
            .arg(&target);
        match profile.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
            None => panic!("no profile directory above {}", profile.display()),
        }
        let out = cmd.output().expect("run cargo");
        assert!(
            out.status.success(),
            "building tests/model-host failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target
            .join(profile.file_name().unwrap())
            .join("rlx-test-model-host")
    })
    .clone()
}

#[test]
fn without_model_plugins_the_loader_says_nothing_about_the_mlx_plugin() {
    let home = Home::new();
    let run = run_loader(Path::new(env!("CARGO_BIN_EXE_model_host")), &home.path());
    assert_eq!(run.report["model_plugins"], false, "{}", run.report);
    assert!(!run.providers().contains(&"test-echo"), "{}", run.report);
    assert!(run.mapped().is_empty(), "{}", run.report);
    assert!(!home.marker().exists());
    // Such a build refuses every model plugin, and says so: about the
    // model plugin, never about the MLX plugin below it.
    for line in run.stderr.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            line.contains(MODEL_LIB) && !line.contains(MLX_LIB),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn with_model_plugins_the_loader_registers_the_model_plugin_and_leaves_the_mlx_plugin_alone() {
    let host = loader_with_model_plugins();
    let home = Home::new();
    let run = run_loader(&host, &home.path());
    assert_eq!(run.report["model_plugins"], true, "{}", run.report);
    assert!(run.providers().contains(&"test-echo"), "{}", run.report);
    assert_eq!(run.report["echo"], "echo: ping", "{}", run.report);
    assert_eq!(
        run.mapped(),
        vec![home.model_plugin().to_str().unwrap()],
        "the loader mapped something else under $RLX_HOME"
    );
    assert!(
        home.marker().exists(),
        "loading the model plugin ran its constructor"
    );
    assert!(
        !run.stderr.contains("model plugin") && !run.stderr.contains(MLX_LIB),
        "{}",
        run.stderr
    );
}

#[test]
fn a_backend_plugin_directly_in_the_directory_is_reported_by_the_loader() {
    let home = tempfile::tempdir().unwrap();
    let plugins = home.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(mlx_plugin_dir().join(MLX_LIB), plugins.join(MLX_LIB)).unwrap();
    for host in [
        PathBuf::from(env!("CARGO_BIN_EXE_model_host")),
        loader_with_model_plugins(),
    ] {
        let run = run_loader(&host, home.path());
        assert!(
            run.stderr.contains(&format!(
                "rlx: model plugin {}",
                plugins.join(MLX_LIB).display()
            )),
            "{}: {}",
            host.display(),
            run.stderr
        );
    }
}
