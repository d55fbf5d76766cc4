//! Training on real data end to end through `Session::new(Device::Mlx)`:
//! an MLP classifier (64 -> 64 ReLU -> 10, softmax cross-entropy) on the
//! 8x8 handwritten digits scikit-learn ships, trained full batch with Adam
//! on rlx-runtime's CPU backend and on the MLX plugin in every mode (Lazy,
//! Eager, Compiled), f32.
//!
//! Data: `tests/data/digits/digits.csv.gz`, scikit-learn's
//! `sklearn/datasets/data/digits.csv.gz` byte for byte (1,797 images, 64
//! pixels 0..16 and the label per CSV row; the UCI "Optical Recognition of
//! Handwritten Digits" test set, E. Alpaydin, C. Kaynak; BSD-3-Clause, see
//! `tests/data/digits/README.md`). A seeded shuffle holds out a fifth (360
//! images); the other 1,437 are the training batch. Pixels are scaled by
//! 1/16 on the host (exact in f32), so both backends see the same inputs.
//!
//! The training graph is rlx-opt's `grad_with_loss` of the forward
//! (outputs `[loss, dw1, db1, dw2, db2]`, fed `d_output = [1.0]`); the Adam
//! update is done here on the host, the same code for both backends, so
//! the trajectories differ only by what the backends compute.
//!
//! Checks:
//! - the CPU's step-0 loss against a plain-Rust f64 forward, relative 1e-5
//!   (f32 sums of 64 products per unit and a mean over 1,437 rows stay far
//!   under it; seen: 4.5e-8), so the reference is checked, not trusted;
//! - the plugin's loss at every step against the CPU's: relative 1e-4 for
//!   the first 10 steps, 1e-3 after, the final one included. The host's
//!   update is identical, but the backends' f32 sums round differently and
//!   Adam's `m / sqrt(v)` carries those differences into the params, so
//!   the trajectories drift apart a little over the run (seen: at most
//!   3.2e-6 relative over steps 0..10, then a step up around step 60-70 to
//!   ~2-3.5e-4, where it stays up to the end: a margin of ~3x under 1e-3).
//!   Relative, not absolute: the final loss is ~0.013, where 1e-3 absolute
//!   would allow an 8% difference;
//! - the loss goes down: final < 0.02 * initial on every backend (seen:
//!   2.377 -> 0.0133, a factor 0.0056);
//! - held-out accuracy >= 95% on the CPU and on the plugin in every mode,
//!   and the plugin's within 1 percentage point (3.6 images) of the CPU's.
//!   The CPU-trained params are evaluated on the CPU, each mode's
//!   plugin-trained params on the plugin in that mode, with a second
//!   forward graph (logits of the 360 held-out images), argmax here.
//!
//! Seen on the MLX CPU device (mlx-cpu 0.32.4), debug build of this crate
//! (dependencies at opt-level 2, as the workspace profile sets), 150 Adam
//! steps at lr 0.01:
//!
//! | backend         | step-0 loss | final loss  | held-out accuracy |
//! |-----------------|-------------|-------------|-------------------|
//! | CPU             | 2.3769917   | 0.013286486 | 97.22% (350/360)  |
//! | MLX Lazy        | 2.3769913   | 0.01329027  | 97.22%            |
//! | MLX Eager       | 2.3769913   | 0.01329027  | 97.22%            |
//! | MLX Compiled    | 2.3769913   | 0.01329027  | 97.22%            |
//!
//! (f64 forward at step 0: 2.37699186.) Run time: ~10 s for the test
//! binary, ~4.4 s of it the CPU run, ~2 s each mode on the plugin.

use rlx_ir::{Graph, NodeId};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_runtime::{Device, Session};

use rlx_host::digits::{self, Part, C, D, TEST, TRAIN};

/// Adam: 150 full-batch steps at lr 0.01 take the CPU to ~97% held-out
/// (seen), well above the 95% asked, at a modest run time.
const STEPS: usize = 150;
const LR: f32 = 0.01;
const BETA1: f32 = 0.9;
const BETA2: f32 = 0.999;
const EPS: f32 = 1e-8;

/// The digits, read and checked by `rlx_host::digits::load`.
fn load_digits() -> (Vec<f32>, Vec<usize>) {
    digits::load(&digits::default_path()).unwrap_or_else(|e| panic!("{e}"))
}

fn split(pixels: &[f32], labels: &[usize]) -> (Part, Part) {
    digits::split(pixels, labels)
}

/// The training forward on the TRAIN batch (`rlx_host::digits`).
fn loss_graph() -> (Graph, Vec<NodeId>) {
    digits::loss_graph(TRAIN)
}

/// Initial params (`rlx_host::digits::init`: He-uniform w1, uniform
/// ±1/sqrt(fan_in) w2, zero biases).
fn init() -> Vec<(&'static str, Vec<f32>)> {
    digits::init()
}

/// Plain f64 forward of the mean cross-entropy, independent of both
/// backends.
fn loss_f64(params: &[(&str, Vec<f32>)], part: &Part) -> f64 {
    let p = |n: &str| -> Vec<f64> {
        let v = &params.iter().find(|(k, _)| *k == n).unwrap().1;
        v.iter().map(|&a| a as f64).collect()
    };
    let (w1, b1, w2, b2) = (p("w1"), p("b1"), p("w2"), p("b2"));
    rlx_plugin_tests::mlp_reference::mean_cross_entropy(&part.x, &part.labels, &w1, &b1, &w2, &b2)
}

/// Adam's moments, one pair per param.
struct Adam {
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    t: i32,
}

impl Adam {
    fn new(params: &[(&str, Vec<f32>)]) -> Adam {
        let zeros: Vec<Vec<f32>> = params.iter().map(|(_, p)| vec![0.0; p.len()]).collect();
        Adam {
            m: zeros.clone(),
            v: zeros,
            t: 0,
        }
    }

    /// One step with bias-corrected moments.
    fn step(&mut self, params: &mut [(&str, Vec<f32>)], grads: &[Vec<f32>]) {
        self.t += 1;
        let c1 = 1.0 - BETA1.powi(self.t);
        let c2 = 1.0 - BETA2.powi(self.t);
        for (((_, p), g), (m, v)) in params
            .iter_mut()
            .zip(grads)
            .zip(self.m.iter_mut().zip(self.v.iter_mut()))
        {
            assert_eq!(p.len(), g.len(), "gradient length");
            for i in 0..p.len() {
                m[i] = BETA1 * m[i] + (1.0 - BETA1) * g[i];
                v[i] = BETA2 * v[i] + (1.0 - BETA2) * g[i] * g[i];
                p[i] -= LR * (m[i] / c1) / ((v[i] / c2).sqrt() + EPS);
            }
        }
    }
}

/// STEPS Adam steps on `device` from `init()`: the loss at every step and
/// the trained params.
fn train(device: Device, graph: &Graph, data: &Part) -> (Vec<f32>, Vec<(&'static str, Vec<f32>)>) {
    let mut compiled = Session::new(device).compile(graph.clone());
    let mut params = init();
    let mut adam = Adam::new(&params);
    let feeds: [(&str, &[f32]); 3] = [
        ("x", &data.x),
        ("labels", &data.labels),
        ("d_output", &[1.0]),
    ];
    let mut losses = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        for (name, v) in &params {
            compiled.set_param(name, v);
        }
        let outs = compiled.run(&feeds);
        assert_eq!(outs.len(), 1 + params.len(), "[{device}] outputs");
        assert_eq!(outs[0].len(), 1, "[{device}] loss is one value");
        let loss = outs[0][0];
        assert!(loss.is_finite(), "[{device}] step {step}: loss {loss}");
        losses.push(loss);
        adam.step(&mut params, &outs[1..]);
    }
    (losses, params)
}

/// Held-out accuracy of `params` on `device` (`rlx_host::digits::accuracy`:
/// argmax of the logits, the first maximum on a tie).
fn accuracy(device: Device, params: &[(&str, Vec<f32>)], held_out: &Part) -> f64 {
    let named: Vec<(String, Vec<f32>)> = params
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    digits::accuracy(device, &named, held_out)
}

/// The final loss must be under this fraction of the initial one (seen:
/// 0.0056; 0.02 leaves a factor 3.5 for another MLX device or library
/// version and still fails a run that stalls or diverges).
const LOSS_DROP: f32 = 0.02;

/// The data file is the whole scikit-learn set, and the split is what the
/// brief says: 1,437 / 360 rows, disjoint, every class on both sides.
#[test]
fn digits_data_loads() {
    let (pixels, labels) = load_digits();
    let mut counts = [0usize; C];
    for &l in &labels {
        counts[l] += 1;
    }
    // scikit-learn's class sizes (load_digits: 178, 182, 177, ...).
    assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
    let (train, held_out) = split(&pixels, &labels);
    assert_eq!((train.len(), held_out.len()), (TRAIN, TEST));
    assert_eq!(train.x.len(), TRAIN * D);
    assert!(train
        .x
        .iter()
        .chain(&held_out.x)
        .all(|v| (0.0..=1.0).contains(v)));
    for c in 0..C {
        let has = |p: &Part| p.labels.iter().any(|l| *l as usize == c);
        assert!(has(&train) && has(&held_out), "class {c} on both sides");
    }
}

#[test]
fn digits_mlp_adam_matches_cpu() {
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let (pixels, labels) = load_digits();
    let (train_set, held_out) = split(&pixels, &labels);
    let (forward, wrt) = loss_graph();
    let graph = rlx_opt::grad_with_loss(&forward, &wrt);
    assert_eq!(graph.outputs.len(), 1 + wrt.len(), "[loss, grads...]");

    let t = std::time::Instant::now();
    let (cpu_losses, cpu_params) = train(Device::Cpu, &graph, &train_set);
    let cpu_acc = accuracy(Device::Cpu, &cpu_params, &held_out);
    eprintln!(
        "[cpu] loss {} -> {}, held-out accuracy {:.2}% ({:.1?})",
        cpu_losses[0],
        cpu_losses[STEPS - 1],
        100.0 * cpu_acc,
        t.elapsed()
    );

    // The reference checked: the CPU's step-0 loss against the f64 forward.
    let l0 = loss_f64(&init(), &train_set);
    assert!(
        ((cpu_losses[0] as f64) - l0).abs() <= 1e-5 * l0,
        "cpu step-0 loss {} vs f64 {l0}",
        cpu_losses[0]
    );
    eprintln!(
        "[cpu] step-0 loss vs f64 {l0}: {:.1e} relative",
        ((cpu_losses[0] as f64) - l0).abs() / l0
    );
    assert!(
        cpu_losses[STEPS - 1] < LOSS_DROP * cpu_losses[0],
        "cpu loss did not drop enough: {} -> {}",
        cpu_losses[0],
        cpu_losses[STEPS - 1]
    );
    assert!(cpu_acc >= 0.95, "cpu held-out accuracy {cpu_acc}");

    for mode in MODES {
        let what = format!("[{}]", mode.name());
        let t = std::time::Instant::now();
        let (losses, params) = with_mode(mode, || train(Device::Mlx, &graph, &train_set));
        let acc = with_mode(mode, || accuracy(Device::Mlx, &params, &held_out));
        assert_eq!(losses.len(), STEPS);
        // The largest relative loss differences, over the first 10 steps
        // and after, for the figures in the doc comment.
        let rel: Vec<f32> = losses
            .iter()
            .zip(&cpu_losses)
            .map(|(a, b)| (a - b).abs() / b.abs())
            .collect();
        let worst = |r: &[f32]| r.iter().cloned().fold(0.0f32, f32::max);
        eprintln!(
            "{what} loss {} -> {}, held-out accuracy {:.2}%, loss vs cpu at most \
             {:.1e} relative in steps 0..10, {:.1e} after ({:.1?})",
            losses[0],
            losses[STEPS - 1],
            100.0 * acc,
            worst(&rel[..10]),
            worst(&rel[10..]),
            t.elapsed()
        );
        for (step, (got, want)) in losses.iter().zip(&cpu_losses).enumerate() {
            // The final step is under the 1e-3 of the later steps too.
            let tol = if step < 10 { 1e-4 } else { 1e-3 };
            assert!(
                (got - want).abs() <= tol * want.abs(),
                "{what} step {step}: loss {got} vs cpu {want}"
            );
        }
        assert!(
            losses[STEPS - 1] < LOSS_DROP * losses[0],
            "{what} loss did not drop enough: {} -> {}",
            losses[0],
            losses[STEPS - 1]
        );
        assert!(acc >= 0.95, "{what} held-out accuracy {acc}");
        assert!(
            (acc - cpu_acc).abs() <= 0.01,
            "{what} held-out accuracy {acc} vs cpu {cpu_acc}"
        );
    }
}
