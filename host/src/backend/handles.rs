//! rlx-runtime's persistent and GPU handles and KV row feeds on a plugin
//! executable: the plugin's state. A handle is an input the executable holds on
//! its device; a feed moves an output into it after each run, or rows of an
//! output when the caller asks.
//!
//! `ExecutableGraph` reports failure as `false` or `None`, so each failure
//! is logged (at warn, naming the plugin, the handle and the cause) before
//! it is turned into one: a caller that falls back to its host path still
//! leaves a trace of why.

use super::graph::{shape_for, PluginGraph};
use rlx_plugin_api::{convert, DType, Feed, HostTensorRef, PluginResult, RowFeed};
use std::sync::atomic::{AtomicU64, Ordering};

/// How often this process's plugin executables used their state: what a
/// program (or a test) reads to know that a resident path was live, not
/// silently the host one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateCounters {
    /// Inputs bound as state (handles), each bind counted.
    pub binds: u64,
    /// Feeds set: an output into a state after each run, or rows of it.
    pub feeds: u64,
    /// Row feeds applied (`feed_kv_row` and its batched forms) that copied
    /// rows on the device.
    pub row_feeds: u64,
    /// Reads of a state or of an output's rows back to the host.
    pub reads: u64,
}

static BINDS: AtomicU64 = AtomicU64::new(0);
static FEEDS: AtomicU64 = AtomicU64::new(0);
static ROW_FEEDS: AtomicU64 = AtomicU64::new(0);
static READS: AtomicU64 = AtomicU64::new(0);

/// The counts so far, process-wide, over every plugin executable.
pub fn state_counters() -> StateCounters {
    StateCounters {
        binds: BINDS.load(Ordering::Relaxed),
        feeds: FEEDS.load(Ordering::Relaxed),
        row_feeds: ROW_FEEDS.load(Ordering::Relaxed),
        reads: READS.load(Ordering::Relaxed),
    }
}

impl PluginGraph {
    /// `r`'s value, or `fallback` with a warning naming what failed.
    fn or_warn<T>(&self, what: impl std::fmt::Display, r: PluginResult<T>, fallback: T) -> T {
        r.unwrap_or_else(|e| {
            log::warn!("{} plugin: {what}: {e}", self.plugin);
            fallback
        })
    }

    /// Hold `data` (f32 values, converted to the input's dtype) as the
    /// state of input `name`.
    pub(super) fn hold(&mut self, name: &str, data: &[f32]) -> bool {
        if !self.offers.state {
            return false;
        }
        let Some(info) = self.inputs.iter().find(|i| i.name == name) else {
            log::warn!(
                "{} plugin: cannot hold {name:?} as state: the compiled graph has no such input",
                self.plugin
            );
            return false;
        };
        let dtype = info.dtype;
        let held = shape_for("handle", info, data.len())
            .map_err(rlx_plugin_api::PluginError::invalid_argument)
            .and_then(|shape| {
                let bytes = convert::f32_to_bytes(dtype, data)?;
                self.exe
                    .state_bind(name, HostTensorRef::new(dtype, &shape, &bytes)?)
            });
        let ok = self.or_warn(
            format_args!("cannot hold {name:?} as state"),
            held.map(|()| true),
            false,
        );
        if ok {
            self.held.insert(name.to_string(), (dtype, data.len()));
            BINDS.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Hold as the state `name` the value called `value` of `src` (its state of
    /// that name, else its last run's output of that name; `None`: this
    /// executable's), on the device, with nothing copied to the host. Errors
    /// name the plugin and what differs.
    pub fn hold_from(
        &mut self,
        name: &str,
        src: Option<&PluginGraph>,
        value: &str,
    ) -> Result<(), String> {
        if !self.offers.state || !self.offers.state_from {
            return Err(format!(
                "{} plugin cannot take a state from another executable (ABI 1.13 bind_from)",
                self.plugin
            ));
        }
        let info =
            self.inputs.iter().find(|i| i.name == name).ok_or_else(|| {
                format!("{} plugin: the graph has no input {name:?}", self.plugin)
            })?;
        let dtype = info.dtype;
        let len = info.shape.iter().map(|d| d.unwrap_or(0)).product();
        self.exe
            .state_bind_from(name, src.map(|s| &s.exe), value)
            .map_err(|e| format!("{} plugin: state {name:?} from {value:?}: {e}", self.plugin))?;
        self.held.insert(name.to_string(), (dtype, len));
        BINDS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Every state `src` holds, taken here under its own name with its feed, on
    /// the device, all or nothing: a graph compiled again taking over the last
    /// executable's caches.
    pub fn take_states_from(&mut self, src: &PluginGraph) -> Result<(), String> {
        if !self.offers.state || !self.offers.state_from {
            return Err(format!(
                "{} plugin cannot take states from another executable (ABI 1.13 bind_from)",
                self.plugin
            ));
        }
        self.exe
            .state_bind_from("", Some(&src.exe), "")
            .map_err(|e| format!("{} plugin: taking the states: {e}", self.plugin))?;
        self.held
            .extend(src.held.iter().map(|(k, v)| (k.clone(), *v)));
        self.row_fed.extend(src.row_fed.iter().cloned());
        BINDS.fetch_add(src.held.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Elements `first .. first + n` of the state `name`, as f32.
    pub(super) fn read_held(&self, name: &str, first: usize, n: Option<usize>) -> Option<Vec<f32>> {
        let &(dtype, len) = self.held.get(name)?;
        let n = n.unwrap_or(len.saturating_sub(first));
        let r = read_f32(dtype, n, |buf| {
            self.exe.state_read_into(name, first, dtype, buf)
        });
        self.or_warn(
            format_args!("cannot read state {name:?}"),
            r.map(Some),
            None,
        )
    }

    /// Elements `first .. first + n` of output `out` of the last run, as f32.
    pub(super) fn read_last_output(&self, out: usize, first: usize, n: usize) -> Option<Vec<f32>> {
        if !self.offers.state {
            return None;
        }
        let dtype = self.outputs.get(out)?.dtype;
        let r = read_f32(dtype, n, |buf| {
            self.exe.output_read_into(out, first, dtype, buf)
        });
        self.or_warn(format_args!("cannot read output {out}"), r.map(Some), None)
    }

    /// Set how the state `name` follows the runs.
    pub(super) fn feed(&mut self, name: &str, feed: Feed) -> bool {
        if !self.offers.state {
            return false;
        }
        let r = self.exe.state_set_feed(name, feed);
        let ok = self.or_warn(
            format_args!("cannot feed state {name:?}"),
            r.map(|()| true),
            false,
        );
        if ok {
            match feed {
                Feed::Rows(_) => self.row_fed.insert(name.to_string()),
                _ => self.row_fed.remove(name),
            };
            FEEDS.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Copy `rows` of the last run's outputs into every state fed rows
    /// (true with none to feed, as rlx-runtime's backends answer).
    pub(super) fn feed_rows(&mut self, rows: RowFeed) -> bool {
        if !self.offers.row_feeds {
            return false;
        }
        if self.row_fed.is_empty() {
            return true;
        }
        let r = self.exe.state_feed_rows(None, &rows);
        let ok = self.or_warn("cannot feed rows", r.map(|()| true), false);
        if ok {
            ROW_FEEDS.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

/// `n` elements of `dtype` read by `read` into a buffer, as f32.
fn read_f32(
    dtype: DType,
    n: usize,
    read: impl FnOnce(&mut [u8]) -> PluginResult<()>,
) -> PluginResult<Vec<f32>> {
    let bytes = n.checked_mul(dtype.size_bytes()).ok_or_else(|| {
        rlx_plugin_api::PluginError::invalid_argument(format!("{n} elements overflow"))
    })?;
    let mut buf = vec![0u8; bytes];
    read(&mut buf)?;
    convert::bytes_to_f32(dtype, &buf)
}
