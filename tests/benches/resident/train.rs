//! The `train` workload: Adam steps of an MLP through `ResidentTrainer`.

use super::mlp::{batch, initial, mlp};
use super::{measure, Measured, Variant};
use rlx_runtime::train::{AdamSpec, ResidentTrainer};
use std::sync::Arc;

pub fn run(variant: Variant, warmup: usize, steps: usize) -> Measured {
    let device = variant.device();
    let (g, wrt) = mlp();
    let mut t = ResidentTrainer::new(&g, &wrt, &initial(), &AdamSpec::new(1e-3), device)
        .expect("the MLP fuses");
    let (mut x, mut y) = batch();
    let _mapped = match variant {
        Variant::Mlx { mapped: true, .. } => Some([map(&mut x), map(&mut y)]),
        _ => None,
    };
    let resident = t.is_resident();
    let mut last = f32::NAN;
    let m = measure(warmup, steps, resident, || {
        last = t.step(&[("x", &x), ("t", &y)])[0][0];
    });
    assert!(last.is_finite(), "the loss went to {last}");
    m
}

/// The plugin's mapping of `v`'s memory, undone when dropped.
struct Mapped {
    plugin: Arc<rlx_plugin_loader::LoadedPlugin>,
    at: *mut u8,
}

fn map(v: &mut [f32]) -> Mapped {
    let plugin = rlx_plugin_tests::parity::mlx();
    let at = v.as_mut_ptr().cast::<u8>();
    // SAFETY: `v` outlives the mapping (both live until `run` returns, the
    // mapping dropped first) and is not moved or resized meanwhile.
    unsafe { plugin.dma_map_raw(at, std::mem::size_of_val(v)) }.expect("dma_map");
    Mapped { plugin, at }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: no run is in progress; `at` was mapped by `map`.
        unsafe { self.plugin.dma_unmap_raw(self.at) }.expect("dma_unmap");
    }
}
