//! Header §9: executable state, each entry a few lines over the plugin's
//! `Executable::state_*`.

use super::args::{read_arg, visit_values};
use super::handle::enter;
use super::status::guard;
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::plugin::{Offers, Role, StateBuf};
use crate::sized::AbiStruct;
use crate::state::{Feed, RowFeed};
use crate::strings::RlxStr;
use crate::tables::*;
use crate::tensor::{ownership, RlxTensor, TensorRef};

/// The table published for what the plugin offers (null: no state).
pub(super) fn table(offers: &Offers) -> *const RlxStateApi {
    static TABLES: [RlxStateApi; 4] = [
        api(false, false),
        api(true, false),
        api(false, true),
        api(true, true),
    ];
    if !offers.state {
        return std::ptr::null();
    }
    &TABLES[offers.row_feeds as usize + 2 * offers.state_from as usize]
}

const fn api(row_feeds: bool, from: bool) -> RlxStateApi {
    RlxStateApi {
        struct_size: RlxStateApi::STRUCT_SIZE,
        bind: Some(state_bind),
        unbind: Some(state_unbind),
        read: Some(state_read),
        list: Some(state_list),
        set_feed: Some(state_set_feed),
        feed_rows: if row_feeds {
            Some(state_feed_rows)
        } else {
            None
        },
        read_output: Some(state_read_output),
        bind_from: if from { Some(state_bind_from) } else { None },
    }
}

fn utf8<'a>(s: RlxStr, what: &str) -> PluginResult<&'a str> {
    // SAFETY: borrowed for the call, which outlives every use here.
    unsafe { s.to_str() }
        .map_err(|e| PluginError::invalid_argument(format!("{what} is not UTF-8: {e}")))
}

unsafe extern "C" fn state_bind(
    exe: *mut RlxExecutable,
    name: RlxStr,
    value: *const RlxTensor,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "state bind")?;
        let name = utf8(name, "state name")?;
        let raw = value
            .as_ref()
            .ok_or_else(|| PluginError::invalid_argument("`value` is null"))?;
        let view = TensorRef::from_raw(raw).map_err(|e| e.context(format!("state {name:?}")))?;
        exe.exe().state_bind(name, view)
    })
}

unsafe extern "C" fn state_bind_from(
    exe: *mut RlxExecutable,
    name: RlxStr,
    src: *const RlxExecutable,
    value: RlxStr,
) -> *mut RlxStatus {
    guard(|| {
        let name = utf8(name, "state name")?;
        let value = utf8(value, "value name")?;
        if std::ptr::eq(exe as *const RlxExecutable, src) {
            let mut exe = enter(exe, "state bind_from")?;
            return exe.exe().state_bind_from(name, None, value);
        }
        let mut to = enter(exe, "state bind_from")?;
        let mut from = enter(src, "state bind_from (src)")?;
        if to.owner.device != from.owner.device {
            return Err(PluginError::invalid_argument(format!(
                "bind_from: src runs on {} and exe on {}; a state is taken on one device",
                device_label(&from.owner.device),
                device_label(&to.owner.device)
            )));
        }
        to.exe().state_bind_from(name, Some(from.exe()), value)
    })
}

fn device_label(d: &Option<crate::plugin::DeviceInfo>) -> String {
    d.as_ref().map_or("an unnamed device".into(), |d| d.label())
}

unsafe extern "C" fn state_unbind(exe: *mut RlxExecutable, name: RlxStr) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "state unbind")?;
        exe.exe().state_unbind(utf8(name, "state name")?)
    })
}

unsafe extern "C" fn state_read(
    exe: *const RlxExecutable,
    name: RlxStr,
    first_elem: u64,
    into: *mut RlxTensor,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "state read")?;
        let name = utf8(name, "state name")?;
        let (first, buf) = lent(into, first_elem, || {
            format!("the buffer lent to read state {name:?}")
        })?;
        exe.exe().state_read(name, first, buf)
    })
}

unsafe extern "C" fn state_read_output(
    exe: *const RlxExecutable,
    output: RlxStr,
    first_elem: u64,
    into: *mut RlxTensor,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "state read_output")?;
        let output = utf8(output, "output name")?;
        let i = output_index(exe.exe(), output)?;
        let (first, buf) = lent(into, first_elem, || {
            format!("the buffer lent to read output {output:?}")
        })?;
        exe.exe().output_read(i, first, buf)
    })
}

/// A buffer the caller lends to a read: `BORROWED`, non-null, compact.
unsafe fn lent<'a>(
    into: *mut RlxTensor,
    first_elem: u64,
    what: impl Fn() -> String,
) -> PluginResult<(usize, StateBuf<'a>)> {
    let raw = into
        .as_ref()
        .ok_or_else(|| PluginError::invalid_argument("`into` is null"))?;
    if raw.ownership != ownership::BORROWED {
        return Err(PluginError::invalid_argument(format!(
            "{} has ownership {}; it must be BORROWED (the caller keeps it)",
            what(),
            raw.ownership
        )));
    }
    if raw.dl.data.is_null() {
        return Err(PluginError::invalid_argument(format!(
            "{} has null data",
            what()
        )));
    }
    let view = TensorRef::from_raw(raw).map_err(|e| e.context(what()))?;
    let bytes = view.compact_bytes().ok_or_else(|| {
        PluginError::invalid_argument(format!("{} is strided; it must be compact", what()))
    })?;
    let first = usize::try_from(first_elem).map_err(|_| {
        PluginError::invalid_argument(format!("first element {first_elem} is too large"))
    })?;
    let buf = StateBuf {
        dtype: view.dtype,
        // SAFETY: the caller lends these bytes, writable for the call.
        bytes: std::slice::from_raw_parts_mut(bytes.as_ptr() as *mut u8, bytes.len()),
    };
    Ok((first, buf))
}

/// The position of the output called `name`, or `NOT_FOUND` listing them.
fn output_index(exe: &mut dyn crate::plugin::Executable, name: &str) -> PluginResult<usize> {
    let outputs: Vec<String> = exe
        .signature()
        .into_iter()
        .filter(|v| v.role == Role::Output)
        .map(|v| v.name)
        .collect();
    outputs.iter().position(|o| o == name).ok_or_else(|| {
        PluginError::not_found(format!(
            "the graph has no output named {name:?} (outputs: {})",
            outputs.join(", ")
        ))
    })
}

unsafe extern "C" fn state_list(
    exe: *const RlxExecutable,
    visitor: *const RlxValueVisitor,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "state list")?;
        let visitor = read_arg(visitor, "visitor")?;
        visit_values(&visitor, exe.exe().state_list())
    })
}

unsafe extern "C" fn state_set_feed(
    exe: *mut RlxExecutable,
    name: RlxStr,
    kind: u32,
    output: RlxStr,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "state set_feed")?;
        let name = utf8(name, "state name")?;
        let feed = match kind {
            feed_kind::NONE => Feed::None,
            feed_kind::REPLACE | feed_kind::ROWS => {
                let output = utf8(output, "output name")?;
                let i = output_index(exe.exe(), output)?;
                if kind == feed_kind::REPLACE {
                    Feed::Replace(i)
                } else {
                    Feed::Rows(i)
                }
            }
            other => {
                return Err(PluginError::invalid_argument(format!(
                    "unknown feed kind {other} (0 none, 1 replace, 2 rows)"
                )))
            }
        };
        exe.exe().state_set_feed(name, feed)
    })
}

unsafe extern "C" fn state_feed_rows(
    exe: *mut RlxExecutable,
    name: RlxStr,
    rows: *const RlxRowFeed,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "state feed_rows")?;
        let name = utf8(name, "state name")?;
        let rows = RowFeed::from_raw(rows)?;
        exe.exe()
            .state_feed_rows((!name.is_empty()).then_some(name), &rows)
    })
}
