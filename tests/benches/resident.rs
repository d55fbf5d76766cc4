//! What keeping state on the plugin's device is worth, against the same work
//! with the state crossing the ABI every step, and against rlx-runtime's CPU
//! backend, side by side in one invocation, each variant in a process of its
//! own:
//!
//! - `train`: one Adam step of an MLP 256x1024 -> 4096 -> 1024 (ReLU,
//!   mean squared error) through rlx-runtime's `ResidentTrainer`. Resident:
//!   parameters and both moments stay in the executable and only the loss
//!   comes back; host: every parameter and moment crosses in and out.
//! - `decode`: one greedy decode step of a decoder transformer (the demo's
//!   model scaled to d_model 512, 8 layers) with a 1,024-token KV cache,
//!   through rlx-runtime's model API (`.rlxp` with a `generate` entry).
//!   Resident: the caches stay in the executable and each step feeds one
//!   row; host: the whole cache crosses every token.
//! - `forward`: the f32 MLP's forward on the plugin (no CPU variant): its
//!   input bound once as state and its output left on the device, against
//!   both crossing each run; the peer of a framework's resident forward
//!   (`scripts/resident_peers.py`).
//!
//! ```sh
//! cargo bench -p rlx-plugin-tests --bench resident -- train
//! cargo bench -p rlx-plugin-tests --bench resident -- decode
//! ```
//!
//! Options: `--steps N` (timed, default 10), `--warmup N` (default 2),
//! `--variants cpu,mlx:compiled:resident,...` (default: cpu, then every
//! plugin mode resident and host). A plugin variant ending in `:mapped`
//! (`mlx:compiled:resident:mapped`, `train` only) maps the batch's host
//! memory for the plugin's transfers first (`dma_map`), as a program that
//! refills one batch buffer every step would. Each row: the path taken
//! (resident or host, as rlx-runtime reports it), the first step, the
//! median and min of the timed ones, and the median's ratio to the CPU
//! backend's.

use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{register_plugin_backend, set_resident};
use rlx_runtime::Device;
use std::process::Command;
use std::time::Instant;

#[path = "resident/decode.rs"]
mod decode;
#[path = "resident/forward.rs"]
mod forward;
#[path = "resident/mlp.rs"]
mod mlp;
#[path = "resident/train.rs"]
mod train;

/// One variant: the CPU backend, or the plugin in a mode with its state
/// kept on the device or not.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    Cpu,
    Mlx {
        mode: Mode,
        resident: bool,
        /// The batch's memory mapped for transfers (`dma_map`).
        mapped: bool,
    },
}

impl Variant {
    fn label(self) -> String {
        match self {
            Variant::Cpu => "cpu".into(),
            Variant::Mlx {
                mode,
                resident,
                mapped,
            } => format!(
                "mlx:{}:{}{}",
                mode.name(),
                if resident { "resident" } else { "host" },
                if mapped { ":mapped" } else { "" }
            ),
        }
    }

    fn parse(s: &str) -> Result<Variant, String> {
        if s == "cpu" {
            return Ok(Variant::Cpu);
        }
        let parts: Vec<&str> = s.split(':').collect();
        let (mlx, mapped) = match parts.as_slice() {
            [head @ .., "mapped"] => (head, true),
            all => (all, false),
        };
        match mlx {
            ["mlx", m, r] => Ok(Variant::Mlx {
                mode: Mode::from_name(m).ok_or_else(|| format!("unknown mode {m:?}"))?,
                resident: match *r {
                    "resident" => true,
                    "host" => false,
                    other => return Err(format!("{other:?}: expected resident or host")),
                },
                mapped,
            }),
            _ => Err(format!(
                "{s:?}: expected cpu or mlx:MODE:resident|host[:mapped]"
            )),
        }
    }

    /// The device to run on, the plugin registered for it when it is one.
    fn device(self) -> Device {
        match self {
            Variant::Cpu => Device::Cpu,
            Variant::Mlx { mode, resident, .. } => {
                register_plugin_backend(rlx_plugin_tests::parity::mlx(), Device::Mlx, mode);
                set_resident(Device::Mlx, resident);
                Device::Mlx
            }
        }
    }
}

/// What a child measured.
struct Measured {
    resident: bool,
    first_ms: f64,
    steps_ms: Vec<f64>,
}

/// Time `first` then `warmup + steps` calls of `step`.
fn measure(warmup: usize, steps: usize, resident: bool, mut step: impl FnMut()) -> Measured {
    let t = Instant::now();
    step();
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    for _ in 0..warmup {
        step();
    }
    let steps_ms = (0..steps)
        .map(|_| {
            let t = Instant::now();
            step();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    Measured {
        resident,
        first_ms,
        steps_ms,
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let warmup: usize = arg(&args, "--warmup").map_or(2, |v| v.parse().expect("--warmup N"));
    let steps: usize = arg(&args, "--steps").map_or(10, |v| v.parse().expect("--steps N"));
    if let Some(v) = arg(&args, "--child") {
        let workload = arg(&args, "--workload").expect("--workload");
        let variant = Variant::parse(&v).unwrap_or_else(|e| panic!("{e}"));
        let m = match workload.as_str() {
            "train" => train::run(variant, warmup, steps),
            "decode" => decode::run(variant, warmup, steps),
            "forward" => forward::run(variant, warmup, steps),
            w => panic!("unknown workload {w:?}"),
        };
        let list: Vec<String> = m.steps_ms.iter().map(|v| format!("{v:.4}")).collect();
        println!(
            "RESULT {} {} {:.4} {}",
            variant.label(),
            m.resident,
            m.first_ms,
            list.join(",")
        );
        return;
    }
    // `cargo bench` passes `--bench`; the workload is the first other word.
    let workload = args
        .iter()
        .find(|a| !a.starts_with("--") && !a.chars().all(|c| c.is_ascii_digit()))
        .cloned()
        .unwrap_or_else(|| "train".into());
    let variants: Vec<Variant> = match arg(&args, "--variants") {
        Some(list) => list
            .split(',')
            .map(|v| Variant::parse(v).unwrap_or_else(|e| panic!("{e}")))
            .collect(),
        None => std::iter::once(Variant::Cpu)
            .filter(|_| workload != "forward")
            .chain(
                [Mode::Lazy, Mode::Eager, Mode::Compiled]
                    .into_iter()
                    .flat_map(|mode| {
                        [true, false].map(|resident| Variant::Mlx {
                            mode,
                            resident,
                            mapped: false,
                        })
                    }),
            )
            .collect(),
    };
    println!(
        "{workload}: {warmup} warm-up and {steps} timed steps per variant, each in its own process"
    );
    println!(
        "{:<28} {:>9} {:>12} {:>12} {:>12} {:>8}",
        "variant", "path", "first ms", "median ms", "min ms", "vs cpu"
    );
    let mut cpu_median = None;
    for v in variants {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--child", &v.label(), "--workload", &workload])
            .args([
                "--warmup",
                &warmup.to_string(),
                "--steps",
                &steps.to_string(),
            ])
            .output()
            .expect("spawn a child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(line) = stdout.lines().find(|l| l.starts_with("RESULT ")) else {
            println!(
                "{:<28} failed: {}",
                v.label(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no output")
            );
            continue;
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let mut ms: Vec<f64> = f[4].split(',').map(|v| v.parse().unwrap()).collect();
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        if v == Variant::Cpu {
            cpu_median = Some(median);
        }
        println!(
            "{:<28} {:>9} {:>12.2} {:>12.3} {:>12.3} {:>8}",
            f[1],
            if f[2] == "true" { "resident" } else { "host" },
            f[3].parse::<f64>().unwrap(),
            median,
            ms[0],
            cpu_median.map_or("-".into(), |c| format!("{:.2}x", median / c))
        );
    }
}
