//! ABI tests on raw tables, without the safe host wrapper: sizes, the
//! frozen header, last fields, version refusal from the plugin's side,
//! a host table with null optional slots, and status ownership.

use rlx_plugin_api::tables::*;
use rlx_plugin_api::version::{RlxAbiVersion, ABI_VERSION};
use rlx_plugin_api::{AbiStruct, RlxStr, StatusCode};
use rlx_plugin_tests::{plugins_dir, test_plugin};
use std::mem::{offset_of, size_of};

/// A private copy of the fixture, opened raw: each copy has its own
/// statics, so every test gets a fresh handshake.
fn raw_fixture(name: &str) -> (tempfile::TempDir, RlxEntryFn) {
    let file = format!("lib{name}.so");
    let dir = plugins_dir(&[(&test_plugin("fixture"), &file)]);
    let lib = unsafe { libloading::Library::new(dir.path().join(&file)) }.unwrap();
    let entry: RlxEntryFn = unsafe { *lib.get::<RlxEntryFn>(ENTRY_SYMBOL.as_bytes()).unwrap() };
    std::mem::forget(lib); // never unloaded, as the host does
    (dir, entry)
}

/// A host table of `size` bytes with no log functions.
fn host_table(version: RlxAbiVersion, size: usize) -> Box<RlxHostApi> {
    Box::new(RlxHostApi {
        struct_size: size,
        abi_version: version,
        host_name: RlxStr::from_static("raw test host"),
        log_ctx: std::ptr::null_mut(),
        log: None,
        log_max_level: None,
        setting: None,
    })
}

#[test]
fn struct_sizes_and_header_are_as_documented() {
    // The frozen header: struct_size, abi_version, refusal_code, refusal_message.
    assert_eq!(offset_of!(RlxPluginApi, struct_size), 0);
    assert_eq!(offset_of!(RlxPluginApi, abi_version), size_of::<usize>());
    assert_eq!(
        PLUGIN_API_HEADER_SIZE,
        offset_of!(RlxPluginApi, rust_layout_tag)
    );
    assert_eq!(size_of::<RlxAbiVersion>(), 12);
    assert_eq!(size_of::<RlxStr>(), 2 * size_of::<usize>());
    // ABI 1.0 ends where 1.1's custom_ops begins; 1.1-1.3 end where 1.4's
    // executable_device begins; 1.4-1.7 end where 1.8's
    // executable_run_into begins (1.5-1.7 added no root-table field); 1.8
    // ends where 1.9's state begins; 1.9 and 1.10 end where 1.11's
    // host_memory begins; 1.11 ends where 1.12's graph_forms begins; 1.12
    // is the whole table, and 1.13 added no root-table field (its one
    // field is the state table's).
    assert_eq!(plugin_api_min_size(0), offset_of!(RlxPluginApi, custom_ops));
    assert_eq!(
        plugin_api_min_size(1),
        offset_of!(RlxPluginApi, executable_device)
    );
    assert_eq!(plugin_api_min_size(2), plugin_api_min_size(1));
    assert_eq!(plugin_api_min_size(3), plugin_api_min_size(1));
    assert_eq!(
        plugin_api_min_size(4),
        offset_of!(RlxPluginApi, executable_run_into)
    );
    for m in 5..=7 {
        assert_eq!(plugin_api_min_size(m), plugin_api_min_size(4));
    }
    assert_eq!(plugin_api_min_size(8), offset_of!(RlxPluginApi, state));
    assert_eq!(
        plugin_api_min_size(9),
        offset_of!(RlxPluginApi, host_memory)
    );
    // 1.10 added no root-table field (its one field is the host table's).
    assert_eq!(plugin_api_min_size(10), plugin_api_min_size(9));
    assert_eq!(
        plugin_api_min_size(11),
        offset_of!(RlxPluginApi, graph_forms)
    );
    assert_eq!(plugin_api_min_size(12), size_of::<RlxPluginApi>());
    assert_eq!(plugin_api_min_size(13), plugin_api_min_size(12));
    // The state table: 1.9-1.12 end where 1.13's bind_from begins.
    assert_eq!(STATE_API_SIZE_1_9, offset_of!(RlxStateApi, bind_from));
    assert_eq!(
        RlxStateApi::STRUCT_SIZE,
        offset_of!(RlxStateApi, bind_from) + size_of::<usize>()
    );
    assert_eq!(HOST_API_SIZE_1_0, offset_of!(RlxHostApi, setting));
    assert_eq!(
        RlxHostApi::STRUCT_SIZE,
        offset_of!(RlxHostApi, setting) + size_of::<usize>()
    );
    assert_eq!(
        plugin_api_min_size(ABI_VERSION.minor),
        size_of::<RlxPluginApi>()
    );
    // DLPack layout: RlxDlTensor is DLTensor field for field.
    use rlx_plugin_api::tensor::RlxDlTensor;
    assert_eq!(offset_of!(RlxDlTensor, data), 0);
    assert_eq!(offset_of!(RlxDlTensor, device), 8);
    assert_eq!(offset_of!(RlxDlTensor, ndim), 16);
    assert_eq!(offset_of!(RlxDlTensor, dtype), 20);
    assert_eq!(offset_of!(RlxDlTensor, shape), 24);
    assert_eq!(offset_of!(RlxDlTensor, strides), 32);
    assert_eq!(offset_of!(RlxDlTensor, byte_offset), 40);
    assert_eq!(size_of::<RlxDlTensor>(), 48);
}

#[test]
fn the_root_table_of_a_current_plugin() {
    let (_d, entry) = raw_fixture("rootcheck");
    let host = host_table(ABI_VERSION, size_of::<RlxHostApi>());
    let root = unsafe { &*entry(&*host) };
    assert_eq!(root.struct_size, size_of::<RlxPluginApi>());
    assert_eq!(root.abi_version, ABI_VERSION);
    assert_eq!(root.refusal_code, 0);
    assert_eq!(
        unsafe { root.rust_layout_tag.to_str() }.unwrap(),
        RUST_LAYOUT_TAG
    );
    assert!(
        !root.rust_layout.is_null() && !root.descriptor.is_null() && !root.custom_ops.is_null()
    );
    let d = unsafe { &*root.descriptor };
    assert_eq!(d.struct_size, size_of::<RlxPluginDescriptor>());
    // The registry table of a 1.5 plugin: through execute_attrs.
    let c = unsafe { &*root.custom_ops };
    assert_eq!(c.struct_size, size_of::<RlxCustomOpApi>());
    assert!(c.infer_shape.is_some() && c.execute_attrs.is_some());
    assert_eq!(unsafe { d.name.to_str() }.unwrap(), "fixture");
    // Calling the entry again returns the same table.
    assert!(std::ptr::eq(root, unsafe { entry(&*host) }));

    // Tables are unavailable before registration, then complete.
    let mut ops = RlxOpList {
        struct_size: 0,
        ops: std::ptr::null(),
        n_ops: 0,
    };
    let st = unsafe { root.supported_ops.unwrap()(&mut ops) };
    assert!(!st.is_null());
    assert_eq!(
        unsafe { root.status_code.unwrap()(st) },
        StatusCode::InvalidArgument as u32
    );
    let msg = unsafe { root.status_message.unwrap()(st).to_string_lossy() };
    assert!(msg.contains("call `init`"), "{msg}");
    unsafe { root.status_free.unwrap()(st) };
    assert!(unsafe { root.init.unwrap()() }.is_null());
    assert!(
        unsafe { root.init.unwrap()() }.is_null(),
        "init is idempotent"
    );
    assert!(unsafe { root.supported_ops.unwrap()(&mut ops) }.is_null());
    assert_eq!(ops.n_ops, 6);
    assert_eq!(
        unsafe { (**ops.ops).struct_size },
        size_of::<RlxOpSupport>()
    );

    // Null out-pointers are errors, not crashes.
    let st = unsafe {
        root.compile.unwrap()(
            RlxStr::from_static("x"),
            std::ptr::null(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(
        unsafe { root.status_code.unwrap()(st) },
        StatusCode::InvalidArgument as u32
    );
    unsafe { root.status_free.unwrap()(st) };
    let st = unsafe {
        root.executable_run.unwrap()(
            std::ptr::null_mut(),
            std::ptr::null(),
            0,
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(
        unsafe { root.status_message.unwrap()(st).to_string_lossy() },
        "executable_run: the executable is null"
    );
    unsafe { root.status_free.unwrap()(st) };
    // Destroying null and freeing a null status are no-ops.
    unsafe { root.executable_destroy.unwrap()(std::ptr::null_mut()) };
    unsafe { root.status_free.unwrap()(std::ptr::null_mut()) };

    // status_new copies its message; the receiver frees it once.
    let text = String::from("made by the host");
    let st =
        unsafe { root.status_new.unwrap()(StatusCode::NotFound as u32, RlxStr::from_str(&text)) };
    drop(text);
    assert_eq!(
        unsafe { root.status_code.unwrap()(st) },
        StatusCode::NotFound as u32
    );
    assert_eq!(
        unsafe { root.status_message.unwrap()(st).to_string_lossy() },
        "made by the host"
    );
    unsafe { root.status_free.unwrap()(st) };
}

#[test]
fn an_older_host_table_without_optional_slots_is_accepted() {
    let (_d, entry) = raw_fixture("oldhost");
    // A host table that ends right after host_name: log_ctx, log and
    // log_max_level are absent (and must be treated as null).
    let mut host = host_table(
        RlxAbiVersion {
            minor: 0,
            ..ABI_VERSION
        },
        offset_of!(RlxHostApi, log_ctx),
    );
    host.log = Some(poison_log); // beyond struct_size: must not be called
    let root = unsafe { &*entry(&*host) };
    assert_eq!(root.refusal_code, 0);
    assert!(unsafe { root.init.unwrap()() }.is_null()); // init logs: nothing may reach poison_log
}

unsafe extern "C" fn poison_log(_: *mut std::ffi::c_void, _: *const RlxLogRecord) {
    panic!("the plugin read a host field beyond struct_size");
}

#[test]
fn the_plugin_refuses_a_host_of_another_major() {
    let (_d, entry) = raw_fixture("newhost");
    let host = host_table(
        RlxAbiVersion {
            major: ABI_VERSION.major + 1,
            minor: 0,
            patch: 0,
        },
        size_of::<RlxHostApi>(),
    );
    let root = unsafe { &*entry(&*host) };
    assert_eq!(root.refusal_code, StatusCode::VersionMismatch as u32);
    assert_eq!(root.struct_size, PLUGIN_API_HEADER_SIZE);
    let msg = unsafe { root.refusal_message.to_string_lossy() };
    assert!(
        msg.contains(&format!("{}.0.0", ABI_VERSION.major + 1))
            && msg.contains(&ABI_VERSION.to_string()),
        "{msg}"
    );
    assert!(
        root.init.is_none() && root.compile.is_none(),
        "a refused table offers nothing"
    );
}

#[test]
fn a_null_host_table_is_refused() {
    let (_d, entry) = raw_fixture("nullhost");
    let root = unsafe { &*entry(std::ptr::null()) };
    assert_eq!(root.refusal_code, StatusCode::InvalidArgument as u32);
    assert_eq!(
        unsafe { root.refusal_message.to_string_lossy() },
        "the host table is null"
    );
}

// ---- The host's settings ----

/// Log messages a raw host table received (its `log_ctx`).
type Sink = std::sync::Mutex<Vec<String>>;

unsafe extern "C" fn sink_log(ctx: *mut std::ffi::c_void, rec: *const RlxLogRecord) {
    let sink = &*(ctx as *const Sink);
    sink.lock().unwrap().push((*rec).message.to_string_lossy());
}

/// Longer than the plugin glue's first buffer (256 bytes), so the plugin
/// must ask again with a larger one.
fn long_value() -> String {
    format!("from the host {}", "x".repeat(300))
}

/// A 1.10 host's `setting`: answers `RLX_FIXTURE_SETTING` only, and checks
/// that it is handed `log_ctx` back.
unsafe extern "C" fn answer_setting(
    ctx: *mut std::ffi::c_void,
    key: RlxStr,
    buf: *mut u8,
    cap: usize,
) -> i64 {
    let sink = &*(ctx as *const Sink);
    sink.lock()
        .unwrap()
        .push(format!("setting asked: {}", key.to_string_lossy()));
    if key.to_str() != Ok("RLX_FIXTURE_SETTING") {
        return -1;
    }
    let v = long_value();
    std::ptr::copy_nonoverlapping(v.as_ptr(), buf, v.len().min(cap));
    v.len() as i64
}

unsafe extern "C" fn poison_setting(
    _: *mut std::ffi::c_void,
    _: RlxStr,
    _: *mut u8,
    _: usize,
) -> i64 {
    panic!("the plugin read a host field beyond struct_size");
}

/// init, then compile the fixture's graph (which reads the setting) on a
/// raw root table; the messages the sink got.
fn compile_with(host: &'static RlxHostApi, entry: RlxEntryFn, sink: &Sink) -> Vec<String> {
    let root = unsafe { &*entry(host) };
    assert_eq!(root.refusal_code, 0);
    assert!(unsafe { root.init.unwrap()() }.is_null());
    let mut exe = std::ptr::null_mut();
    let opts = RlxCompileOptions::default();
    let st = unsafe {
        root.compile.unwrap()(
            RlxStr::from_static(rlx_plugin_tests::FIXTURE_GRAPH),
            &opts,
            &mut exe,
        )
    };
    assert!(st.is_null());
    unsafe { root.executable_destroy.unwrap()(exe) };
    sink.lock().unwrap().clone()
}

#[test]
fn a_1_10_host_answers_the_plugins_settings() {
    let (_d, entry) = raw_fixture("settinghost");
    let sink: &'static Sink = Box::leak(Box::new(Sink::default()));
    let mut host = host_table(ABI_VERSION, size_of::<RlxHostApi>());
    host.log_ctx = sink as *const Sink as *mut std::ffi::c_void;
    host.log = Some(sink_log);
    host.setting = Some(answer_setting);
    let log = compile_with(Box::leak(host), entry, sink);
    assert!(
        log.iter()
            .any(|m| m == "setting asked: RLX_FIXTURE_SETTING"),
        "{log:?}"
    );
    let want = format!("fixture setting RLX_FIXTURE_SETTING = {:?}", long_value());
    assert!(log.contains(&want), "{log:?}");
}

#[test]
fn a_host_before_1_10_has_no_settings_and_the_plugin_reads_its_environment() {
    let (_d, entry) = raw_fixture("settingold");
    let sink: &'static Sink = Box::leak(Box::new(Sink::default()));
    // A 1.9 host: its table ends at log_max_level; `setting` beyond its
    // struct_size must never be called.
    let mut host = host_table(
        RlxAbiVersion {
            minor: 9,
            ..ABI_VERSION
        },
        HOST_API_SIZE_1_0,
    );
    host.log_ctx = sink as *const Sink as *mut std::ffi::c_void;
    host.log = Some(sink_log);
    host.setting = Some(poison_setting);
    // The fallback: the plugin's own process environment (std::env).
    std::env::set_var("RLX_FIXTURE_SETTING", "from the environment");
    let log = compile_with(Box::leak(host), entry, sink);
    assert!(
        log.iter()
            .any(|m| m == "fixture setting RLX_FIXTURE_SETTING = \"from the environment\""),
        "{log:?}"
    );
}
