//! `rlx-host`: an RLX runtime program that discovers backend plugins at
//! startup, lists and inspects them, and runs models on them.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    init_logging(args.verbose);
    if let Err(e) = cli::dispatch(args) {
        // One line naming the cause; details went to the log.
        eprintln!("rlx-host: error: {e}");
        std::process::exit(1);
    }
}

/// A minimal stderr logger: `-v` shows info, `-vv` debug, `-vvv` trace.
fn init_logging(verbosity: u8) {
    struct Stderr;
    impl log::Log for Stderr {
        fn enabled(&self, m: &log::Metadata) -> bool {
            m.level() <= log::max_level()
        }
        fn log(&self, r: &log::Record) {
            if self.enabled(r.metadata()) {
                eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
            }
        }
        fn flush(&self) {}
    }
    static LOGGER: Stderr = Stderr;
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(match verbosity {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
}
