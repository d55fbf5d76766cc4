//! Logging across the boundary, host side: the `log` function in the host
//! table re-emits each plugin record through the host's own `log` logger,
//! with target `rlx_plugin::<plugin name>::<plugin's target>`.

use rlx_plugin_api::strings::RlxStr;
use rlx_plugin_api::tables::{log_level, RlxLogRecord};
use std::ffi::c_void;
use std::sync::RwLock;

/// Per-plugin context behind `log_ctx`: the name records are tagged with
/// (the file name until the descriptor has been read). Leaked: the plugin
/// may log for the rest of the process.
pub(crate) struct LogCtx {
    pub label: RwLock<String>,
}

pub(crate) fn new_ctx(initial_label: String) -> &'static LogCtx {
    Box::leak(Box::new(LogCtx {
        label: RwLock::new(initial_label),
    }))
}

fn level_from_raw(raw: u32) -> Option<log::Level> {
    Some(match raw {
        log_level::ERROR => log::Level::Error,
        log_level::WARN => log::Level::Warn,
        log_level::INFO => log::Level::Info,
        log_level::DEBUG => log::Level::Debug,
        log_level::TRACE => log::Level::Trace,
        _ => return None,
    })
}

pub(crate) unsafe extern "C" fn host_log(ctx: *mut c_void, record: *const RlxLogRecord) {
    // Never let a logger's panic unwind into the plugin.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: `ctx` is the LogCtx this host leaked for the plugin;
        // `record` is null or borrowed for this call, readable for its
        // struct_size (never read beyond it).
        let (Some(ctx), Some(rec)) = (unsafe { (ctx as *const LogCtx).as_ref() }, unsafe {
            rlx_plugin_api::sized::declared_size(record)
                .map(|_| rlx_plugin_api::sized::read_zero_filled(record))
        }) else {
            return;
        };
        let Some(level) = level_from_raw(rec.level) else {
            return;
        };
        if level > log::max_level() {
            return;
        }
        let label = ctx.label.read().map(|l| l.clone()).unwrap_or_default();
        let plugin_target = RlxStr::to_string_lossy(&rec.target);
        let target = if plugin_target.is_empty() {
            format!("rlx_plugin::{label}")
        } else {
            format!("rlx_plugin::{label}::{plugin_target}")
        };
        let message = rec.message.to_string_lossy();
        let file = rec.file.to_string_lossy();
        let module_path = rec.module_path.to_string_lossy();
        log::logger().log(
            &log::Record::builder()
                .level(level)
                .target(&target)
                .args(format_args!("{message}"))
                .file(Some(&file).filter(|f| !f.is_empty()).map(|f| f.as_str()))
                .module_path(
                    Some(&module_path)
                        .filter(|m| !m.is_empty())
                        .map(|m| m.as_str()),
                )
                .line(Some(rec.line).filter(|l| *l != 0))
                .build(),
        );
    });
}

pub(crate) unsafe extern "C" fn host_log_max_level(_ctx: *mut c_void) -> u32 {
    log::max_level() as usize as u32
}
