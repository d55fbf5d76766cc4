//! Command-line interface.

pub mod dist;
pub mod doctor;
mod inspect_static;
pub mod install;
pub mod plugins;

use clap::{Parser, Subcommand};
use rlx_plugin_api::Mode;
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
    /// shows one plugin's descriptor, ops, lowering table and custom ops
    /// (`inspect --static PATH`: its embedded manifest, without loading it);
    /// `check PATH` runs the conformance kit on it; `doctor [PATH]` shows
    /// where the loader finds each library a plugin needs.
    Plugins {
        #[command(subcommand)]
        action: Option<PluginsAction>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a `.rlxmodel` on a backend with seeded random inputs (and
    /// params, unless --params gives them), optionally comparing with
    /// rlx-runtime's CPU backend.
    Run {
        /// The model (`.rlxmodel` text, one graph).
        model: PathBuf,
        /// A loaded plugin's name (e.g. `mlx`), or `cpu` for rlx-runtime's
        /// CPU backend. A plugin runs through `Session::new(Device::Mlx)`.
        #[arg(long)]
        backend: String,
        /// The plugin's execution mode: lazy, eager or compiled.
        #[arg(long, default_value = "lazy")]
        mode: String,
        /// Compare each output with a reference and report its max abs /
        /// max rel error: `cpu` runs rlx-runtime's CPU backend (in a child
        /// process, the same seed and files); a path reads outputs saved
        /// with `--output` (by another run, machine or build).
        #[arg(long, value_name = "cpu|FILE.safetensors")]
        compare: Option<String>,
        /// Seed of the random inputs and params.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Params from a safetensors file (by name; shapes must match).
        #[arg(long, value_name = "FILE.safetensors")]
        params: Option<PathBuf>,
        /// Every input from a safetensors file (by name; dtypes and shapes
        /// must match), or from a `.npy` file for a model with one input;
        /// without it, inputs are seeded random data.
        #[arg(long, value_name = "FILE")]
        inputs: Option<PathBuf>,
        /// Write the outputs, by name in their declared dtypes, to this
        /// safetensors file.
        #[arg(long, value_name = "FILE.safetensors")]
        output: Option<PathBuf>,
        /// Print where each node runs (the plugin, or the CPU backend and
        /// why), the partitions and the bytes crossing between them.
        #[arg(long)]
        explain: bool,
        /// Run on the plugin whole or fail: no node falls back to the CPU
        /// backend, and the first one the plugin does not take is the error.
        #[arg(long)]
        no_fallback: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Internal: write the outputs' f32 values to this file (the
        /// reference child of `--compare`).
        #[arg(long, hide = true, value_name = "FILE")]
        reference_out: Option<PathBuf>,
    },
    /// Discover plugins, then run a decoder transformer on the `mlx`
    /// plugin in every mode and on rlx-runtime's CPU backend: parity,
    /// timing, and which was faster and why.
    Demo {
        /// Timed runs per backend (after compile; the mean is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Seed of the random tokens and weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The plugin to run the model on.
        #[arg(long, default_value = "mlx")]
        backend: String,
        /// Which model: `decoder` (8 layers, d_model 512, 128 tokens) or
        /// `small` (1 layer, d_model 64, 8 tokens: mostly per-op overhead).
        #[arg(long, value_enum, default_value = "decoder")]
        model: crate::demo::DemoModel,
    },
    /// Time a model (a `.rlxmodel` file or a builtin) on rlx-runtime's CPU
    /// backend and on plugins in each mode, each in its own process:
    /// compile, first run, median and min of the timed runs, peak RSS and
    /// max abs error against the CPU backend.
    Bench(crate::bench::BenchArgs),
    /// Generate text with a Llama or Qwen3 checkpoint directory
    /// (mlx-community or Hugging Face layout: config.json, *.safetensors,
    /// tokenizer.json for a text prompt) on a plugin or the CPU backend,
    /// streaming the tokens, then prefill and decode speed, compiles and
    /// peak memory.
    Generate(crate::generate::GenerateArgs),
    /// Write a random-weight checkpoint (Llama or Qwen3; tiny, small or
    /// medium; f32, bf16 or mlx-lm's quantized layout) to try `generate` on.
    Checkpoint(crate::generate::CheckpointArgs),
    /// Be a worker of rlx-runtime's distributed engine on the plugin:
    /// join the group from RANK, WORLD, PEERS and TOPOLOGY, install the
    /// plugin, and serve the coordinator's stages and training jobs until
    /// it ends the session (`docs/DISTRIBUTED.md`).
    Worker(dist::WorkerArgs),
    /// Coordinate workers (RANK=0): a pipeline of model stages, or
    /// data-parallel training (`docs/DISTRIBUTED.md`).
    Dist {
        #[command(subcommand)]
        action: dist::DistAction,
    },
}

#[derive(Subcommand)]
pub enum PluginsAction {
    /// Show everything one plugin registers.
    ///
    /// With --static: only what its embedded manifest says (name, version,
    /// ABI version, device kinds, ops), read from the file without loading
    /// the plugin or running any of its code. Exit status 1 when the
    /// library carries no manifest.
    Inspect {
        /// The plugin library file, or a plugin directory holding one.
        path: PathBuf,
        /// Read the embedded manifest instead of loading the plugin.
        #[arg(long = "static")]
        static_only: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the conformance kit on one plugin: handshake, tables, every
    /// eager lowering entry against the CPU backend, compile/bind/run in
    /// every mode, error codes, statuses and custom ops. Exit status 0
    /// when every check passed or was skipped, 1 when one failed, 2 when
    /// the plugin did not load.
    Check {
        /// The plugin library file, or a plugin directory holding one.
        path: PathBuf,
        /// Print one JSON object (at the end) instead of a line per check.
        #[arg(long)]
        json: bool,
    },
    /// Install a release archive (`rlx-mlx-<version>-<platform>.tar.xz`,
    /// a path or an https:// or file:// URL) into $RLX_HOME/plugins,
    /// verified before anything is written: the signature over the
    /// release's SHA256SUMS (found beside the archive) when a key is
    /// trusted, the archive's hash, every file's hash, the platform and
    /// the library's ABI. The new plugin is loaded once; if it does not
    /// load, the previous version is put back.
    Install {
        /// The archive: a path, file://... or https://...
        archive: String,
        /// A publisher's minisign public key (.pub) to trust for this
        /// install, beside those in $RLX_HOME/trusted-keys/. Repeatable.
        #[arg(long = "key", value_name = "PUBKEY")]
        keys: Vec<PathBuf>,
        /// Where the release's SHA256SUMS is (its signature is that name
        /// plus .minisig); default: beside the archive.
        #[arg(long, value_name = "FILE|URL")]
        sums: Option<String>,
        /// Install without a signature when no key is trusted (the
        /// archive's own manifest is still checked; what is skipped is
        /// printed).
        #[arg(long)]
        allow_unsigned: bool,
        /// Allow a downgrade, and reinstall the installed version.
        #[arg(long)]
        force: bool,
        /// The CUDA directory: where its CUDA runtime is (a Python nvidia
        /// package or a CUDA toolkit), for its mlx-cuda-runtime.sh.
        #[arg(long, value_name = "DIR")]
        cuda_runtime: Option<PathBuf>,
    },
    /// The plugins installed in $RLX_HOME/plugins: version, platform,
    /// source, and how each was verified.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove an installed plugin (and the previous version kept for it).
    Remove { name: String },
    /// Show where the dynamic loader finds each library a plugin needs.
    ///
    /// For each plugin candidate discovery finds (or the one plugin PATH
    /// names): every shared library it needs, where the loader finds it,
    /// and for a missing one every directory it looks in, in its order;
    /// then the load outcome and a loaded plugin's devices. Exit status 0
    /// when every library resolves, 1 when one is missing or unusable, 2
    /// when PATH names no plugin.
    Doctor {
        /// A plugin library file, or a plugin directory holding one;
        /// without it, every candidate discovery finds.
        path: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub type CliResult = Result<(), String>;

pub fn dispatch(cli: Cli) -> CliResult {
    match cli.command {
        Command::Plugins { action: None, json } => plugins::list(cli.plugins, json),
        Command::Plugins {
            action:
                Some(PluginsAction::Inspect {
                    path,
                    static_only: true,
                    json: j,
                }),
            json,
        } => inspect_static::inspect_static(&path, json || j),
        Command::Plugins {
            action: Some(PluginsAction::Inspect { path, json: j, .. }),
            json,
        } => plugins::inspect(&path, json || j),
        Command::Plugins {
            action: Some(PluginsAction::Check { path, json: j }),
            json,
        } => plugins::check(&path, json || j),
        Command::Plugins {
            action: Some(PluginsAction::Doctor { path, json: j }),
            json,
        } => doctor::doctor(path.as_deref(), cli.plugins, json || j),
        Command::Plugins {
            action:
                Some(PluginsAction::Install {
                    archive,
                    keys,
                    sums,
                    allow_unsigned,
                    force,
                    cuda_runtime,
                }),
            ..
        } => install::install_cmd(install::InstallArgs {
            source: archive,
            keys,
            sums,
            allow_unsigned,
            force,
            cuda_runtime,
        }),
        Command::Plugins {
            action: Some(PluginsAction::List { json: j }),
            json,
        } => install::list_cmd(json || j),
        Command::Plugins {
            action: Some(PluginsAction::Remove { name }),
            ..
        } => install::remove_cmd(&name),
        Command::Run {
            model,
            backend,
            mode,
            compare,
            seed,
            params,
            inputs,
            output,
            explain,
            no_fallback,
            json,
            reference_out,
        } => {
            let mode = Mode::from_name(&mode).ok_or_else(|| {
                format!("unknown mode {mode:?} (expected lazy, eager or compiled)")
            })?;
            let opts = crate::run::RunOptions {
                backend,
                mode,
                compare,
                seed,
                params,
                inputs,
                output,
                explain,
                reference_out,
                fallback: if no_fallback {
                    rlx_plugin_host::partition::Fallback::Never
                } else {
                    rlx_plugin_host::partition::Fallback::Cpu
                },
                plugins: cli.plugins,
            };
            let report = crate::run::run_model_file(&model, &opts)?;
            if json {
                println!("{}", report.to_json());
            } else {
                report.print_text(&model);
            }
            // The backend's result is shown above; a comparison asked for
            // and not made is still a failure.
            match (&report.reference_error, &report.compare) {
                (Some(e), Some(c)) => Err(format!("--compare {c}: {e}")),
                _ => Ok(()),
            }
        }
        Command::Demo {
            runs,
            seed,
            backend,
            model,
        } => crate::demo::demo(cli.plugins, &backend, model, runs, seed),
        Command::Bench(args) => crate::bench::run(args, cli.plugins, cli.verbose),
        Command::Generate(args) => {
            let report = crate::generate::run(&args, &cli.plugins)?;
            if args.json {
                println!("{}", report.to_json());
            } else {
                eprintln!("{}", report.summary());
            }
            Ok(())
        }
        Command::Checkpoint(args) => crate::generate::checkpoint(&args),
        Command::Worker(args) => dist::worker(args, cli.plugins),
        Command::Dist { action } => dist::dist(action, cli.plugins),
    }
}

/// A minimal stderr logger: `-v` shows info, `-vv` debug, `-vvv` trace.
pub fn init_logging(verbosity: u8) {
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
