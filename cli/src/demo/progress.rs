//! The line a slow first run prints while it waits: a compiled mode's first
//! run builds MLX's fused kernels with the system C++ compiler (seconds on
//! a cold cache), and a user watching a silent terminal should know why and
//! where the result is kept.

use std::io::Write;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// After this long without the first run back, say what is happening.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// Watches one first run; [`FirstRunWatch::done`] (or dropping it) ends it.
pub struct FirstRunWatch {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<bool>>,
}

impl FirstRunWatch {
    /// Start watching; `what` is the line printed once the first run has
    /// taken over a second, followed by the seconds elapsed every second.
    pub fn start(what: String) -> FirstRunWatch {
        let (tx, rx) = channel::<()>();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            if rx.recv_timeout(QUIET_FOR) != Err(RecvTimeoutError::Timeout) {
                return false;
            }
            let mut err = std::io::stderr();
            let _ = writeln!(err, "{what}");
            loop {
                let _ = write!(err, "\r  ... {:.0} s", t0.elapsed().as_secs_f64());
                let _ = err.flush();
                if rx.recv_timeout(Duration::from_secs(1)) != Err(RecvTimeoutError::Timeout) {
                    let _ = writeln!(err, "\r  ... done in {:.1} s", t0.elapsed().as_secs_f64());
                    return true;
                }
            }
        });
        FirstRunWatch {
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// The first run is back: stop the line (a no-op after the first call).
    /// Returns whether the line was printed.
    pub fn done(&mut self) -> bool {
        drop(self.stop.take());
        self.thread
            .take()
            .is_some_and(|t| t.join().unwrap_or(false))
    }
}

impl Drop for FirstRunWatch {
    fn drop(&mut self) {
        self.done();
    }
}
