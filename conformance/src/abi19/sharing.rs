//! (docs/ABI.md §21) Clones and shared params: a clone starts with a copy of
//! the state and shares the params, then goes its own way; `share_params` makes
//! `dst` read `src`'s params, refuses a mismatch without changing anything, and
//! refuses handles that are not live executables of the plugin (a destroyed one
//! is passed to the raw table: the ABI makes that `INVALID_ARGUMENT`, never a
//! crash).

use super::util::*;
use crate::graphs::{counter, rows};
use crate::{Kit, Outcome};
use rlx_plugin_api::tables::RlxExecutable;
use rlx_plugin_api::{Feed, HostTensorRef, Mode};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::ptr::{null, null_mut};
use std::sync::Arc;

pub(super) fn run_clone(kit: &mut Kit, state: bool) {
    kit.record("clone: copies the state, shares the params", |p| {
        copies(p, state).into()
    });
    kit.record("clone: goes its own way after", |p| independent(p).into());
    kit.record("clone: of a destroyed executable", |p| {
        let f = p.raw_sharing().and_then(|t| t.clone).expect("offered");
        let h = match destroyed(p) {
            Ok(h) => h,
            Err(e) => return Outcome::Fail(e),
        };
        let mut out: *mut RlxExecutable = null_mut();
        // SAFETY: the ABI makes a handle that is not live INVALID_ARGUMENT.
        let s = unsafe { f(h, &mut out) };
        let o = raw_expect(p, s, INVALID);
        if !out.is_null() {
            return Outcome::Fail("the refused clone wrote an executable".into());
        }
        o
    });
    kit.record("clone: NULL out", |p| {
        let f = p.raw_sharing().and_then(|t| t.clone).expect("offered");
        match counter_exe(p, Mode::Lazy) {
            // SAFETY: a live executable; the null out is under test.
            Ok(exe) => raw_expect(p, unsafe { f(exe.raw_handle(), null_mut()) }, INVALID),
            Err(e) => Outcome::Fail(e),
        }
    });
}

pub(super) fn run_share(kit: &mut Kit) {
    kit.record("share_params: dst reads src's params", |p| shares(p).into());
    kit.record(
        "share_params: a mismatch is refused, nothing changed",
        |p| mismatch(p).into(),
    );
    kit.record(
        "share_params: handles that are not live executables",
        not_live,
    );
}

/// The handle of a counter executable, destroyed.
fn destroyed(p: &Arc<LoadedPlugin>) -> Result<*mut RlxExecutable, String> {
    let exe = counter_exe(p, Mode::Lazy)?;
    Ok(exe.raw_handle())
}

/// A run of the counter with `x` and (when no state holds it) `s`.
fn step(exe: &mut PluginExecutable, x: f32, s: Option<f32>) -> Result<Vec<Vec<f32>>, String> {
    let (x, s_t) = (fill(x), fill(s.unwrap_or(0.0)));
    match s {
        Some(_) => exec(exe, &[("x", &x), ("s", &s_t)]),
        None => exec(exe, &[("x", &x)]),
    }
}

fn y_of(next: f32, w: &[f32]) -> Vec<f32> {
    w.iter().map(|v| v + next).collect()
}

fn copies(p: &Arc<LoadedPlugin>, state: bool) -> Result<(), String> {
    let mut a = counter_exe(p, Mode::Lazy)?;
    if state {
        a.state_bind("s", HostTensorRef::from(&fill(1.0)))
            .map_err(|e| format!("state bind: {e}"))?;
        a.state_set_feed("s", Feed::Replace(0))
            .map_err(|e| format!("set_feed: {e}"))?;
    }
    let mut b = a.clone_executable().map_err(|e| format!("clone: {e}"))?;
    if b.signature() != a.signature() {
        return Err(format!(
            "the clone's signature is {:?}, the original's {:?}",
            b.signature(),
            a.signature()
        ));
    }
    let s = (!state).then_some(1.0);
    step(&mut a, 1.0, s)?;
    step(&mut a, 1.0, s)?;
    if state {
        same(
            "the clone's state after two runs of the original",
            &read_state(&b, "s", 0, 6)?,
            &[1.0; 6],
        )?;
        let list = b
            .state_list()
            .map_err(|e| format!("the clone's list: {e}"))?;
        if list.len() != 1 || list[0].name != "s" {
            return Err(format!("the clone lists {list:?}"));
        }
    }
    let out = step(&mut b, 1.0, s)?;
    same("the clone's next", &out[0], &[2.0; 6])?;
    same(
        "the clone's y (the shared w)",
        &out[1],
        &y_of(2.0, &values(&w())),
    )?;
    if state {
        same(
            "the clone's state (its feed was copied)",
            &read_state(&b, "s", 0, 6)?,
            &[2.0; 6],
        )?;
        same(
            "the original's state",
            &read_state(&a, "s", 0, 6)?,
            &[3.0; 6],
        )?;
    }
    Ok(())
}

/// A param bound on the clone is its own; the clone outlives the original.
fn independent(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut a = counter_exe(p, Mode::Lazy)?;
    let mut b = a.clone_executable().map_err(|e| format!("clone: {e}"))?;
    b.bind_param("w", &fill(0.0))
        .map_err(|e| format!("bind_param on the clone: {e}"))?;
    let out = step(&mut a, 1.0, Some(1.0))?;
    same(
        "the original's y after the clone bound w",
        &out[1],
        &y_of(2.0, &values(&w())),
    )?;
    drop(a);
    let out = step(&mut b, 1.0, Some(1.0))?;
    same(
        "the clone's y after the original was destroyed",
        &out[1],
        &[2.0; 6],
    )
}

fn shares(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut src = counter_exe(p, Mode::Lazy)?;
    let mut dst = compile(p, &counter(), Mode::Lazy)?;
    let n = dst
        .share_params_from(&src)
        .map_err(|e| format!("share_params: {e}"))?;
    if n != 1 {
        return Err(format!("n_shared is {n}; the counter has one param"));
    }
    let out = step(&mut dst, 1.0, Some(1.0))?;
    same("dst's y (src's w)", &out[1], &y_of(2.0, &values(&w())))?;
    dst.bind_param("w", &fill(0.0))
        .map_err(|e| format!("bind_param on dst: {e}"))?;
    let out = step(&mut src, 1.0, Some(1.0))?;
    same(
        "src's y after dst bound its own w",
        &out[1],
        &y_of(2.0, &values(&w())),
    )?;
    let out = step(&mut dst, 1.0, Some(1.0))?;
    same("dst's y after binding its own w", &out[1], &[2.0; 6])?;
    // n_shared is optional.
    let f = p
        .raw_sharing()
        .and_then(|t| t.share_params)
        .expect("offered");
    let third = compile(p, &counter(), Mode::Lazy)?;
    // SAFETY: two live executables; the null n_shared is allowed.
    raw_ok(
        p,
        unsafe { f(third.raw_handle(), src.raw_handle(), null_mut()) },
        "share_params(.., NULL n_shared)",
    )
}

/// `src` without the param, then with it unbound: both refused, and
/// `dst`'s own `w` still in use.
fn mismatch(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut dst = compile(p, &counter(), Mode::Lazy)?;
    dst.bind_param("w", &ramp(100.0))
        .map_err(|e| format!("bind_param: {e}"))?;
    let no_param = compile(p, &rows(), Mode::Lazy)?;
    let unbound = compile(p, &counter(), Mode::Lazy)?;
    for (what, src) in [
        ("a src without \"w\"", &no_param),
        ("a src with \"w\" unbound", &unbound),
    ] {
        match dst.share_params_from(src) {
            Err(e) if e.code == INVALID => {}
            Err(e) => return Err(format!("{what}: {e}; expected INVALID_ARGUMENT")),
            Ok(n) => return Err(format!("{what}: shared {n} params")),
        }
    }
    let out = step(&mut dst, 1.0, Some(1.0))?;
    same(
        "dst's y after the refusals",
        &out[1],
        &y_of(2.0, &values(&ramp(100.0))),
    )
}

/// A destroyed `src`, a destroyed `dst`, a null `src` and `src == dst`:
/// each refused, and the live one still runs with its own params.
fn not_live(p: &Arc<LoadedPlugin>) -> Outcome {
    let f = p
        .raw_sharing()
        .and_then(|t| t.share_params)
        .expect("offered");
    let (mut live, dead) = match (counter_exe(p, Mode::Lazy), destroyed(p)) {
        (Ok(l), Ok(d)) => (l, d),
        (Err(e), _) | (_, Err(e)) => return Outcome::Fail(e),
    };
    let h = live.raw_handle();
    let mut n = 0usize;
    // SAFETY: the ABI makes every handle that is not a live executable of
    // the plugin INVALID_ARGUMENT, never a crash; `n` is writable.
    let steps = unsafe {
        vec![
            (
                "a destroyed src",
                raw_expect(p, f(h, dead, &mut n), INVALID),
            ),
            (
                "a destroyed dst",
                raw_expect(p, f(dead, h, &mut n), INVALID),
            ),
            (
                "a NULL src",
                raw_expect(p, f(h, null::<RlxExecutable>(), &mut n), INVALID),
            ),
            ("src == dst", raw_expect(p, f(h, h, &mut n), INVALID)),
        ]
    };
    match step(&mut live, 1.0, Some(1.0)) {
        Ok(out) if out[1] == y_of(2.0, &values(&w())) => all(steps),
        Ok(out) => Outcome::Fail(format!("after the refusals y is {:?}", out[1])),
        Err(e) => Outcome::Fail(format!("after the refusals: {e}")),
    }
}
