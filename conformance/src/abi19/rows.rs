//! (docs/ABI.md §20) Row feeds: a cache fed `ROWS` grows by one row a step
//! through `feed_rows`, by every state or by name; rows out of range, a feed
//! before any run and a feed with no state fed rows are refused and write
//! nothing. A plugin that keeps state without `feed_rows` must refuse `ROWS`
//! with `UNSUPPORTED`.

use super::util::*;
use crate::graphs::{rows, CACHE};
use crate::{expect_err, Kit, Outcome};
use rlx_plugin_api::{Feed, HostTensorRef, Mode, RowFeed, StatusCode};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::sync::Arc;

pub(super) fn run(kit: &mut Kit, offered: bool) {
    if !offered {
        kit.record("state rows: ROWS without feed_rows is UNSUPPORTED", |p| {
            match super::state::with_state(p, Mode::Lazy, &fill(0.0), Feed::None) {
                Ok(mut exe) => expect_err(
                    exe.state_set_feed("s", Feed::Rows(0)),
                    &[StatusCode::Unsupported],
                ),
                Err(e) => Outcome::Fail(e),
            }
        });
        kit.skip(
            "state rows: not offered",
            "the state table's feed_rows is null (no row feeds)",
        );
        return;
    }
    kit.record("state rows: feed_rows grows a cache a row a step", |p| {
        grows(p).into()
    });
    kit.record("state rows: feed_rows of one state by name", |p| {
        by_name(p).into()
    });
    kit.record(
        "state rows: rows out of range are refused, nothing written",
        |p| out_of_range(p).into(),
    );
    kit.record("state rows: feed_rows before any run", |p| match cache(p) {
        Ok(mut exe) => expect_err(
            exe.state_feed_rows(None, &RowFeed::rows(2, 0, 0, 1)),
            &[INVALID],
        ),
        Err(e) => Outcome::Fail(e),
    });
    kit.record(
        "state rows: feed_rows with no state fed rows",
        |p| match super::state::with_state(p, Mode::Lazy, &fill(0.0), Feed::Replace(0)) {
            Ok(mut exe) => {
                if let Err(e) = exec(&mut exe, &[("x", &fill(1.0))]) {
                    return Outcome::Fail(e);
                }
                expect_err(
                    exe.state_feed_rows(None, &RowFeed::rows(3, 0, 0, 1)),
                    &[INVALID],
                )
            }
            Err(e) => Outcome::Fail(e),
        },
    );
}

/// The rows graph with its cache `k` bound to zeros and fed `ROWS` from
/// output 0.
fn cache(p: &Arc<LoadedPlugin>) -> Result<PluginExecutable, String> {
    let mut exe = compile(p, &rows(), Mode::Lazy)?;
    exe.state_bind("k", HostTensorRef::from(&f32s(&CACHE, &[0.0; 8])))
        .map_err(|e| format!("state bind \"k\": {e}"))?;
    exe.state_set_feed("k", Feed::Rows(0))
        .map_err(|e| format!("set_feed \"k\" ROWS: {e}"))?;
    Ok(exe)
}

/// Step `p` puts `2 t` into row `p`, and read the cache as it was.
fn grows(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = cache(p)?;
    let mut want = vec![0.0f32; 8];
    for step in 0..4 {
        let t = [step as f32 + 1.0, -(step as f32)];
        let out = exec(&mut exe, &[("t", &f32s(&[1, 1, 2], &t))])?;
        let doubled: Vec<f32> = want.iter().map(|v| 2.0 * v).collect();
        same(
            &format!("step {step}: kk (the cache doubled)"),
            &out[1],
            &doubled,
        )?;
        exe.state_feed_rows(None, &RowFeed::rows(2, 0, step, 1))
            .map_err(|e| format!("step {step}: feed_rows: {e}"))?;
        want[step * 2] = 2.0 * t[0];
        want[step * 2 + 1] = 2.0 * t[1];
        same(
            &format!("step {step}: the cache"),
            &read_state(&exe, "k", 0, 8)?,
            &want,
        )?;
    }
    Ok(())
}

fn by_name(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = cache(p)?;
    exec(&mut exe, &[("t", &f32s(&[1, 1, 2], &[3.0, 4.0]))])?;
    exe.state_feed_rows(Some("k"), &RowFeed::rows(2, 0, 2, 1))
        .map_err(|e| format!("feed_rows \"k\": {e}"))?;
    same(
        "the cache",
        &read_state(&exe, "k", 0, 8)?,
        &[0., 0., 0., 0., 6., 8., 0., 0.],
    )?;
    match exe.state_feed_rows(Some("nope"), &RowFeed::rows(2, 0, 0, 1)) {
        Err(e) if e.code == NOT_FOUND => Ok(()),
        Err(e) => Err(format!("feed_rows \"nope\": {e}; expected NOT_FOUND")),
        Ok(()) => Err("feed_rows of a state called \"nope\" succeeded".into()),
    }
}

fn out_of_range(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let mut exe = cache(p)?;
    exec(&mut exe, &[("t", &f32s(&[1, 1, 2], &[1.0, 2.0]))])?;
    for (what, feed) in [
        ("state row 4 of 4", RowFeed::rows(2, 0, 4, 1)),
        ("output row 1 of 1", RowFeed::rows(2, 1, 0, 1)),
        ("rows 3..5 of 4", RowFeed::rows(2, 0, 3, 2)),
    ] {
        match exe.state_feed_rows(None, &feed) {
            Err(e) if e.code == INVALID => {}
            Err(e) => return Err(format!("{what}: {e}; expected INVALID_ARGUMENT")),
            Ok(()) => return Err(format!("feeding {what} succeeded")),
        }
    }
    same(
        "the cache after the refusals",
        &read_state(&exe, "k", 0, 8)?,
        &[0.0; 8],
    )
}
