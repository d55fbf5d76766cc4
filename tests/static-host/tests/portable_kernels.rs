//! The plugin's CPU kernels have an x86 path (AVX2 + FMA, AVX-512), an
//! arm64 path (NEON, which gives the portable loop's bits:
//! `scripts/qemu-aarch64-check.sh` compares them under qemu) and a
//! portable loop. `set_portable_kernels(true)` (`RLX_MLX_PORTABLE_KERNELS=1`) makes
//! this x86 CPU take the portable loops, so both are compared here, on
//! graphs that reach every kernel and every branch of its loops: products
//! of 1 to 9 rows (the skinny kernels, per row count, and the blocked one
//! from 4), with K and N off every vector width (tails), the right operand
//! transposed (the dot kernel); the unary kernels (erf GELU, exp, sigmoid,
//! SiLU) on lengths 1, 7, 8, 9, 17 and 1,000; row kernels (softmax, layer
//! and RMS norm) on odd widths; elementwise arithmetic with unit and zero
//! strides (broadcasts, the inline evaluator's rows); Fma, whole,
//! broadcast, by rows and transposed; the tanh scan; and
//! the builtin models (attention, rope, SwiGLU, an LSTM). Products, row
//! kernels, arithmetic and Fma (one rounding either way) agree bit for bit; the polynomial kernels within
//! 16 ulps (their vector bodies fuse multiply-adds the portable loops round
//! twice, as rlx-cpu's two arms do), and whole models within 1e-6 of the
//! output's magnitude ([`Agree`]).
//!
//! The plugin is linked in and the switch is process-wide: one test, in a
//! binary of its own.

mod kernel_graphs;

use kernel_graphs::{cases, Agree};
use rlx_host::run::{execute, random_data};
use rlx_ir::Graph;
use rlx_mlx_shim::kernels::{kernels_vectorized, set_portable_kernels};
use rlx_plugin_api::Mode;
use rlx_runtime::Device;

/// Outputs of two runs of `graph` on the plugin in `mode`.
fn outputs(graph: &Graph, mode: Mode) -> Vec<Vec<f32>> {
    let data = random_data(graph, 5).unwrap();
    rlx_plugin_host::with_mode(mode, || execute(Device::Mlx, graph, &data, 2))
        .unwrap()
        .outputs
}

fn agree(a: &[f32], b: &[f32], how: Agree) -> Result<(), String> {
    let amax = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = match how {
            Agree::Exact => x.to_bits() == y.to_bits(),
            Agree::Ulps(n) => {
                x.is_finite() == y.is_finite()
                    && (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs() <= n as u64
                    && x.is_sign_negative() == y.is_sign_negative()
                    || x == y
            }
            Agree::Scaled(f) => (x - y).abs() <= f * amax,
        };
        if !ok {
            return Err(format!("[{k}]: x86 {x} portable {y} ({how:?})"));
        }
    }
    Ok(())
}

#[test]
fn the_portable_loops_match_the_x86_kernels() {
    let opts = rlx_plugin_host::Options::default();
    // SAFETY: rlx_mlx::rlx_plugin_entry is the MLX plugin's entry, linked
    // into this test.
    unsafe { rlx_plugin_host::install_static(rlx_mlx::rlx_plugin_entry, "mlx", &opts) }.unwrap();
    set_portable_kernels(false);
    if !kernels_vectorized() {
        eprintln!("skipped: this CPU has no AVX2 + FMA, so only the portable loops exist here");
        return;
    }
    let cases = cases();
    for (graph, how) in &cases {
        for mode in [Mode::Lazy, Mode::Eager] {
            set_portable_kernels(false);
            assert!(kernels_vectorized());
            let vector = outputs(graph, mode);
            set_portable_kernels(true);
            assert!(!kernels_vectorized());
            let portable = outputs(graph, mode);
            set_portable_kernels(false);
            assert_eq!(vector.len(), portable.len());
            for (i, (a, b)) in vector.iter().zip(&portable).enumerate() {
                assert_eq!(a.len(), b.len(), "{} {mode:?} output {i}", graph.name);
                if let Err(e) = agree(a, b, *how) {
                    panic!("{} {mode:?} output {i}{e}", graph.name);
                }
                assert!(
                    a.iter().any(|v| *v != 0.0),
                    "{} output {i}: all zeros",
                    graph.name
                );
            }
        }
    }
}
