//! Check 8, devices, for a plugin whose minor is at least 4: the descriptor
//! lists the devices the plugin runs on, each one compiles and says it runs
//! there, and a device the plugin lacks is refused with UNSUPPORTED.

use super::{Kit, Outcome};
use rlx_plugin_api::{CompileOptions, DeviceKind, StatusCode};

pub(super) fn run(kit: &mut Kit) {
    if kit.plugin.abi_version().minor < 4 {
        let why = "devices are ABI 1.4; the plugin claims an older minor";
        for name in [
            "devices: listed",
            "devices: each compiles there",
            "devices: absent one refused",
        ] {
            kit.skip(name, why);
        }
        return;
    }
    kit.record("devices: listed", |p| {
        let d = &p.descriptor().device_infos;
        let mut labels: Vec<String> = d.iter().map(|d| d.label()).collect();
        labels.sort();
        labels.dedup();
        if d.is_empty() {
            Outcome::Fail("a 1.4 descriptor lists no device".into())
        } else if labels.len() != d.len() {
            Outcome::Fail(format!("a device is listed twice: {d:?}"))
        } else {
            Outcome::Ok
        }
    });
    let base = match super::exec::base(&kit.plugin) {
        Ok(b) => b,
        Err(why) => {
            kit.skip("devices: each compiles there", why.clone());
            kit.skip("devices: absent one refused", why);
            return;
        }
    };
    kit.record("devices: each compiles there", |p| {
        let devices = &p.descriptor().device_infos;
        // Every device by name, then no device: the first one listed.
        let asks = devices
            .iter()
            .map(|d| (Some((d.kind, d.ordinal)), d))
            .chain(devices.first().map(|d| (None, d)));
        for (device, want) in asks {
            let opts = CompileOptions {
                device,
                ..Default::default()
            };
            let what = match device {
                Some(_) => want.label(),
                None => format!("the default ({})", want.label()),
            };
            let exe = match p.compile_with(&base.text, &opts) {
                Ok(e) => e,
                Err(e) => return Outcome::Fail(format!("compiling for {what}: {e}")),
            };
            match exe.device() {
                Some(got) if got.kind == want.kind && got.ordinal == want.ordinal => {}
                got => {
                    return Outcome::Fail(format!(
                        "compiled for {what}, the executable says {:?}",
                        got.map(|g| g.label())
                    ))
                }
            }
        }
        Outcome::Ok
    });
    kit.record("devices: absent one refused", |p| {
        let opts = CompileOptions {
            device: Some((DeviceKind::Gpu, 1 << 20)),
            ..Default::default()
        };
        match p.compile_with(&base.text, &opts) {
            Ok(_) => Outcome::Fail("compiling for gpu:1048576 succeeded".into()),
            Err(e) if e.code == StatusCode::Unsupported => Outcome::Ok,
            Err(e) => Outcome::Fail(format!("expected UNSUPPORTED, got {e}")),
        }
    });
}
