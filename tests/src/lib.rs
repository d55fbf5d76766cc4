//! Helpers shared by the integration tests: where the built plugin
//! libraries are, temp plugin directories, a log capture, and the parity
//! harness. This crate's tests load plugins as a user's program would,
//! through the loader: they must not link a plugin crate (the MLX plugin
//! is a dev-dependency only so that cargo builds its library). Linking it
//! is for `static-host/`, which tests exactly that.

pub mod decoder_package;
pub mod edge;
pub mod mlp_reference;
pub mod parity;
pub mod recurrent;
pub mod relu_affine;
pub mod train_mlp;
pub mod warmup;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The cargo profile directory the tests were built into (`target/debug`):
/// test binaries live in `<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary directory");
    deps.parent().expect("profile directory").to_path_buf()
}

/// The built test plugin `rlx_test_<name>` (e.g. `fixture`, `null_entry`).
pub fn test_plugin(name: &str) -> PathBuf {
    rlx_host::build_tree::built_library(&profile_dir(), &format!("rlx_test_{name}"))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh temp directory holding copies of `files` as `(source, file name)`.
pub fn plugins_dir(files: &[(&Path, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (src, name) in files {
        std::fs::copy(src, dir.path().join(name)).expect("copy plugin");
    }
    dir
}

/// `y = name(x)` over f32 `x [3]`: one `Op::Custom` node (its output the
/// same shape), for the custom-op tests.
pub fn one_custom_op(name: &str) -> rlx_ir::Graph {
    let s = rlx_ir::Shape::new(&[3], rlx_ir::DType::F32);
    let mut g = rlx_ir::Graph::new("custom");
    let x = g.input("x", s.clone());
    let y = g.add_node(
        rlx_ir::Op::Custom {
            name: name.into(),
            num_inputs: 1,
            attrs: vec![],
        },
        vec![x],
        s,
    );
    g.set_outputs(vec![y]);
    g
}

/// A discovery configuration that searches only `dir` (as if it were named
/// in `RLX_BACKEND_PLUGINS`), ignoring the machine's default directories.
pub fn only_dir(dir: &Path) -> rlx_plugin_loader::DiscoveryConfig {
    rlx_plugin_loader::DiscoveryConfig {
        env_plugins: Some(dir.as_os_str().to_owned()),
        ..Default::default()
    }
}

/// One captured log record.
#[derive(Clone, Debug)]
pub struct Captured {
    pub level: log::Level,
    pub target: String,
    pub message: String,
}

struct Capture(Mutex<Vec<Captured>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(Captured {
                level: r.level(),
                target: r.target().to_string(),
                message: r.args().to_string(),
            });
        }
    }
    fn flush(&self) {}
}

fn capture() -> &'static Capture {
    static C: OnceLock<&'static Capture> = OnceLock::new();
    C.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(c).expect("no other logger in this test binary");
        c
    })
}

/// Install the capturing logger (once) at `level` and return a reader.
pub fn capture_logs(level: log::LevelFilter) -> impl Fn() -> Vec<Captured> {
    let c = capture();
    log::set_max_level(level);
    move || c.0.lock().unwrap().clone()
}

/// One row of the C header's layout table (`tests/c/layout.c`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LayoutRow {
    pub type_name: String,
    /// Empty for the struct itself.
    pub field: String,
    pub offset: usize,
    pub size: usize,
}

#[repr(C)]
struct RawLayoutRow {
    type_name: *const std::ffi::c_char,
    field: *const std::ffi::c_char,
    offset: usize,
    size: usize,
}

extern "C" {
    static rlx_c_layout_rows: [RawLayoutRow; 0];
    static rlx_c_layout_len: usize;
    static rlx_c_abi_version: [u32; 3];
    static rlx_c_plugin_api_header_size: usize;
}

/// Every size and offset `include/rlx_plugin.h` gives, as the C compiler
/// laid it out.
pub fn c_layout() -> Vec<LayoutRow> {
    // SAFETY: the table and its length are constant data of layout.c,
    // linked into this crate; every string is a NUL-terminated literal.
    unsafe {
        let rows = std::slice::from_raw_parts(rlx_c_layout_rows.as_ptr(), rlx_c_layout_len);
        rows.iter()
            .map(|r| LayoutRow {
                type_name: std::ffi::CStr::from_ptr(r.type_name)
                    .to_string_lossy()
                    .into_owned(),
                field: std::ffi::CStr::from_ptr(r.field)
                    .to_string_lossy()
                    .into_owned(),
                offset: r.offset,
                size: r.size,
            })
            .collect()
    }
}

/// The header's `RLX_ABI_VERSION_*` and `RLX_PLUGIN_API_HEADER_SIZE`.
pub fn c_constants() -> ([u32; 3], usize) {
    // SAFETY: constant data of layout.c.
    unsafe { (rlx_c_abi_version, rlx_c_plugin_api_header_size) }
}

/// The fixture plugin (a small Rust interpreter, no executable state),
/// loaded once per test binary from a temp plugins directory kept for the
/// rest of the process.
pub fn fixture_plugin() -> std::sync::Arc<rlx_plugin_loader::LoadedPlugin> {
    static P: OnceLock<std::sync::Arc<rlx_plugin_loader::LoadedPlugin>> = OnceLock::new();
    P.get_or_init(|| {
        let dir = plugins_dir(&[(&test_plugin("fixture"), "librlx_test_fixture.so")]);
        let set = rlx_plugin_loader::PluginSet::load(&only_dir(dir.path()));
        let p = set.get("fixture").expect("fixture loaded").clone();
        // The library stays mapped for the process; its directory too.
        std::mem::forget(dir);
        p
    })
    .clone()
}

/// A graph the fixture plugin takes: `y = x + x` over f32[3].
pub const FIXTURE_GRAPH: &str = "rlxmodel 1\nopset 1\n\ngraph @g {\n  %x = input : f32[3]\n  \
%1 = Binary(Add) %x, %x : f32[3]\n  return %1\n}\n";
