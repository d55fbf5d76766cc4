//! `RLX_MLX_TRACE_RUNS=1`: every run prints, on stderr, how long each of
//! its phases took, in microseconds:
//!
//! ```text
//! rlx-mlx run gpu:0 compiled: device 0.4 inputs 9.8 build 2.1 eval 21.0 finish 0.2 outputs 8.3 total 41.8 us
//! ```
//!
//! The mode is followed by `-inline` when the run's graph was evaluated on
//! the calling thread (every op one the plugin runs itself on the CPU)
//! rather than through MLX's scheduler.
//!
//! - `device`: this thread's device set (and, on a GPU, the process's GPU
//!   turn taken);
//! - `inputs`: the inputs checked and written into MLX arrays;
//! - `build`: the MLX graph built (lazy, eager: every node evaluated here)
//!   or the compiled function called;
//! - `eval`: MLX's evaluation, until every output is ready;
//! - `finish`: the run's custom-op failures checked, its state writes kept;
//! - `outputs`: the outputs handed over (copied out, or lent on the CPU).
//!
//! A submitted run (`submit`, then `wait`) prints two lines: its submission
//! (`device`, `inputs`, `build`, `submit`: MLX's work handed to its stream,
//! `finish`) tagged `submit`, and its wait (`device`, `eval`, `outputs`) tagged
//! `wait`.
//!
//! Read once per process. Off, a run pays one flag test per phase.

use std::time::Instant;

fn on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("RLX_MLX_TRACE_RUNS").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// The phases of one run, timed while tracing is on.
pub struct RunTrace {
    // None while tracing is off: nothing is timed or kept.
    t: Option<Timed>,
}

/// When the run started, when its last phase ended, and each phase's
/// name and microseconds.
type Timed = (Instant, Instant, Vec<(&'static str, f64)>);

impl RunTrace {
    pub fn start() -> RunTrace {
        RunTrace::with(on())
    }

    fn with(on: bool) -> RunTrace {
        RunTrace {
            t: on.then(|| {
                let now = Instant::now();
                (now, now, Vec::with_capacity(8))
            }),
        }
    }

    /// The phase `name` ended now.
    pub fn mark(&mut self, name: &'static str) {
        if let Some((_, last, parts)) = &mut self.t {
            let now = Instant::now();
            parts.push((name, (now - *last).as_secs_f64() * 1e6));
            *last = now;
        }
    }

    /// Print the run's line (when tracing is on); `what` names the device
    /// and mode.
    pub fn finish(self, what: impl FnOnce() -> String) {
        if let Some(line) = self.line(what) {
            eprintln!("{line}");
        }
    }

    fn line(self, what: impl FnOnce() -> String) -> Option<String> {
        let (start, _, parts) = self.t?;
        let total = start.elapsed().as_secs_f64() * 1e6;
        let mut line = format!("rlx-mlx run {}:", what());
        for (name, us) in parts {
            line.push_str(&format!(" {name} {us:.1}"));
        }
        line.push_str(&format!(" total {total:.1} us"));
        Some(line)
    }
}
