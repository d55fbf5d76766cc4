//! Logging across the boundary, plugin side: records the plugin emits with
//! the `log` crate are forwarded to the host's `log` sink, at no more
//! verbose a level than the host asks for.

use crate::error::{PluginError, PluginResult};
use crate::strings::RlxStr;
use crate::tables::{log_level, RlxHostApi, RlxLogRecord};
use std::ffi::c_void;
use std::sync::OnceLock;

/// The host table's fields this build knows, read through the host's
/// `struct_size` (fields beyond it are absent).
#[derive(Clone, Copy)]
pub(crate) struct HostTable {
    pub abi_version: crate::version::RlxAbiVersion,
    pub log_ctx: *mut c_void,
    pub log: Option<unsafe extern "C" fn(*mut c_void, *const RlxLogRecord)>,
    pub log_max_level: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// The host's settings; `None` when the host table does not reach `setting`
    /// or leaves it null.
    pub setting: Option<unsafe extern "C" fn(*mut c_void, RlxStr, *mut u8, usize) -> i64>,
}

// SAFETY: the host promises its table's functions are callable from any thread.
unsafe impl Send for HostTable {}
// SAFETY: as for Send.
unsafe impl Sync for HostTable {}

/// Copy the host table's prefix, zero-filling what an older host lacks.
pub(crate) unsafe fn read_host_table(host: *const RlxHostApi) -> PluginResult<HostTable> {
    if host.is_null() {
        return Err(PluginError::invalid_argument("the host table is null"));
    }
    let declared = std::ptr::read_unaligned(host as *const usize);
    let frozen = crate::tables::HOST_API_HEADER_SIZE;
    if declared < frozen {
        return Err(PluginError::invalid_argument(format!(
            "host table struct_size {declared} is smaller than its frozen header ({frozen} bytes)"
        )));
    }
    // SAFETY: every field is an integer, a pointer or an Option<fn>; all
    // zero is valid for each.
    let h = crate::sized::read_zero_filled(host);
    Ok(HostTable {
        abi_version: h.abi_version,
        log_ctx: h.log_ctx,
        log: h.log,
        log_max_level: h.log_max_level,
        // A field only partly inside the host's struct_size is absent too.
        setting: if declared
            >= std::mem::offset_of!(RlxHostApi, setting) + std::mem::size_of::<usize>()
        {
            h.setting
        } else {
            None
        },
    })
}

struct HostLogger {
    host: HostTable,
}

static LOGGER: OnceLock<&'static HostLogger> = OnceLock::new();
/// Whether our logger is the `log` crate's (a plugin may have its own).
static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn level_to_raw(l: log::Level) -> u32 {
    l as usize as u32
}

fn filter_from_raw(raw: u32) -> log::LevelFilter {
    match raw {
        log_level::OFF => log::LevelFilter::Off,
        log_level::ERROR => log::LevelFilter::Error,
        log_level::WARN => log::LevelFilter::Warn,
        log_level::INFO => log::LevelFilter::Info,
        log_level::DEBUG => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

impl HostLogger {
    fn host_max(&self) -> log::LevelFilter {
        match self.host.log_max_level {
            // SAFETY: the host's own function with its own context.
            Some(f) => filter_from_raw(unsafe { f(self.host.log_ctx) }),
            None => log::LevelFilter::Trace,
        }
    }
}

impl log::Log for HostLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        self.host.log.is_some() && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        let Some(sink) = self.host.log else { return };
        if record.level() > log::max_level() {
            return;
        }
        let message = record.args().to_string();
        let raw = RlxLogRecord {
            struct_size: <RlxLogRecord as crate::sized::AbiStruct>::STRUCT_SIZE,
            level: level_to_raw(record.level()),
            target: RlxStr::from_str(record.target()),
            message: RlxStr::from_str(&message),
            module_path: RlxStr::from_str(record.module_path().unwrap_or("")),
            file: RlxStr::from_str(record.file().unwrap_or("")),
            line: record.line().unwrap_or(0),
            reserved0: 0,
        };
        // SAFETY: the host's own sink and context; the record is borrowed for the call.
        unsafe { sink(self.host.log_ctx, &raw) };
    }

    fn flush(&self) {}
}

/// Route this plugin's `log` records to the host. A plugin that installed
/// a logger of its own keeps it.
pub(crate) fn install_plugin_logger(host: &HostTable) {
    let logger: &'static HostLogger =
        LOGGER.get_or_init(|| Box::leak(Box::new(HostLogger { host: *host })));
    if log::set_logger(logger).is_ok() {
        INSTALLED.store(true, std::sync::atomic::Ordering::Release);
        log::set_max_level(logger.host_max());
    }
}

/// Re-read the host's level (it may have changed since the handshake).
pub(crate) fn sync_max_level() {
    if let (Some(l), true) = (
        LOGGER.get(),
        INSTALLED.load(std::sync::atomic::Ordering::Acquire),
    ) {
        log::set_max_level(l.host_max());
    }
}
