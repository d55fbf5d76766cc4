//! A host program with the MLX plugin linked in: `rlx-plugin-mlx` is an
//! ordinary (rlib) dependency, and `install_static` registers its
//! `rlx_plugin_entry` through the same tables a loaded plugin's go
//! through. Nothing is discovered and nothing is opened with `dlopen`, as
//! on a platform without one.
//!
//! It runs a small MLP (x[4, 8] · w[8, 16] + b, GELU, · v[16, 3]) through
//! `Session::new(Device::Mlx)` in each mode and prints, per mode, the
//! largest difference from rlx-runtime's CPU backend, then which plugin
//! libraries the process has mapped (on Linux: none is expected).

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::Mode;
use rlx_runtime::{Device, Session};

fn graph() -> Graph {
    let s = |d: &[usize]| Shape::new(d, DType::F32);
    let mut g = Graph::new("static_mlp");
    let x = g.input("x", s(&[4, 8]));
    let w = g.param("w", s(&[8, 16]));
    let b = g.param("b", s(&[16]));
    let v = g.param("v", s(&[16, 3]));
    let h = g.matmul(x, w, s(&[4, 16]));
    let h = g.binary(rlx_ir::op::BinaryOp::Add, h, b, s(&[4, 16]));
    let h = g.gelu(h);
    let y = g.matmul(h, v, s(&[4, 3]));
    g.set_outputs(vec![y]);
    g
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let k = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            (k % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn run(device: Device) -> Vec<f32> {
    let mut exe = Session::new(device).compile(graph());
    exe.set_param("w", &values(8 * 16, 1));
    exe.set_param("b", &values(16, 2));
    exe.set_param("v", &values(16 * 3, 3));
    exe.run(&[("x", &values(4 * 8, 4)[..])]).remove(0)
}

fn main() {
    let opts = rlx_plugin_host::Options::default();
    // SAFETY: rlx_mlx::rlx_plugin_entry is the MLX plugin's entry, linked into this program.
    let plugin =
        unsafe { rlx_plugin_host::install_static(rlx_mlx::rlx_plugin_entry, "mlx", &opts) }
            .unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(1)
            });
    let d = plugin.descriptor();
    println!(
        "plugin {} {} registered from {}",
        d.name,
        d.version,
        plugin.path().display()
    );
    let cpu = run(Device::Cpu);
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let got = rlx_plugin_host::with_mode(mode, || run(Device::Mlx));
        let err = got
            .iter()
            .zip(&cpu)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        println!(
            "{} max abs err vs cpu {err:e} over {} values",
            mode.name(),
            got.len()
        );
    }
    match std::fs::read_to_string("/proc/self/maps") {
        Ok(maps) => {
            let mut libs: Vec<&str> = maps
                .lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .filter(|p| p.contains("librlx_"))
                .collect();
            libs.dedup();
            println!(
                "plugin libraries mapped: {}",
                if libs.is_empty() {
                    "none".to_string()
                } else {
                    libs.join(", ")
                }
            );
        }
        Err(_) => println!("plugin libraries mapped: unknown (no /proc/self/maps)"),
    }
}
