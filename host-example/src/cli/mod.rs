//! Command-line interface.

mod plugins;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "rlx-host",
    version,
    about = "Discover RLX backend plugins and run models on them"
)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Also load this plugin file or directory (searched before
    /// RLX_BACKEND_PLUGINS and the default directories). Repeatable.
    #[arg(long = "plugin", global = true, value_name = "PATH")]
    pub plugins: Vec<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// List every plugin candidate and what became of it; `inspect PATH`
    /// shows one plugin's descriptor, ops, lowering table and custom ops.
    Plugins {
        #[command(subcommand)]
        action: Option<PluginsAction>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum PluginsAction {
    /// Show everything one plugin registers.
    Inspect {
        /// The plugin library file.
        path: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub type CliResult = Result<(), String>;

pub fn dispatch(cli: Cli) -> CliResult {
    match cli.command {
        Command::Plugins { action: None, json } => plugins::list(cli.plugins, json),
        Command::Plugins {
            action: Some(PluginsAction::Inspect { path, json: j }),
            json,
        } => plugins::inspect(&path, json || j),
    }
}
