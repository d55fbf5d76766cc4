//! rlx-runtime's own integration tests, run on the MLX plugin.
//!
//! The test binary (`tests/suite.rs`) compiles rlx-runtime's test files
//! that exercise `Device::Mlx` in place, from the package Cargo.lock
//! resolves (`build.rs`). A global constructor runs before libtest's
//! `main` and gives the process one of two roles:
//!
//! - **driver** (what `cargo test` starts): runs the same binary once per
//!   mode in `RLX_SUITE_MODES` (default: lazy, eager, compiled) as a
//!   *child*, forwards its output, reads each test's result and the
//!   plugin's compiles, and prints the report ([`report`]); its exit status
//!   says whether any test failed that is not an expected failure
//!   ([`expected`]), or an expected failure passed.
//! - **child** ([`child`]): installs the MLX plugin for `Device::Mlx` in
//!   one mode, records every compile's placement, and lets libtest run.
//!   A run that lists tests or runs one by name (`--list`, `--exact`: what
//!   cargo-nextest does), or sets `RLX_SUITE_DIRECT=1`, is a child from
//!   the start.

pub mod child;
pub mod driver;
pub mod expected;
pub mod report;

/// Set in a child's environment: the mode it runs in.
pub const ENV_MODE: &str = "RLX_SUITE_MODE";
/// The modes the driver runs, comma-separated.
pub const ENV_MODES: &str = "RLX_SUITE_MODES";
/// Set in a child's environment: the file its compiles are recorded in.
pub const ENV_EVENTS: &str = "RLX_SUITE_EVENTS";
/// `1`: run as a child from the start (the plugin installed, libtest as it is).
pub const ENV_DIRECT: &str = "RLX_SUITE_DIRECT";

/// The rlx-runtime version whose tests these are.
pub const RLX_RUNTIME_VERSION: &str = env!("RLX_RUNTIME_SUITE_VERSION");
/// Where they were compiled from.
pub const RLX_RUNTIME_TESTS: &str = env!("RLX_RUNTIME_SUITE_DIR");

/// The test binary's constructor: become a child or drive children (and
/// then exit with their verdict, before libtest starts).
pub fn start() {
    let args = process_args();
    let direct = std::env::var_os(ENV_MODE).is_some()
        || std::env::var(ENV_DIRECT).is_ok_and(|v| v == "1")
        || args
            .iter()
            .any(|a| matches!(a.as_str(), "--list" | "--exact" | "-h" | "--help"));
    if direct {
        child::start();
        return;
    }
    std::process::exit(driver::run(&args[1..]));
}

/// The process's arguments. Read from `/proc/self/cmdline` where there is
/// one: a constructor may run before the standard library has stored them.
fn process_args() -> Vec<String> {
    if let Ok(raw) = std::fs::read("/proc/self/cmdline") {
        return raw
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
    }
    std::env::args().collect()
}

/// The cargo profile directory the binary was built into (`target/debug`):
/// test binaries live in `<profile>/deps/`.
pub fn profile_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    deps.parent().expect("profile directory").to_path_buf()
}

/// The files compiled, as `build.rs` scanned them: name, `#[test]` count,
/// how many only compile on macOS, and why.
pub fn files() -> Vec<(String, usize, usize, String)> {
    include_str!(concat!(env!("OUT_DIR"), "/files.txt"))
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            Some((
                f.next()?.to_owned(),
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
                f.next().unwrap_or("").to_owned(),
            ))
        })
        .collect()
}
