//! (docs/ABI.md §20 `bind_from`) A state taken from another executable on the
//! device: from its last run's output, from its state, every state with its
//! feed at once; each executable then replaces its own value as it runs; a
//! value that is not there, or of another shape, is refused and changes
//! nothing.

use super::util::*;
use crate::Kit;
use rlx_plugin_api::{Feed, HostTensorRef, Mode, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

pub(super) fn run(kit: &mut Kit) {
    kit.record("bind_from: a state from another executable's output", |p| {
        from_output(p).into()
    });
    kit.record("bind_from: from a state, then each its own", |p| {
        from_state(p).into()
    });
    kit.record("bind_from: every state with its feed", |p| {
        take_all(p).into()
    });
    kit.record("bind_from: refusals change nothing", |p| refusals(p).into());
}

fn fails(r: rlx_plugin_api::PluginResult<()>, code: StatusCode, what: &str) -> Result<(), String> {
    match r {
        Ok(()) => Err(format!("{what}: accepted")),
        Err(e) if e.code == code => Ok(()),
        Err(e) => Err(format!("{what}: {:?} ({e}), not {code:?}", e.code)),
    }
}

/// `a` runs once with `s` given (next = x + s); `b` holds a's `next`.
fn from_output(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut a = counter_exe(p, Mode::Lazy)?;
    exec(&mut a, &[("x", &ramp(1.0)), ("s", &fill(5.0))])?;
    let mut b = counter_exe(p, Mode::Lazy)?;
    b.state_bind_from("s", Some(&a), "next")
        .map_err(|e| format!("bind_from \"next\": {e}"))?;
    same(
        "b's state",
        &read_state(&b, "s", 0, 6)?,
        &plus(&values(&ramp(1.0)), &values(&fill(5.0))),
    )
}

fn from_state(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut a = super::state::with_state(p, Mode::Lazy, &fill(2.0), Feed::Replace(0))?;
    let mut b = counter_exe(p, Mode::Lazy)?;
    b.state_bind_from("s", Some(&a), "s")
        .map_err(|e| format!("bind_from \"s\": {e}"))?;
    exec(&mut a, &[("x", &fill(1.0))])?;
    same(
        "b's state after a ran",
        &read_state(&b, "s", 0, 6)?,
        &values(&fill(2.0)),
    )?;
    same("a's own", &read_state(&a, "s", 0, 6)?, &values(&fill(3.0)))
}

fn take_all(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let a = super::state::with_state(p, Mode::Lazy, &fill(2.0), Feed::Replace(0))?;
    let mut b = counter_exe(p, Mode::Lazy)?;
    b.state_bind_from("", Some(&a), "")
        .map_err(|e| format!("bind_from every state: {e}"))?;
    let out = exec(&mut b, &[("x", &fill(1.0))])?;
    same("next", &out[0], &values(&fill(3.0)))?;
    same(
        "b's state, fed",
        &read_state(&b, "s", 0, 6)?,
        &values(&fill(3.0)),
    )
}

fn refusals(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut a = counter_exe(p, Mode::Lazy)?;
    exec(&mut a, &[("x", &ramp(1.0)), ("s", &fill(0.0))])?;
    let mut b = counter_exe(p, Mode::Lazy)?;
    b.state_bind("s", HostTensorRef::from(&fill(7.0)))
        .map_err(|e| format!("bind: {e}"))?;
    fails(
        b.state_bind_from("s", Some(&a), "nope"),
        StatusCode::NotFound,
        "an unknown value",
    )?;
    fails(
        b.state_bind_from("nope", Some(&a), "next"),
        StatusCode::NotFound,
        "an unknown input",
    )?;
    let fresh = counter_exe(p, Mode::Lazy)?;
    fails(
        b.state_bind_from("s", Some(&fresh), "next"),
        StatusCode::InvalidArgument,
        "an output before any run",
    )?;
    same(
        "b's state",
        &read_state(&b, "s", 0, 6)?,
        &values(&fill(7.0)),
    )
}
