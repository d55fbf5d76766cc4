//! Release archives (`.tar.xz`, format 1) into the installer's verified
//! unpacking (`rlx_plugin_package::unpack_verified_bytes`). A finding is a
//! panic, a refused archive that leaves anything at the destination, or an
//! accepted one whose unpacked tree differs from its manifest.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rlx_plugin_package::{unpack_verified_bytes, verify_tree, Limits};

fuzz_target!(|data: &[u8]| {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dest = tmp.path().join("dest");
    // Small bounds: the fuzzer should find the limits, not fill the disk.
    let limits = Limits {
        max_total_bytes: 1 << 20,
        max_entries: 256,
    };
    match unpack_verified_bytes(data, &dest, &limits) {
        Ok(manifest) => {
            if let Err(e) = verify_tree(&dest, &manifest) {
                panic!("accepted, but the unpacked tree differs from its manifest: {e}");
            }
        }
        Err(_) => assert!(
            std::fs::symlink_metadata(&dest).is_err(),
            "refused, but {} was left behind",
            dest.display()
        ),
    }
});
