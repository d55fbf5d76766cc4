//! rlx-runtime's own `examples/fft_algo_bench.rs` (the package Cargo.lock
//! resolves, compiled in place by `build.rs`), with the MLX plugin
//! installed for `Device::Mlx` first, in the mode `RLX_SUITE_MODE` names
//! (default lazy; `RLX_TEST_MLX_DIR` for another plugin directory):
//!
//! ```sh
//! RLX_SUITE_MODE=compiled cargo run --release -p rlx-runtime-suite --example fft_algo_bench -- mlx
//! cargo run --release -p rlx-runtime-suite --example fft_algo_bench -- cpu
//! ```
//!
//! It prints, per case (rows, n), the µs of a run of rlx's two FFT
//! algorithms: `native` (one FFT op) and `pocketfft` (rlx-fusion's
//! decomposition into thousands of elementwise, slice and concat nodes,
//! for a backend without pocketfft's row kernel).

include!(concat!(env!("OUT_DIR"), "/fft_algo_bench.rs"));

fn main() {
    rlx_runtime_suite::child::start();
    example::run();
}
