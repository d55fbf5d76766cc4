//! Compiled mode builds its kernels on a background thread on the CPU:
//! runs are lazy until the kernels are ready, then switch to the compiled
//! function. The values across the switch are bit-identical (a run before
//! and after it), and the switch happens. Its own test binary: it points
//! MLX's kernel cache at a fresh directory, so that the kernels are built
//! here, not found from an earlier run.

use rlx_plugin_tests::warmup;

#[test]
fn runs_are_lazy_until_the_kernels_are_built_then_bit_identical() {
    let _cache = warmup::cold_kernel_cache();
    let logs = warmup::runs_switch_bit_identical();
    assert!(
        logs.iter()
            .any(|m| m.contains("kernels built in the background in")),
        "{logs:?}"
    );
}
