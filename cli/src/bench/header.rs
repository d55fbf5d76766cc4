//! What a benchmark ran under: the model, the settings, the environment
//! variables the plugin reads and the plugins with their devices.

use super::args::BenchArgs;
use super::builtins::BenchModel;
use super::compare::Tolerance;
use super::environment::EnvSnapshot;
use rlx_plugin_loader::LoadedPlugin;
use serde_json::{json, Value};

/// Always shown (set or not): they decide whether MLX's CUDA matmuls use
/// TF32, which changes both speed and the error against the CPU.
pub const TF32_VARS: [&str; 2] = ["RLX_MLX_TF32", "MLX_ENABLE_TF32"];

/// A plugin as resolved for the benchmark.
#[derive(Clone, Debug)]
pub struct PluginInfo {
    /// The name asked for (`mlx`); `name` may be a GPU variant of it.
    pub requested: String,
    pub name: String,
    pub version: String,
    pub path: String,
    /// The devices its descriptor lists, the default first.
    pub devices: Vec<String>,
    pub build_info: Vec<(String, String)>,
}

impl PluginInfo {
    pub fn new(requested: &str, p: &LoadedPlugin) -> PluginInfo {
        let d = p.descriptor();
        let devices = if d.device_infos.is_empty() {
            d.devices.clone()
        } else {
            d.device_infos.iter().map(|i| i.to_string()).collect()
        };
        PluginInfo {
            requested: requested.into(),
            name: d.name.clone(),
            version: d.version.clone(),
            path: p.path().display().to_string(),
            devices,
            build_info: d.build_info.clone(),
        }
    }
}

pub struct Header {
    pub model: String,
    pub description: String,
    pub nodes: usize,
    pub runs: usize,
    pub warmup: usize,
    pub seed: u64,
    /// (name, value) of [`TF32_VARS`] and of every other `RLX_MLX_*` or
    /// `MLX_*` variable that is set.
    pub env: Vec<(String, Option<String>)>,
    pub plugins: Vec<PluginInfo>,
    pub tolerance: Tolerance,
    /// Hardware threads this process may use.
    pub cpus: Option<usize>,
}

impl Header {
    pub fn new(
        args: &BenchArgs,
        model: &BenchModel,
        env: &EnvSnapshot,
        plugins: Vec<PluginInfo>,
        tolerance: Tolerance,
    ) -> Header {
        Header {
            model: model.name.clone(),
            description: model.description.clone(),
            nodes: model.graph.len(),
            runs: args.runs,
            warmup: args.warmup,
            seed: args.seed,
            env: plugin_env(env),
            plugins,
            tolerance,
            cpus: std::thread::available_parallelism().ok().map(|n| n.get()),
        }
    }

    pub fn print_text(&self) {
        println!("model    {}: {}", self.model, self.description);
        println!(
            "runs     first run, {} warm-up, {} timed; each backend in its own process; seed {}",
            self.warmup, self.runs, self.seed
        );
        if let Some(n) = self.cpus {
            println!("host     {n} hardware threads");
        }
        let env: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("(unset)")))
            .collect();
        println!("env      {}", env.join(" "));
        for p in &self.plugins {
            let via = if p.requested == p.name {
                String::new()
            } else {
                format!(" (for {})", p.requested)
            };
            println!("plugin   {} {}{via} from {}", p.name, p.version, p.path);
            println!("         devices: {}", p.devices.join(", "));
            for (k, v) in &p.build_info {
                println!("         {k} = {v}");
            }
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "model": self.model,
            "description": self.description,
            "nodes": self.nodes,
            "runs": self.runs,
            "warmup": self.warmup,
            "seed": self.seed,
            "cpus": self.cpus,
            "env": self.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "plugins": self.plugins.iter().map(|p| json!({
                "requested": p.requested,
                "name": p.name,
                "version": p.version,
                "path": p.path,
                "devices": p.devices,
                "build_info": p.build_info.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
            "tolerance": {
                "atol": self.tolerance.atol,
                "rtol": self.tolerance.rtol,
                "for": self.tolerance.label,
            },
        })
    }
}

fn plugin_env(env: &EnvSnapshot) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = TF32_VARS
        .iter()
        .map(|k| (k.to_string(), env.get(k)))
        .collect();
    let others = env.matching(|k| {
        (k.starts_with("RLX_MLX_") || k.starts_with("MLX_")) && !TF32_VARS.contains(&k)
    });
    out.extend(others.into_iter().map(|(k, v)| (k, Some(v))));
    out
}
