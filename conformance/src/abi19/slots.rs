//! (docs/ABI.md §11) An output slot of `executable_run_into` marked
//! `RLX_OWNERSHIP_SKIP` (data null) asks for nothing: the run succeeds, the
//! slot is left exactly as it was, the other outputs come as asked, and a state
//! fed from the skipped output still sees it. Called through the raw table: the
//! host library releases whatever a plugin hands over in a skipped slot, which
//! would hide it.

use super::state::with_state;
use super::util::*;
use crate::raw::release_slots;
use crate::{Kit, Outcome};
use rlx_plugin_api::tensor::{borrow_named, ownership, RlxTensor, TensorRef};
use rlx_plugin_api::{Feed, HostTensor, Mode};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

pub(super) fn run(kit: &mut Kit, state: bool) {
    kit.record(
        "skipped slots: run_into leaves a skipped slot as it was",
        |p| match counter_exe(p, Mode::Lazy) {
            Ok(exe) => {
                let (x, s) = (fill(1.0), fill(2.0));
                let r = run_into(p, exe.raw_handle(), &[("x", &x), ("s", &s)], 1);
                check(r, &[3.0; 6])
            }
            Err(e) => Outcome::Fail(e),
        },
    );
    if state {
        kit.record(
            "skipped slots: a state fed from a skipped output sees it",
            |p| {
                let exe = match with_state(p, Mode::Lazy, &fill(1.0), Feed::Replace(0)) {
                    Ok(e) => e,
                    Err(e) => return Outcome::Fail(e),
                };
                let x = fill(2.0);
                // next = 3 (skipped), y = 3 + w (read); then the state is 3.
                let want: Vec<f32> = values(&w()).iter().map(|v| v + 3.0).collect();
                match check(run_into(p, exe.raw_handle(), &[("x", &x)], 0), &want) {
                    Outcome::Ok => match read_state(&exe, "s", 0, 6) {
                        Ok(v) if v == [3.0; 6] => Outcome::Ok,
                        Ok(v) => {
                            Outcome::Fail(format!("the state after the run is {v:?}, expected 3s"))
                        }
                        Err(e) => Outcome::Fail(e),
                    },
                    o => o,
                }
            },
        );
    }
}

/// The two slots after a `run_into` with slot `skip` skipped and the
/// other empty, or the failure.
fn run_into(
    p: &Arc<LoadedPlugin>,
    exe: *mut rlx_plugin_api::tables::RlxExecutable,
    inputs: &[(&str, &HostTensor)],
    skip: usize,
) -> Result<(usize, [RlxTensor; 2]), String> {
    let f = p.raw_api().executable_run_into.expect("offered");
    let borrowed = borrow_named(inputs);
    let mut slots = [RlxTensor::empty(), RlxTensor::empty()];
    slots[skip].ownership = ownership::SKIP;
    // SAFETY: a live executable; inputs borrowed for the call; two slots,
    // the counter's output count.
    let s = unsafe {
        f(
            exe,
            borrowed.named.as_ptr(),
            borrowed.named.len(),
            slots.as_mut_ptr(),
            2,
        )
    };
    raw_ok(p, s, "run_into").map(|()| (skip, slots))
}

/// The skipped slot untouched, the other an OWNED tensor of `want`; every
/// slot released.
fn check(r: Result<(usize, [RlxTensor; 2]), String>, want: &[f32]) -> Outcome {
    let (skip, slots) = match r {
        Ok(x) => x,
        Err(e) => return Outcome::Fail(e),
    };
    let skipped = slots[skip];
    let other = slots[1 - skip];
    let untouched = skipped.ownership == ownership::SKIP
        && skipped.dl.data.is_null()
        && skipped.deleter.is_none()
        && skipped.manager_ctx.is_null();
    // SAFETY: a slot the plugin filled (OWNED), read before its release.
    let got = unsafe { TensorRef::from_raw(&other) }
        .and_then(|t| rlx_plugin_api::convert::bytes_to_f32(t.dtype, &t.compact_cow()?));
    let owned = other.ownership == ownership::OWNED;
    release_slots(slots.to_vec());
    if !untouched {
        return Outcome::Fail(format!(
            "the skipped slot {skip} was written (ownership {}, data {:p})",
            skipped.ownership, skipped.dl.data
        ));
    }
    if !owned {
        return Outcome::Fail(format!(
            "output {} came back with ownership {}",
            1 - skip,
            other.ownership
        ));
    }
    match got {
        Ok(v) => same(&format!("output {}", 1 - skip), &v, want).into(),
        Err(e) => Outcome::Fail(format!("output {}: {e}", 1 - skip)),
    }
}
