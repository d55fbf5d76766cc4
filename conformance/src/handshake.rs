//! Check 1, the handshake: the library loads through the host loader, its
//! ABI version and root table size are acceptable, every required
//! function is set, and calling the entry again returns the same table.

use super::{Kit, Outcome};
use rlx_plugin_api::sized::AbiStruct;
use rlx_plugin_api::tables::{
    plugin_api_min_size, RlxEntryFn, RlxHostApi, RlxPluginApi, ENTRY_SYMBOL,
    PLUGIN_API_HEADER_SIZE, RUST_LAYOUT_TAG,
};
use rlx_plugin_api::version::{check_compatible, ABI_VERSION};
use rlx_plugin_api::RlxStr;
use rlx_plugin_loader::LoadedPlugin;
use std::path::Path;
use std::sync::Arc;

pub(super) fn run(kit: &mut Kit) {
    kit.record("handshake: ABI version", |p| abi_version(p).into());
    kit.record("handshake: root table struct_size", |p| root_size(p).into());
    kit.record("handshake: required functions", |p| {
        required(p.raw_api()).into()
    });
    kit.record("handshake: rust layout tag", |p| {
        layout_tag(p.raw_api()).into()
    });
    kit.record("handshake: entry returns the same table", entry_again);
}

fn abi_version(p: &LoadedPlugin) -> Result<(), String> {
    let api = p.raw_api();
    check_compatible(ABI_VERSION, api.abi_version).map_err(|e| e.to_string())?;
    if api.refusal_code != 0 {
        return Err(format!(
            "refusal_code is {} on a table the loader accepted",
            api.refusal_code
        ));
    }
    Ok(())
}

fn root_size(p: &LoadedPlugin) -> Result<(), String> {
    let api = p.raw_api();
    let v = api.abi_version;
    let need = plugin_api_min_size(v.minor).max(PLUGIN_API_HEADER_SIZE);
    if api.struct_size < need {
        return Err(format!(
            "struct_size {} is smaller than ABI {v} requires ({need} bytes)",
            api.struct_size
        ));
    }
    // A plugin of this host's minor or older must not count bytes its
    // minor does not define: a newer reader would take them as fields.
    let own = plugin_api_min_size(v.minor);
    if v.minor <= ABI_VERSION.minor && api.struct_size > own {
        return Err(format!(
            "struct_size {} is larger than ABI {v} defines ({own} bytes)",
            api.struct_size
        ));
    }
    Ok(())
}

fn required(api: &RlxPluginApi) -> Result<(), String> {
    let present = [
        ("descriptor", !api.descriptor.is_null()),
        ("status_new", api.status_new.is_some()),
        ("status_code", api.status_code.is_some()),
        ("status_message", api.status_message.is_some()),
        ("status_free", api.status_free.is_some()),
        ("init", api.init.is_some()),
        ("supported_ops", api.supported_ops.is_some()),
        ("lowering_table", api.lowering_table.is_some()),
        ("compile", api.compile.is_some()),
        ("executable_destroy", api.executable_destroy.is_some()),
        ("executable_signature", api.executable_signature.is_some()),
        ("executable_bind_param", api.executable_bind_param.is_some()),
        ("executable_run", api.executable_run.is_some()),
    ];
    let missing: Vec<&str> = present
        .iter()
        .filter(|(_, set)| !set)
        .map(|(n, _)| *n)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("null: {}", missing.join(", ")))
    }
}

/// The header: the tag names abi_stable exactly when a layout is set.
fn layout_tag(api: &RlxPluginApi) -> Result<(), String> {
    // SAFETY: a plugin-owned, static string of the accepted table.
    let tag = unsafe { api.rust_layout_tag.to_string_lossy() };
    match (api.rust_layout.is_null(), tag.as_str()) {
        (true, "") => Ok(()),
        (false, t) if t == RUST_LAYOUT_TAG => Ok(()),
        (true, t) => Err(format!("rust_layout is null but the tag is {t:?}")),
        (false, t) => Err(format!(
            "rust_layout is set but the tag is {t:?} (expected {RUST_LAYOUT_TAG:?})"
        )),
    }
}

/// A host table for the kit's own calls of the entry: host-owned and
/// static, as the ABI requires; no log sink (both functions optional).
fn kit_host_table() -> &'static RlxHostApi {
    Box::leak(Box::new(RlxHostApi {
        struct_size: RlxHostApi::STRUCT_SIZE,
        abi_version: ABI_VERSION,
        host_name: RlxStr::from_static("rlx-plugin-conformance"),
        log_ctx: std::ptr::null_mut(),
        log: None,
        log_max_level: None,
        setting: None,
    }))
}

/// Open the library a second time (the loader keeps its handle, so this
/// is the same mapping), call the entry twice and compare the tables.
fn entry_again(p: &Arc<LoadedPlugin>) -> Outcome {
    let lib = match open(p.path()) {
        Ok(l) => l,
        Err(e) => return Outcome::Fail(format!("cannot open the library again: {e}")),
    };
    // SAFETY: the symbol has the entry's type (the loader already used it).
    let entry: RlxEntryFn = match unsafe { lib.get::<RlxEntryFn>(ENTRY_SYMBOL.as_bytes()) } {
        Ok(f) => *f,
        Err(e) => return Outcome::Fail(format!("{ENTRY_SYMBOL} not found on reopening: {e}")),
    };
    let host = kit_host_table();
    // SAFETY: calling the entry again is allowed (docs/ABI.md §1); the
    // host table is static.
    let (a, b) = unsafe { (entry(host), entry(host)) };
    same_table(p.raw_api(), a, b).into()
}

fn same_table(
    first: &RlxPluginApi,
    a: *const RlxPluginApi,
    b: *const RlxPluginApi,
) -> Result<(), String> {
    if a.is_null() || b.is_null() {
        return Err("the entry returned null when called again".into());
    }
    if a != b {
        return Err(format!(
            "two calls returned different tables ({a:p}, {b:p})"
        ));
    }
    // SAFETY: a non-null root table, plugin-owned and static; the frozen
    // header is always readable and the rest only when accepted.
    let t = unsafe { &*a };
    if t.refusal_code != 0 {
        return Err(format!(
            "called again, the entry refused (code {})",
            t.refusal_code
        ));
    }
    let fns = |x: &RlxPluginApi| {
        (
            x.descriptor as usize,
            x.status_new.map(|f| f as usize),
            x.compile.map(|f| f as usize),
            x.executable_run.map(|f| f as usize),
        )
    };
    if fns(t) != fns(first) {
        return Err(
            "the table returned again differs from the one loaded (descriptor or functions)".into(),
        );
    }
    Ok(())
}

/// The loader's own flags (RTLD_NOW | RTLD_LOCAL on Unix), so the second
/// open finds the first mapping. Leaked: libraries are never unloaded.
fn open(path: &Path) -> Result<&'static libloading::Library, String> {
    #[cfg(unix)]
    // SAFETY: the library is already loaded, so no constructor runs again.
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
        .map(libloading::Library::from)
    };
    #[cfg(not(unix))]
    // SAFETY: as above.
    let lib = unsafe { libloading::Library::new(path) };
    lib.map(|l| &*Box::leak(Box::new(l)))
        .map_err(|e| e.to_string())
}
