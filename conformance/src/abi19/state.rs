//! (docs/ABI.md §20) Executable state with exact values: bound, listed, read
//! whole and in part, fed `REPLACE` in every mode, overridden by a given input
//! for one run, the last run's outputs read back, unbound; a failed run applies
//! no feed. Row feeds are in `rows`.

use super::util::*;
use crate::graphs::COUNTER;
use crate::Kit;
use rlx_plugin_api::{DType, Feed, HostTensorRef, Mode, Role, ValueInfo};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::sync::Arc;

const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];

pub(super) fn run(kit: &mut Kit) {
    for mode in MODES {
        kit.record(
            format!("state {}: REPLACE feed keeps a running sum", mode.name()),
            |p| replace_feed(p, mode).into(),
        );
    }
    kit.record("state: bind, list, bind again", |p| bind_list(p).into());
    kit.record("state: read whole and in part", |p| read_parts(p).into());
    kit.record("state: a given input overrides it for one run", |p| {
        overrides(p).into()
    });
    kit.record("state: read_output reads the last run's outputs", |p| {
        read_output(p).into()
    });
    kit.record("state: unbind gives the input back", |p| unbind(p).into());
    kit.record("state: a failed run applies no feed", |p| {
        failed_run(p).into()
    });
}

/// The counter with `s` bound to `value` (and fed `feed`).
pub(super) fn with_state(
    p: &Arc<LoadedPlugin>,
    mode: Mode,
    value: &rlx_plugin_api::HostTensor,
    feed: Feed,
) -> Result<PluginExecutable, String> {
    let mut exe = counter_exe(p, mode)?;
    exe.state_bind("s", HostTensorRef::from(value))
        .map_err(|e| format!("state bind \"s\": {e}"))?;
    if feed != Feed::None {
        exe.state_set_feed("s", feed)
            .map_err(|e| format!("set_feed \"s\" {feed:?}: {e}"))?;
    }
    Ok(exe)
}

/// Three runs of `x`: `next` is `x * step`, `y` is `next + w`, and the
/// state after each run is `next`, read back.
fn replace_feed(p: &Arc<LoadedPlugin>, mode: Mode) -> Result<(), String> {
    let mut exe = with_state(p, mode, &fill(0.0), Feed::Replace(0))?;
    let x = ramp(1.0);
    for step in 1..=3 {
        let out = exec(&mut exe, &[("x", &x)])?;
        let next: Vec<f32> = values(&x).iter().map(|v| v * step as f32).collect();
        same(&format!("step {step}: next"), &out[0], &next)?;
        same(
            &format!("step {step}: y"),
            &out[1],
            &plus(&next, &values(&w())),
        )?;
        same(
            &format!("step {step}: the state"),
            &read_state(&exe, "s", 0, 6)?,
            &next,
        )?;
    }
    Ok(())
}

/// `list` shows the one state as the input it holds; binding again
/// replaces the value and keeps the feed.
fn bind_list(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = with_state(p, Mode::Lazy, &ramp(0.0), Feed::Replace(0))?;
    let list = exe.state_list().map_err(|e| format!("list: {e}"))?;
    let want = ValueInfo {
        role: Role::State,
        name: "s".into(),
        dtype: DType::F32,
        shape: COUNTER.iter().map(|d| Some(*d)).collect(),
    };
    if list != [want.clone()] {
        return Err(format!("list gives {list:?}, expected [{want:?}]"));
    }
    exe.state_bind("s", HostTensorRef::from(&ramp(5.0)))
        .map_err(|e| format!("binding again: {e}"))?;
    same(
        "the state bound again",
        &read_state(&exe, "s", 0, 6)?,
        &values(&ramp(5.0)),
    )?;
    let out = exec(&mut exe, &[("x", &fill(1.0))])?;
    same("next", &out[0], &values(&ramp(6.0)))?;
    same(
        "the state after a run (the feed was kept)",
        &read_state(&exe, "s", 0, 6)?,
        &values(&ramp(6.0)),
    )
}

fn read_parts(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let exe = with_state(p, Mode::Lazy, &ramp(0.0), Feed::None)?;
    same(
        "elements 0..6",
        &read_state(&exe, "s", 0, 6)?,
        &[0., 1., 2., 3., 4., 5.],
    )?;
    same("elements 3..5", &read_state(&exe, "s", 3, 2)?, &[3., 4.])?;
    same("element 5", &read_state(&exe, "s", 5, 1)?, &[5.])
}

/// With no feed, a run given `s` uses it, and the next run the state again.
fn overrides(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = with_state(p, Mode::Lazy, &fill(1.0), Feed::None)?;
    let x = fill(1.0);
    let out = exec(&mut exe, &[("x", &x), ("s", &fill(10.0))])?;
    same("next with s given", &out[0], &[11.0; 6])?;
    let out = exec(&mut exe, &[("x", &x)])?;
    same("next from the state again", &out[0], &[2.0; 6])?;
    same("the state", &read_state(&exe, "s", 0, 6)?, &[1.0; 6])
}

/// Elements of both outputs of the last run, by name, without the rest.
fn read_output(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = with_state(p, Mode::Lazy, &fill(1.0), Feed::None)?;
    exec(&mut exe, &[("x", &ramp(0.0))])?;
    let next = values(&ramp(1.0));
    let y = plus(&next, &values(&w()));
    same("output next", &output(&exe, 0, 0, 6)?, &next)?;
    same("output y elements 4..6", &output(&exe, 1, 4, 2)?, &y[4..6])
}

pub(super) fn output(
    exe: &PluginExecutable,
    i: usize,
    first: usize,
    n: usize,
) -> Result<Vec<f32>, String> {
    let mut buf = vec![0u8; n * 4];
    exe.output_read_into(i, first, DType::F32, &mut buf)
        .map_err(|e| format!("read_output {i}: {e}"))?;
    rlx_plugin_api::convert::bytes_to_f32(DType::F32, &buf).map_err(|e| e.to_string())
}

fn unbind(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = with_state(p, Mode::Lazy, &fill(1.0), Feed::Replace(0))?;
    exe.state_unbind("s").map_err(|e| format!("unbind: {e}"))?;
    let list = exe.state_list().map_err(|e| format!("list: {e}"))?;
    if !list.is_empty() {
        return Err(format!("after unbind the list is {list:?}"));
    }
    match exe.run(&[("x", &fill(1.0))]) {
        Ok(_) => return Err("a run without s succeeded after unbind".into()),
        Err(e) if e.code == INVALID => {}
        Err(e) => return Err(format!("a run without s: {e}; expected INVALID_ARGUMENT")),
    }
    let out = exec(&mut exe, &[("x", &fill(1.0)), ("s", &fill(2.0))])?;
    same("next with s given", &out[0], &[3.0; 6])
}

/// A run refused (an input of another shape) leaves a `REPLACE` state as
/// it was.
fn failed_run(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = with_state(p, Mode::Lazy, &fill(4.0), Feed::Replace(0))?;
    let wrong = f32s(&[3, 2], &[1.0; 6]);
    if exe.run(&[("x", &wrong)]).is_ok() {
        return Err("a run with x of shape [3, 2] succeeded".into());
    }
    same(
        "the state after the failed run",
        &read_state(&exe, "s", 0, 6)?,
        &[4.0; 6],
    )?;
    let out = exec(&mut exe, &[("x", &fill(1.0))])?;
    same("next", &out[0], &[5.0; 6])
}
