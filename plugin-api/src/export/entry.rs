//! Header §14: the entry symbol. `export_plugin!` writes it; [`entry`] is
//! its body: the handshake, the plugin's state and its root table.

use super::loaded::{self, Loaded};
use super::{custom_ops::CUSTOM_OP_API, executable, handle, registration, run, status};
use super::{graph_forms, host_memory, memory, sharing, state, submit};
use crate::custom_ops::CustomOpRegistry;
use crate::error::{panic_message, PluginError, PluginResult, StatusCode};
use crate::plugin::{Descriptor, DeviceInfo, Plugin};
use crate::sized::AbiStruct;
use crate::strings::{leak_str, RlxKeyValue, RlxStr};
use crate::tables::*;
use crate::version::{check_compatible, RlxAbiVersion, ABI_VERSION};
use abi_stable::StableAbi;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// Write the plugin's entry symbol. `$make` is an expression that builds
/// the plugin (a value implementing [`Plugin`]); it runs once, at the first
/// handshake that passes the version check.
///
/// With `manifest: M` (a `const` [`crate::manifest::Manifest`]) the library
/// also carries a manifest (docs/ABI.md §19), encoded at compile time, that
/// a host reads without loading the library:
///
/// ```ignore
/// const MANIFEST: Manifest = Manifest::new("demo", env!("CARGO_PKG_VERSION"))
///     .devices(&["cpu"])
///     .ops(&["Input", "Binary"]);
/// rlx_plugin_api::export_plugin!(Demo::new(), manifest: MANIFEST);
/// ```
///
/// Its name and ABI version must be what the entry reports; its op list,
/// when given, what `init` registers (a test of the plugin's should compare
/// them, since the manifest is written by hand).
#[macro_export]
macro_rules! export_plugin {
    ($make:expr, manifest: $manifest:expr) => {
        $crate::export_manifest!($manifest);
        $crate::export_plugin!($make);
    };
    ($make:expr, $opts:expr, manifest: $manifest:expr) => {
        $crate::export_manifest!($manifest);
        $crate::export_plugin!($make, $opts);
    };
    ($make:expr) => {
        $crate::export_plugin!($make, $crate::export::EntryOptions::default());
    };
    ($make:expr, $opts:expr) => {
        /// The plugin's entry symbol (written by `export_plugin!`).
        ///
        /// # Safety
        /// Called by an RLX host with a valid host table, per docs/ABI.md.
        #[no_mangle]
        pub unsafe extern "C" fn rlx_plugin_entry(
            host: *const $crate::tables::RlxHostApi,
        ) -> *const $crate::tables::RlxPluginApi {
            $crate::export::entry(
                host,
                || ::std::boxed::Box::new($make) as ::std::boxed::Box<dyn $crate::Plugin>,
                $opts,
            )
        }
    };
}

/// How the generated entry presents itself. The default is this build's
/// true ABI; the other knobs exist so the test suite can build plugins that
/// look like other builds (older or newer minors, other majors, another
/// layout) with the real glue.
#[derive(Clone, Copy)]
pub struct EntryOptions {
    pub abi_version: RlxAbiVersion,
    /// Declare this `struct_size` for the root table instead of the real one.
    pub struct_size: Option<usize>,
    /// Append this many extra (zero) bytes after the root table and count
    /// them in `struct_size`, as a newer minor with more fields would.
    pub extra_tail_bytes: usize,
    /// Publish this layout instead of the true one.
    pub rust_layout: Option<&'static abi_stable::type_layout::TypeLayout>,
    /// Store this address in `custom_ops` (to prove a host ignores fields
    /// beyond `struct_size`).
    pub custom_ops_override: Option<usize>,
}

impl Default for EntryOptions {
    fn default() -> Self {
        EntryOptions {
            abi_version: ABI_VERSION,
            struct_size: None,
            extra_tail_bytes: 0,
            rust_layout: None,
            custom_ops_override: None,
        }
    }
}

/// Address of the published root table (accepted or refused).
static ROOT: OnceLock<usize> = OnceLock::new();

/// The body of the generated entry symbol.
///
/// # Safety
/// `host` is null or points at a host table as docs/ABI.md defines it.
pub unsafe fn entry(
    host: *const RlxHostApi,
    make: impl FnOnce() -> Box<dyn Plugin>,
    opts: EntryOptions,
) -> *const RlxPluginApi {
    if let Some(root) = ROOT.get() {
        return *root as *const RlxPluginApi;
    }
    let root = match catch_unwind(AssertUnwindSafe(|| handshake(host, make, &opts))) {
        Ok(Ok(root)) => root,
        Ok(Err(e)) => refusal(opts.abi_version, e),
        Err(payload) => refusal(
            opts.abi_version,
            PluginError::new(
                StatusCode::Panic,
                format!("plugin entry panicked: {}", panic_message(&*payload)),
            ),
        ),
    };
    *ROOT.get_or_init(|| root as usize) as *const RlxPluginApi
}

fn refusal(version: RlxAbiVersion, e: PluginError) -> *const RlxPluginApi {
    let mut t = RlxPluginApi::blank(version);
    t.struct_size = PLUGIN_API_HEADER_SIZE;
    t.refusal_code = e.code as u32;
    t.refusal_message = leak_str(e.message);
    Box::leak(Box::new(t))
}

unsafe fn handshake(
    host: *const RlxHostApi,
    make: impl FnOnce() -> Box<dyn Plugin>,
    opts: &EntryOptions,
) -> PluginResult<*const RlxPluginApi> {
    let host = crate::log::read_host_table(host)?;
    check_compatible(host.abi_version, opts.abi_version)
        .map_err(|e| PluginError::new(StatusCode::VersionMismatch, e.to_string()))?;
    crate::log::install_plugin_logger(&host);
    crate::settings::install(&host);

    let plugin = make();
    plugin.availability()?;
    let desc = plugin.descriptor();
    let descriptor: &'static RlxPluginDescriptor = Box::leak(Box::new(raw_descriptor(&desc)));
    let offers = plugin.offers();
    let forms = plugin.graph_forms();
    loaded::set(Loaded {
        plugin,
        registry: CustomOpRegistry::new(),
        tables: OnceLock::new(),
        devices: desc.device_infos.clone(),
    });

    let mut t = RlxPluginApi::blank(opts.abi_version);
    let layout: &'static abi_stable::type_layout::TypeLayout = opts
        .rust_layout
        .unwrap_or(<RlxPluginApi as StableAbi>::LAYOUT);
    t.rust_layout_tag = RlxStr::from_static(RUST_LAYOUT_TAG);
    t.rust_layout = layout as *const _ as *const c_void;
    t.descriptor = descriptor;
    t.status_new = Some(status::status_new);
    t.status_code = Some(status::status_code);
    t.status_message = Some(status::status_message);
    t.status_free = Some(status::status_free);
    t.init = Some(registration::init);
    t.supported_ops = Some(registration::supported_ops);
    t.lowering_table = Some(registration::lowering_table);
    t.compile = Some(executable::compile);
    t.executable_destroy = Some(executable::executable_destroy);
    t.executable_signature = Some(executable::executable_signature);
    t.executable_bind_param = Some(executable::executable_bind_param);
    t.executable_run = Some(run::executable_run);
    t.executable_device = Some(executable::executable_device);
    t.executable_run_into = Some(run::executable_run_into);
    // Only what the plugin offers is published; the rest stays null.
    t.state = state::table(&offers);
    t.sharing = sharing::table(&offers);
    t.submits = submit::table(&offers);
    t.executable_bind_param_range = offers
        .param_range
        .then_some(executable::executable_bind_param_range as _);
    t.executable_set_rng = offers
        .set_rng
        .then_some(executable::executable_set_rng as _);
    t.executable_set_active_extent = offers
        .active_extent
        .then_some(executable::executable_set_active_extent as _);
    t.memory_usage = offers.memory_usage.then_some(memory::memory_usage as _);
    t.host_memory = host_memory::table(&offers);
    // Null when the plugin lists no form.
    t.graph_forms = graph_forms::table(forms);
    t.custom_ops = match opts.custom_ops_override {
        Some(addr) => addr as *const RlxCustomOpApi,
        None => &CUSTOM_OP_API,
    };
    t.struct_size = opts.struct_size.unwrap_or(RlxPluginApi::STRUCT_SIZE) + opts.extra_tail_bytes;

    // A newer minor's table: the same prefix followed by fields this build
    // does not know, all zero.
    #[repr(C)]
    struct Extended {
        api: RlxPluginApi,
        tail: [u8; 256],
    }
    if opts.extra_tail_bytes > 256 {
        return Err(PluginError::internal("extra_tail_bytes is limited to 256"));
    }
    let ext: &'static Extended = Box::leak(Box::new(Extended {
        api: t,
        tail: [0; 256],
    }));
    Ok(&ext.api)
}

fn raw_descriptor(d: &Descriptor) -> RlxPluginDescriptor {
    let devices: &'static [RlxStr] =
        Box::leak(d.devices.iter().map(|s| leak_str(s.clone())).collect());
    let build_info: &'static [RlxKeyValue] = Box::leak(
        d.build_info
            .iter()
            .map(|(k, v)| RlxKeyValue {
                key: leak_str(k.clone()),
                value: leak_str(v.clone()),
            })
            .collect(),
    );
    let opsets: &'static [u32] = Box::leak(d.opsets.clone().into_boxed_slice());
    let device_infos: &'static [*const RlxDeviceInfo] = Box::leak(
        d.device_infos
            .iter()
            .map(|info| {
                let info: &'static DeviceInfo = Box::leak(Box::new(info.clone()));
                Box::leak(Box::new(handle::raw_device_info(info))) as *const RlxDeviceInfo
            })
            .collect(),
    );
    RlxPluginDescriptor {
        struct_size: RlxPluginDescriptor::STRUCT_SIZE,
        name: leak_str(d.name.clone()),
        version: leak_str(d.version.clone()),
        description: leak_str(d.description.clone()),
        devices: devices.as_ptr(),
        n_devices: devices.len(),
        build_info: build_info.as_ptr(),
        n_build_info: build_info.len(),
        opsets: opsets.as_ptr(),
        n_opsets: opsets.len(),
        device_infos: device_infos.as_ptr(),
        n_device_infos: device_infos.len(),
    }
}
