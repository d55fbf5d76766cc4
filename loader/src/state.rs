//! (ABI 1.9, header §9) A loaded plugin executable's state, used safely:
//! every entry checked for presence, every status an error value.

use super::executable::PluginExecutable;
use rlx_plugin_api::error::{PluginError, PluginResult};
use rlx_plugin_api::plugin::{Role, ValueInfo};
use rlx_plugin_api::sized::AbiStruct;
use rlx_plugin_api::state::{Feed, RowFeed};
use rlx_plugin_api::strings::RlxStr;
use rlx_plugin_api::tables::{feed_kind, RlxStateApi, RlxValueVisitor};
use rlx_plugin_api::tensor::{ownership, DType, HostTensorRef, RlxTensor};
use std::ffi::c_void;

impl PluginExecutable {
    /// One function of the plugin's state table, or `UNSUPPORTED` naming
    /// what was asked: the table is absent, or the function null (a plugin
    /// may offer part of it).
    fn state_fn<F>(
        &self,
        what: &str,
        pick: impl FnOnce(&RlxStateApi) -> Option<F>,
    ) -> PluginResult<F> {
        let name = &self.plugin.descriptor.name;
        let table = self.plugin.state.as_ref().ok_or_else(|| {
            PluginError::unsupported(format!(
                "plugin {name} keeps no executable state (ABI 1.9): cannot {what}"
            ))
        })?;
        pick(table).ok_or_else(|| {
            PluginError::unsupported(format!("plugin {name} keeps state but cannot {what}"))
        })
    }

    /// Hold `value` as the state `name` (a graph input of its dtype and
    /// shape); runs then read that input from it.
    pub fn state_bind(&mut self, name: &str, value: HostTensorRef<'_>) -> PluginResult<()> {
        let f = self.state_fn("bind a state", |t| t.bind)?;
        let view = rlx_plugin_api::tensor::RawView::of(
            value.dtype,
            value.shape,
            value.data,
            ownership::BORROWED,
        );
        // SAFETY: `exe` is live; name and descriptor are borrowed for the call.
        self.plugin
            .check(unsafe { f(self.exe, RlxStr::from_str(name), &view.raw) })
    }

    /// (ABI 1.13) Hold as the state `name` the value called `value` of
    /// `src` (its state of that name, else its last run's output of that
    /// name), or of this executable when `src` is `None`, on the device,
    /// without a copy to the host. `src` must come from the same plugin.
    pub fn state_bind_from(
        &mut self,
        name: &str,
        src: Option<&PluginExecutable>,
        value: &str,
    ) -> PluginResult<()> {
        let f = self.state_fn("bind a state from another executable (ABI 1.13)", |t| {
            t.bind_from
        })?;
        let from = match src {
            Some(src) if !std::sync::Arc::ptr_eq(&src.plugin, &self.plugin) => {
                return Err(PluginError::invalid_argument(format!(
                    "bind_from: the source executable belongs to plugin {}, not {}",
                    src.plugin.descriptor.name, self.plugin.descriptor.name
                )))
            }
            Some(src) => src.exe as *const _,
            None => self.exe as *const _,
        };
        // SAFETY: both executables are live; the names are borrowed for the call.
        self.plugin.check(unsafe {
            f(
                self.exe,
                RlxStr::from_str(name),
                from,
                RlxStr::from_str(value),
            )
        })
    }

    /// Forget the state `name`: its input is the caller's to pass again.
    pub fn state_unbind(&mut self, name: &str) -> PluginResult<()> {
        let f = self.state_fn("unbind a state", |t| t.unbind)?;
        // SAFETY: `exe` is live; the name is borrowed for the call.
        self.plugin
            .check(unsafe { f(self.exe, RlxStr::from_str(name)) })
    }

    /// Copy elements `first ..` of the state `name`, in `dtype` (its own),
    /// into `into` (its length a whole number of elements).
    pub fn state_read_into(
        &self,
        name: &str,
        first: usize,
        dtype: DType,
        into: &mut [u8],
    ) -> PluginResult<()> {
        let f = self.state_fn("read a state", |t| t.read)?;
        let (mut shape, mut raw) = lent_1d(dtype, into)?;
        raw.dl.shape = shape.as_mut_ptr();
        // SAFETY: `exe` is live; `raw` describes `into`, writable for the call.
        self.plugin
            .check(unsafe { f(self.exe, RlxStr::from_str(name), first as u64, &mut raw) })
    }

    /// Copy elements `first ..` of output `output` (by position) of the
    /// last run, in `dtype` (its own), into `into`.
    pub fn output_read_into(
        &self,
        output: usize,
        first: usize,
        dtype: DType,
        into: &mut [u8],
    ) -> PluginResult<()> {
        let f = self.state_fn("read an output back", |t| t.read_output)?;
        let name = self
            .values(Role::Output)
            .nth(output)
            .map(|v| v.name.clone())
            .ok_or_else(|| {
                PluginError::invalid_argument(format!("output {output} does not exist"))
            })?;
        let (mut shape, mut raw) = lent_1d(dtype, into)?;
        raw.dl.shape = shape.as_mut_ptr();
        // SAFETY: `exe` is live; `raw` describes `into`, writable for the call.
        self.plugin
            .check(unsafe { f(self.exe, RlxStr::from_str(&name), first as u64, &mut raw) })
    }

    /// Every state the executable holds (role [`Role::State`]).
    pub fn state_list(&self) -> PluginResult<Vec<ValueInfo>> {
        let f = self.state_fn("list its states", |t| t.list)?;
        let mut out: Vec<PluginResult<ValueInfo>> = Vec::new();
        let visitor = RlxValueVisitor {
            struct_size: RlxValueVisitor::STRUCT_SIZE,
            ctx: &mut out as *mut _ as *mut c_void,
            visit: Some(super::executable::collect_value),
        };
        // SAFETY: `exe` is live; the visitor is borrowed for the call and its ctx is `out`.
        self.plugin.check(unsafe { f(self.exe, &visitor) })?;
        let list: Vec<ValueInfo> = out.into_iter().collect::<PluginResult<_>>()?;
        if let Some(v) = list.iter().find(|v| v.role != Role::State) {
            return Err(PluginError::internal(format!(
                "plugin {} listed {:?} among its states with role {:?}",
                self.plugin.descriptor.name, v.name, v.role
            )));
        }
        Ok(list)
    }

    /// How the state `name` follows the runs ([`Feed`] names the output by
    /// its position).
    pub fn state_set_feed(&mut self, name: &str, feed: Feed) -> PluginResult<()> {
        let f = self.state_fn("feed a state", |t| t.set_feed)?;
        let output = match feed.output() {
            None => String::new(),
            Some(i) => self
                .values(Role::Output)
                .nth(i)
                .map(|v| v.name.clone())
                .ok_or_else(|| {
                    PluginError::invalid_argument(format!(
                        "output {i} does not exist: the executable has {} outputs",
                        self.values(Role::Output).count()
                    ))
                })?,
        };
        debug_assert!(feed.kind() <= feed_kind::ROWS);
        // SAFETY: `exe` is live; the names are borrowed for the call.
        self.plugin.check(unsafe {
            f(
                self.exe,
                RlxStr::from_str(name),
                feed.kind(),
                RlxStr::from_str(&output),
            )
        })
    }

    /// Copy `rows` from the last run's outputs into every state fed rows
    /// (or only the one called `name`).
    pub fn state_feed_rows(&mut self, name: Option<&str>, rows: &RowFeed) -> PluginResult<()> {
        let f = self.state_fn("feed rows", |t| t.feed_rows)?;
        let raw = rows.to_raw();
        // SAFETY: `exe` is live; the feed and its dst_rows (in `rows`) are borrowed for the call.
        self.plugin
            .check(unsafe { f(self.exe, RlxStr::from_str(name.unwrap_or("")), &raw) })
    }
}

/// A 1-D `BORROWED` descriptor of `into` as elements of `dtype`; the
/// caller points `dl.shape` at the returned shape, which it keeps alive.
fn lent_1d(dtype: DType, into: &mut [u8]) -> PluginResult<([i64; 1], RlxTensor)> {
    let size = dtype.size_bytes();
    if !into.len().is_multiple_of(size) {
        return Err(PluginError::invalid_argument(format!(
            "a buffer of {} bytes is not a whole number of {dtype} elements",
            into.len()
        )));
    }
    let shape = [(into.len() / size) as i64];
    let raw = RlxTensor::compact(
        dtype,
        into.as_mut_ptr() as *mut c_void,
        std::ptr::null_mut(),
        1,
        ownership::BORROWED,
    );
    Ok((shape, raw))
}
