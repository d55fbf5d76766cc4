//! (docs/ABI.md §22) Submitted runs: their results equal synchronous runs
//! (read, lent and skipped slots), each reads the state the one before made, a
//! synchronous run between them runs after them; a wait with nothing submitted
//! is `INVALID_ARGUMENT`, a bad input is refused at `submit` and queues
//! nothing, the `RLX_MAX_SUBMITTED + 1`-th run is `RESOURCE_EXHAUSTED`, and
//! destroying with runs in flight drops them.

use super::util::*;
use crate::{expect_err, Kit};
use rlx_plugin_api::tables::MAX_SUBMITTED;
use rlx_plugin_api::{Feed, HostTensor, HostTensorRef, Mode, PluginResult, StatusCode};
use rlx_plugin_loader::{LentBuffer, LoadedPlugin, OutputDest, PluginExecutable};
use std::sync::Arc;

pub(super) fn run(kit: &mut Kit, state: bool) {
    kit.record("submit: results equal synchronous runs", |p| {
        equal_sync(p, state).into()
    });
    if state {
        kit.record(
            "submit: a synchronous run runs after the submitted ones",
            |p| sync_after(p).into(),
        );
    }
    kit.record(
        "submit: wait with nothing submitted",
        |p| match counter_exe(p, Mode::Lazy) {
            Ok(mut exe) => expect_err(exe.wait_discard(), &[INVALID]),
            Err(e) => crate::Outcome::Fail(e),
        },
    );
    kit.record("submit: a bad input is refused and queues nothing", |p| {
        bad_input(p).into()
    });
    kit.record(
        format!("submit: {MAX_SUBMITTED} in flight, one more RESOURCE_EXHAUSTED"),
        |p| limit(p).into(),
    );
    kit.record("submit: destroy with runs in flight", |p| {
        let r = (|| {
            let mut exe = counter_exe(p, Mode::Lazy)?;
            submit(&mut exe, 1.0, false)?;
            submit(&mut exe, 2.0, false)?;
            drop(exe);
            Ok::<(), String>(())
        })();
        r.into()
    });
}

/// The counter, its state (when offered) at zero and fed back.
fn chained(p: &Arc<LoadedPlugin>, state: bool) -> Result<PluginExecutable, String> {
    if !state {
        return counter_exe(p, Mode::Lazy);
    }
    super::state::with_state(p, Mode::Lazy, &fill(0.0), Feed::Replace(0))
}

/// Submit the counter with `x` filled with `v` (and `s` given, without state).
fn submit_r(exe: &mut PluginExecutable, v: f32, state: bool) -> PluginResult<()> {
    let x = fill(v);
    let s = fill(1.0);
    let mut inputs = vec![("x", HostTensorRef::from(&x))];
    if !state {
        inputs.push(("s", HostTensorRef::from(&s)));
    }
    exe.submit(&inputs)
}

fn submit(exe: &mut PluginExecutable, v: f32, state: bool) -> Result<(), String> {
    submit_r(exe, v, state).map_err(|e| format!("submit: {e}"))
}

fn sync_run(exe: &mut PluginExecutable, v: f32, state: bool) -> Result<Vec<Vec<f32>>, String> {
    let (x, s) = (fill(v), fill(1.0));
    if state {
        exec(exe, &[("x", &x)])
    } else {
        exec(exe, &[("x", &x), ("s", &s)])
    }
}

/// Wait with output 0 read and output 1 skipped, or output 0 lent and
/// output 1 read: (next, y) as far as they came back.
fn wait(exe: &mut PluginExecutable, lend: bool) -> Result<(Vec<f32>, Option<Vec<f32>>), String> {
    let mut buf = vec![0xABu8; 24];
    let dests = if lend {
        [
            OutputDest::Lend(LentBuffer {
                ptr: buf.as_mut_ptr(),
                len: buf.len(),
            }),
            OutputDest::Read,
        ]
    } else {
        [OutputDest::Read, OutputDest::Skip]
    };
    // SAFETY: the lent buffer is `buf`, alive and unaliased for the call.
    let got = unsafe {
        exe.wait_dest_raw(&dests, |t| {
            rlx_plugin_api::convert::bytes_to_f32(t.dtype, &t.compact_cow()?)
        })
    }
    .map_err(|e| format!("wait: {e}"))?;
    if got.len() != 2 {
        return Err(format!("wait gave {} outputs", got.len()));
    }
    let (a, b) = (got[0].clone(), got[1].clone());
    match (lend, a, b) {
        (false, Some(next), None) => Ok((next, None)),
        (false, _, Some(_)) => Err("the skipped output was handed over".into()),
        (true, None, Some(y)) => {
            let next = rlx_plugin_api::convert::bytes_to_f32(rlx_plugin_api::DType::F32, &buf)
                .map_err(|e| e.to_string())?;
            Ok((next, Some(y)))
        }
        _ => Err("wait left out an output it was asked for".into()),
    }
}

/// Five runs submitted at once, then five waits, against five
/// synchronous runs of a twin executable.
fn equal_sync(p: &Arc<LoadedPlugin>, state: bool) -> Result<(), String> {
    let mut sync = chained(p, state)?;
    let mut subm = chained(p, state)?;
    let xs = [1.0, -2.0, 3.0, 0.5, 4.0];
    let want: Vec<Vec<Vec<f32>>> = xs
        .iter()
        .map(|v| sync_run(&mut sync, *v, state))
        .collect::<Result<_, _>>()?;
    for v in xs {
        submit(&mut subm, v, state)?;
    }
    for (i, w) in want.iter().enumerate() {
        let (next, y) = wait(&mut subm, i % 2 == 1)?;
        same(&format!("run {i}: next"), &next, &w[0])?;
        if let Some(y) = y {
            same(&format!("run {i}: y"), &y, &w[1])?;
        }
    }
    if state {
        same(
            "the state after the runs",
            &read_state(&subm, "s", 0, 6)?,
            &read_state(&sync, "s", 0, 6)?,
        )?;
    }
    Ok(())
}

/// `submit(x = 1)`, then a synchronous run of `x = 2`: it reads the
/// state the submitted run made (1), so its `next` is 3; the wait then
/// takes the submitted run's `next`, 1.
fn sync_after(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = chained(p, true)?;
    submit(&mut exe, 1.0, true)?;
    let out = sync_run(&mut exe, 2.0, true)?;
    same("the synchronous run's next", &out[0], &[3.0; 6])?;
    let (next, _) = wait(&mut exe, false)?;
    same("the submitted run's next", &next, &[1.0; 6])?;
    same("the state", &read_state(&exe, "s", 0, 6)?, &[3.0; 6])
}

fn bad_input(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = counter_exe(p, Mode::Lazy)?;
    let wrong = HostTensor::from_f32(vec![3, 2], &[1.0; 6]).expect("six elements");
    let s = fill(1.0);
    match exe.submit(&[("x", (&wrong).into()), ("s", (&s).into())]) {
        Err(e) if e.code == INVALID => {}
        Err(e) => {
            return Err(format!(
                "submit with x of shape [3, 2]: {e}; expected INVALID_ARGUMENT"
            ))
        }
        Ok(()) => return Err("submit with x of shape [3, 2] succeeded".into()),
    }
    match exe.wait_discard() {
        Err(e) if e.code == INVALID => Ok(()),
        Err(e) => Err(format!(
            "wait after the refused submit: {e}; expected INVALID_ARGUMENT"
        )),
        Ok(()) => Err("the refused submit queued a run".into()),
    }
}

/// `MAX_SUBMITTED` runs queue; one more is refused; every queued one can
/// be waited for, and then nothing is left.
fn limit(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = counter_exe(p, Mode::Lazy)?;
    for i in 0..MAX_SUBMITTED {
        submit(&mut exe, i as f32, false).map_err(|e| format!("run {i}: {e}"))?;
    }
    match submit_r(&mut exe, 0.0, false) {
        Ok(()) => {
            return Err(format!(
                "run {} of at most {MAX_SUBMITTED} was accepted",
                MAX_SUBMITTED + 1
            ))
        }
        Err(e) if e.code == StatusCode::ResourceExhausted => {}
        Err(e) => {
            return Err(format!(
                "run {}: {e}; expected RESOURCE_EXHAUSTED",
                MAX_SUBMITTED + 1
            ))
        }
    }
    for i in 0..MAX_SUBMITTED {
        exe.wait_discard().map_err(|e| format!("wait {i}: {e}"))?;
    }
    match exe.wait_discard() {
        Err(e) if e.code == INVALID => Ok(()),
        Err(e) => Err(format!("one wait too many: {e}; expected INVALID_ARGUMENT")),
        Ok(()) => Err(format!(
            "{} waits succeeded after {MAX_SUBMITTED} submits",
            MAX_SUBMITTED + 1
        )),
    }
}
