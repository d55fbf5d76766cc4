//! The state steps of the `sequences` target (docs/ABI.md §20-§22, §11):
//! executables of four small graphs with state inputs, and on them state bind /
//! unbind / read / list / set_feed / feed_rows / read_output with fuzzed names,
//! dtypes, shapes, element ranges, feed kinds and row feeds (every `RlxRowFeed`
//! field); runs; clones and `share_params` between live executables and the
//! handles of dropped ones; submit and wait in any order (past
//! `RLX_MAX_SUBMITTED` too) with read, lent and skipped slots; param ranges,
//! RNG policies and active extents; memory figures. Names and output names go
//! through the raw table, so any string can be sent; what the harness keeps
//! true is the caller's side of the ABI (buffers as large as their descriptors
//! say, `dst_rows` holding `batch` rows). The steps and their biased choices
//! are in `state_inputs.rs`, the graphs in `state_graphs.rs`; this file makes
//! the calls.

#[path = "state_graphs.rs"]
mod graphs;
#[path = "state_inputs.rs"]
mod inputs;

use super::{judge, Finding, Kind, Slot};
use graphs::{graph, inputs, refs};
pub use inputs::StateStep;
use inputs::*;
use rlx_plugin_api::tables::{RlxExecutable, RlxRowFeed, RlxStateApi};
use rlx_plugin_api::tensor::{ownership, RlxTensor};
use rlx_plugin_api::{AbiStruct, DType, Feed, HostTensor, Mode, PluginResult, RlxStr, Role};
use rlx_plugin_loader::{LentBuffer, LoadedPlugin, OutputDest};
use std::ffi::c_void;
use std::sync::Arc;

/// A 1-D `BORROWED` descriptor of `buf` as `n` elements of `dtype`; the
/// caller keeps `shape` and `buf` alive over the call.
fn lent(dtype: DType, buf: &mut [u8], shape: &mut [i64; 1]) -> RlxTensor {
    shape[0] = (buf.len() / dtype.size_bytes()) as i64;
    RlxTensor::compact(
        dtype,
        buf.as_mut_ptr() as *mut c_void,
        shape.as_mut_ptr(),
        1,
        ownership::BORROWED,
    )
}

/// The state table; the caller checked the plugin offers state.
fn table(p: &LoadedPlugin) -> &RlxStateApi {
    p.raw_state().expect("offered")
}

/// The executable a step works on: below 192, the `i`-th slot holding
/// one of `state_graphs.rs`'s graphs (so that a step finds the state a setup
/// made); else slot `i` itself, a custom-op graph's included.
fn at(slots: &mut [Option<Slot>], i: u8) -> Option<&mut Slot> {
    let n = slots.len();
    if i >= 192 {
        return slots[i as usize % n].as_mut();
    }
    let ours: Vec<usize> = (0..n)
        .filter(|k| {
            matches!(
                slots[*k],
                Some(Slot {
                    kind: Kind::Graph(_),
                    ..
                })
            )
        })
        .collect();
    match ours.len() {
        0 => None,
        m => slots[ours[i as usize % m]].as_mut(),
    }
}

fn status(p: &LoadedPlugin, s: *mut rlx_plugin_api::RlxStatus) -> PluginResult<()> {
    // SAFETY: `s` was just returned by this plugin and is released once.
    unsafe { p.take_status(s) }
}

/// Run one step. `dead` holds the handles of executables this input dropped
/// (the ABI makes them INVALID_ARGUMENT in every entry that takes an
/// executable, of a plugin built with `export_plugin!`; an address reused by a
/// new executable is that executable's, and the call may succeed).
pub fn step(
    p: &Arc<LoadedPlugin>,
    s: &StateStep,
    slots: &mut [Option<Slot>],
    dead: &[*mut RlxExecutable],
) -> Result<(), Finding> {
    let o = p.offers();
    match s {
        StateStep::Compile { graph: g, mode } => {
            let mode = [Mode::Lazy, Mode::Eager][*mode as usize % 2];
            if let Some(exe) = judge("compile", p.compile(&graph(*g), mode))? {
                if let Some(free) = slots.iter_mut().find(|s| s.is_none()) {
                    *free = Some(Slot {
                        exe,
                        kind: Kind::Graph(*g % 4),
                    });
                }
            }
        }
        StateStep::Bind { slot, name, value } if o.state => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let name = name.state(&sl.exe);
            let t = value.tensor(&sl.exe, &name);
            let view = t.as_raw(ownership::BORROWED);
            // SAFETY: a live executable; name and value borrowed for the call.
            let st = unsafe {
                (table(p).bind.unwrap())(sl.exe.raw_handle(), RlxStr::from_str(&name), &view.raw)
            };
            judge("state bind", status(p, st))?;
        }
        StateStep::Unbind { slot, name } if o.state => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            // SAFETY: a live executable; the name borrowed for the call.
            let st = unsafe {
                (table(p).unbind.unwrap())(
                    sl.exe.raw_handle(),
                    RlxStr::from_str(&name.state(&sl.exe)),
                )
            };
            judge("state unbind", status(p, st))?;
        }
        StateStep::Read {
            slot,
            name,
            first,
            n,
            dtype,
        } if o.state => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let name = name.state(&sl.exe);
            let dtype = pick_dtype(&sl.exe, Role::Input, &name, *dtype);
            let mut buf = vec![0u8; (*n as usize % 9) * dtype.size_bytes()];
            let mut shape = [0i64];
            let mut into = lent(dtype, &mut buf, &mut shape);
            // SAFETY: a live executable; `into` describes `buf`, writable.
            let st = unsafe {
                (table(p).read.unwrap())(
                    sl.exe.raw_handle(),
                    RlxStr::from_str(&name),
                    first.get(),
                    &mut into,
                )
            };
            judge("state read", status(p, st))?;
        }
        StateStep::Setup { slot, fill } if o.state => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            // Its params first (bound whole, so runs and ranges work).
            let params: Vec<_> = sl.exe.values(Role::Param).cloned().collect();
            for v in params {
                let Some(shape) = v.shape.iter().copied().collect::<Option<Vec<_>>>() else {
                    continue;
                };
                let n: usize = shape.iter().product();
                let t =
                    HostTensor::new(v.dtype, shape, vec![*fill & 0x3f; n * v.dtype.size_bytes()])
                        .expect("sized");
                judge("setup bind_param", sl.exe.bind_param(&v.name, &t))?;
            }
            let name = state_input(&sl.exe);
            let t = Value::Fits { fill: *fill }.tensor(&sl.exe, &name);
            if judge("setup bind", sl.exe.state_bind(&name, (&t).into()))?.is_some() {
                let feed = if name == "k" {
                    Feed::Rows(0)
                } else {
                    Feed::Replace(0)
                };
                judge("setup set_feed", sl.exe.state_set_feed(&name, feed))?;
            }
        }
        StateStep::List { slot } if o.state => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            if let Some(list) = judge("state list", sl.exe.state_list())? {
                if list.iter().any(|v| v.role != Role::State) {
                    return Err(Finding(format!(
                        "a state listed with another role: {list:?}"
                    )));
                }
            }
        }
        StateStep::SetFeed {
            slot,
            name,
            kind,
            output,
        } if o.state => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            // SAFETY: a live executable; names borrowed for the call.
            let st = unsafe {
                (table(p).set_feed.unwrap())(
                    sl.exe.raw_handle(),
                    RlxStr::from_str(&name.state(&sl.exe)),
                    *kind as u32 % 5,
                    RlxStr::from_str(&output.output(&sl.exe)),
                )
            };
            judge("state set_feed", status(p, st))?;
        }
        StateStep::FeedRows { slot, name, rows } if o.row_feeds => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let name = name.as_ref().map_or(String::new(), |n| n.state(&sl.exe));
            feed_rows(p, sl, &name, rows)?;
        }
        StateStep::ReadOutput {
            slot,
            output,
            first,
            n,
            dtype,
        } if o.state => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let output = output.output(&sl.exe);
            let dtype = pick_dtype(&sl.exe, Role::Output, &output, *dtype);
            let mut buf = vec![0u8; (*n as usize % 9) * dtype.size_bytes()];
            let mut shape = [0i64];
            let mut into = lent(dtype, &mut buf, &mut shape);
            // SAFETY: a live executable; `into` describes `buf`, writable.
            let st = unsafe {
                (table(p).read_output.unwrap())(
                    sl.exe.raw_handle(),
                    RlxStr::from_str(&output),
                    first.get(),
                    &mut into,
                )
            };
            judge("state read_output", status(p, st))?;
        }
        StateStep::Run {
            slot,
            give_state,
            wrong,
        } => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let Kind::Graph(g) = sl.kind else {
                return Ok(());
            };
            let ins = inputs(g, *give_state, *wrong);
            judge("run", sl.exe.run_refs(&refs(&ins)))?;
        }
        StateStep::Clone { slot } if o.clone => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let kind = sl.kind;
            if let Some(exe) = judge("clone", sl.exe.clone_executable())? {
                if let Some(free) = slots.iter_mut().find(|s| s.is_none()) {
                    *free = Some(Slot { exe, kind });
                }
            }
        }
        StateStep::Share { dst, src } if o.share_params => share(p, slots, *dst, *src)?,
        StateStep::Dead {
            slot,
            dead: d,
            call,
        } => {
            if dead.is_empty() {
                return Ok(());
            }
            let h = dead[*d as usize % dead.len()];
            let live = at(slots, *slot).map(|s| s.exe.raw_handle());
            dead_call(p, h, live, *call)?;
        }
        StateStep::Submit {
            slot,
            give_state,
            wrong,
            times,
        } if o.submit => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let Kind::Graph(g) = sl.kind else {
                return Ok(());
            };
            let ins = inputs(g, *give_state, *wrong);
            // Up to 70: past RLX_MAX_SUBMITTED (64) when asked.
            for _ in 0..=(*times % 71) {
                if judge("submit", sl.exe.submit(&refs(&ins)))?.is_none() {
                    break;
                }
            }
        }
        StateStep::Wait { slot, how } if o.submit => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            wait(sl, *how)?;
        }
        StateStep::ParamRange {
            slot,
            name,
            offset,
            len,
        } if o.param_range => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let f = p.raw_api().executable_bind_param_range.expect("offered");
            let data = vec![0x3cu8; *len as usize % 40];
            // SAFETY: a live executable; name and data borrowed for the call.
            let st = unsafe {
                f(
                    sl.exe.raw_handle(),
                    RlxStr::from_str(&name.param(&sl.exe)),
                    offset.get(),
                    data.as_ptr() as *const c_void,
                    data.len(),
                )
            };
            judge("bind_param_range", status(p, st))?;
        }
        StateStep::SetRng { slot, policy, seed } if o.set_rng => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            judge("set_rng", sl.exe.set_rng(*policy as u32 % 6, *seed))?;
        }
        StateStep::SetExtent {
            slot,
            active,
            upper,
        } if o.active_extent => {
            let Some(sl) = at(slots, *slot) else {
                return Ok(());
            };
            let f = p.raw_api().executable_set_active_extent.expect("offered");
            // SAFETY: a live executable.
            let st = unsafe { f(sl.exe.raw_handle(), active.get(), upper.get()) };
            judge("set_active_extent", status(p, st))?;
        }
        StateStep::Memory if o.memory_usage => {
            judge("memory_usage", p.memory_usage())?;
        }
        _ => {}
    }
    Ok(())
}

fn feed_rows(p: &LoadedPlugin, sl: &mut Slot, name: &str, r: &Rows) -> Result<(), Finding> {
    let batch = r.batch.get();
    // The caller's promise: `dst_rows` holds `batch` rows.
    let dst_rows: Option<Vec<u64>> = r.dst_rows.as_ref().filter(|_| batch <= 64).map(|v| {
        (0..batch as usize)
            .map(|i| v.get(i).copied().unwrap_or(0) as u64 % 6)
            .collect()
    });
    let raw = RlxRowFeed {
        // A short struct_size (still readable: the struct is whole).
        struct_size: if r.short == 255 {
            RlxRowFeed::STRUCT_SIZE - 8
        } else {
            RlxRowFeed::STRUCT_SIZE
        },
        row_elems: r.row_elems.get(),
        n_rows: r.n_rows.get(),
        src_row: r.src_row.get(),
        dst_row: r.dst_row.get(),
        batch,
        src_batch_rows: r.src_batch_rows.get(),
        dst_batch_rows: r.dst_batch_rows.get(),
        dst_rows: dst_rows.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()),
    };
    // SAFETY: a live executable; the feed and its dst_rows borrowed for the call.
    let st =
        unsafe { (table(p).feed_rows.unwrap())(sl.exe.raw_handle(), RlxStr::from_str(name), &raw) };
    judge("state feed_rows", status(p, st)).map(drop)
}

/// `dst` takes `src`'s params: through the host library between two
/// slots, through the raw table when they are the same slot (the host
/// library cannot express it).
fn share(p: &LoadedPlugin, slots: &mut [Option<Slot>], dst: u8, src: u8) -> Result<(), Finding> {
    let n = slots.len();
    let (d, s) = (dst as usize % n, src as usize % n);
    if d == s {
        let Some(sl) = slots[d].as_mut() else {
            return Ok(());
        };
        let f = p
            .raw_sharing()
            .and_then(|t| t.share_params)
            .expect("offered");
        let h = sl.exe.raw_handle();
        let mut k = 0usize;
        // SAFETY: a live executable as both; `k` is writable.
        let st = unsafe { f(h, h, &mut k) };
        return judge("share_params with itself", status(p, st)).map(drop);
    }
    let Some(mut taken) = slots[d].take() else {
        return Ok(());
    };
    let r = match slots[s].as_ref() {
        Some(src) => judge("share_params", taken.exe.share_params_from(&src.exe)).map(drop),
        None => Ok(()),
    };
    slots[d] = Some(taken);
    r
}

/// Call an entry with a dropped executable's handle: `share_params` with
/// it as `src`, `clone`, the state's `list`. Only entries that read it: a
/// reused address may be another thread's executable when the corpus is
/// replayed among other tests, and that one's params and runs are not
/// this harness's to change.
fn dead_call(
    p: &LoadedPlugin,
    h: *mut RlxExecutable,
    live: Option<*mut RlxExecutable>,
    call: u8,
) -> Result<(), Finding> {
    let mut n = 0usize;
    let sharing = p.raw_sharing();
    // SAFETY: every entry of a plugin built with export_plugin! that takes an
    // executable refuses a handle that is not one of its live executables.
    let st = unsafe {
        match (call % 3, sharing, live) {
            (0, Some(t), Some(l)) if t.share_params.is_some() => {
                (t.share_params.unwrap())(l, h, &mut n)
            }
            (1, Some(t), _) if t.clone.is_some() => {
                let mut out: *mut RlxExecutable = std::ptr::null_mut();
                let st = (t.clone.unwrap())(h, &mut out);
                // A reused address is a live executable: its clone is ours.
                (p.raw_api().executable_destroy.unwrap())(out);
                st
            }
            (2, _, _) if p.raw_state().is_some() => (table(p).list.unwrap())(h, std::ptr::null()),
            _ => return Ok(()),
        }
    };
    judge("a call on a dropped executable", status(p, st)).map(drop)
}

/// Wait with the outputs dropped, read, skipped, mixed, or lent where the
/// signature fixes their shape.
fn wait(sl: &mut Slot, how: u8) -> Result<(), Finding> {
    let outs: Vec<(DType, Option<usize>)> = sl
        .exe
        .values(Role::Output)
        .map(|v| {
            let n: Option<usize> = v.shape.iter().copied().product();
            (v.dtype, n)
        })
        .collect();
    if how.is_multiple_of(5) {
        return judge("wait", sl.exe.wait_discard()).map(drop);
    }
    let mut bufs: Vec<Vec<u8>> = outs
        .iter()
        .map(|(d, n)| vec![0u8; n.unwrap_or(0) * d.size_bytes()])
        .collect();
    let dests: Vec<OutputDest> = outs
        .iter()
        .zip(bufs.iter_mut())
        .enumerate()
        .map(|(i, ((_, n), b))| match (how % 5, i % 2) {
            (1, _) => OutputDest::Read,
            (2, _) => OutputDest::Skip,
            (3, 0) => OutputDest::Skip,
            (3, _) => OutputDest::Read,
            _ if n.is_some() => OutputDest::Lend(LentBuffer {
                ptr: b.as_mut_ptr(),
                len: b.len(),
            }),
            _ => OutputDest::Read,
        })
        .collect();
    // SAFETY: each lent buffer is one of `bufs`, alive and unaliased for the call.
    let r = unsafe { sl.exe.wait_dest_raw(&dests, |t| Ok(t.shape.to_vec())) };
    judge("wait", r).map(drop)
}
