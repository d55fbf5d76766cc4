//! The MLX plugin's manifest (read from the file) says what the loaded
//! plugin says: its op list is taken from the lowering table's source at
//! build time (plugin-mlx/build/ops.rs), so this is what keeps the two the
//! same.

use rlx_plugin_api::DeviceKind;
use rlx_plugin_loader::read_manifest_file;
use rlx_plugin_tests::parity::mlx;
use std::collections::BTreeSet;

#[test]
fn the_manifest_matches_the_loaded_plugin() {
    let p = mlx();
    let m = read_manifest_file(p.path()).unwrap().expect("a manifest");
    assert_eq!(m.abi_version, p.abi_version());
    let d = p.descriptor();
    // `mlx`, or `mlx-cuda` for the CUDA directory's copy.
    assert!(d.name.starts_with(&m.name), "{} vs {}", d.name, m.name);
    assert_eq!(m.version, d.version);
    for info in &d.device_infos {
        let kind = match info.kind {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Cpu => "cpu",
        };
        assert!(
            m.devices.iter().any(|k| k == kind),
            "{kind} not in {:?}",
            m.devices
        );
    }
    let listed: BTreeSet<&str> = m.ops.iter().map(String::as_str).collect();
    let lowering = p.lowering_table();
    let table: BTreeSet<&str> = lowering.iter().map(|l| l.op_kind.as_str()).collect();
    assert_eq!(
        listed, table,
        "the manifest's ops (left) differ from the lowering table's (right)"
    );
}
