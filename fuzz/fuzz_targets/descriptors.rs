//! Tensor descriptors into `executable_bind_param` and `executable_run`
//! through the raw C table (`src/descriptors.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/descriptors.rs"]
mod descriptors;
#[path = "../src/load.rs"]
mod load;

fuzz_target!(|data: &[u8]| {
    if let Err(f) = descriptors::one_input(load::plugin(), data) {
        eprintln!("finding: {}", f.0);
        std::process::abort();
    }
});
