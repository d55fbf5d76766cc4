//! `rlx-host bench MODEL`: time a model on rlx-runtime's CPU backend and
//! on plugins in each of their modes, side by side.
//!
//! The parent process checks the request, then re-runs this executable
//! once per backend (`bench --child SPEC`, hidden) so every figure is
//! cold and the backend's own: compile time, first run, the median and
//! minimum of the timed runs, and peak RSS. Each child also hands back its
//! outputs, and the parent reports every plugin row's max abs error
//! against the CPU row: a fast wrong answer is a mismatch. `--peers` adds
//! the same builtin graph timed in Python by `scripts/bench_peers.py`.
//!
//! One job per file:
//! - [`args`]: the command line;
//! - [`builtins`]: the builtin models and resolving MODEL;
//! - [`spec`]: parsing `--backends`;
//! - [`child`]: measuring one backend in this process;
//! - [`spawn`]: running a child and reading its row;
//! - [`row`]: a row and its JSON line;
//! - [`outputs`]: a child's outputs file;
//! - [`compare`]: errors against the CPU row and ratios;
//! - [`environment`]: the user's environment, passed to every child;
//! - [`peers`]: the Python peers;
//! - [`lm`]: checkpoint directories: generation against mlx-lm;
//! - [`header`], [`report`]: printing;
//! - [`stats`], [`rss`]: median/min and peak RSS.

pub mod args;
pub mod builtins;
pub mod child;
pub mod compare;
pub mod environment;
pub mod header;
pub mod lm;
pub mod outputs;
pub mod parent;
pub mod peers;
pub mod report;
pub mod row;
pub mod rss;
pub mod spawn;
pub mod spec;
pub mod stats;

pub use args::BenchArgs;

/// `rlx-host bench`: the parent, or with `--child` one measurement.
pub fn run(args: BenchArgs, plugins: Vec<std::path::PathBuf>, verbose: u8) -> Result<(), String> {
    match (&args.child, lm::is_checkpoint(&args.model)) {
        (Some(spec), true) => lm::child(&args, spec, plugins),
        (None, true) => lm::parent(&args, plugins, verbose),
        (Some(spec), false) => child::main(&args, spec, plugins),
        (None, false) => parent::main(&args, plugins, verbose),
    }
}
