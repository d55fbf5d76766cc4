//! Call sequences on executables and the custom-op registry
//! (`src/sequences.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/load.rs"]
mod load;
#[path = "../src/sequences.rs"]
mod sequences;

fuzz_target!(|data: &[u8]| {
    if let Err(f) = sequences::one_input(load::plugin(), data) {
        eprintln!("finding: {}", f.0);
        std::process::abort();
    }
});
