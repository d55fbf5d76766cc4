//! `rlx-host`: an RLX runtime program that discovers backend plugins at
//! startup, lists and inspects them, and runs models on them.

use clap::Parser;
use rlx_host::cli;

fn main() {
    // First, while this is the only thread: it may set TMPDIR.
    rlx_plugin_host::kernel_cache::use_stable_cache();
    rlx_plugin_host::malloc_policy::keep_run_buffers();
    let args = cli::Cli::parse();
    cli::init_logging(args.verbose);
    if let Err(e) = cli::dispatch(args) {
        // One line naming the cause; details went to the log.
        eprintln!("rlx-host: error: {}", e.replace('\n', " "));
        std::process::exit(1);
    }
}
