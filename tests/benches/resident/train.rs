//! The `train` workload: Adam steps of an MLP through `ResidentTrainer`.

use super::mlp::{batch, initial, mlp};
use super::{measure, Measured, Variant};
use rlx_runtime::train::{AdamSpec, ResidentTrainer};

pub fn run(variant: Variant, warmup: usize, steps: usize) -> Measured {
    let device = variant.device();
    let (g, wrt) = mlp();
    let mut t = ResidentTrainer::new(&g, &wrt, &initial(), &AdamSpec::new(1e-3), device)
        .expect("the MLP fuses");
    let (x, y) = batch();
    let resident = t.is_resident();
    let mut last = f32::NAN;
    let m = measure(warmup, steps, resident, || {
        last = t.step(&[("x", &x), ("t", &y)])[0][0];
    });
    assert!(last.is_finite(), "the loss went to {last}");
    m
}
