//! (docs/ABI.md §20 "Errors") Every misuse of the state entries is the
//! documented status and changes nothing: names that are no input, no state or
//! no output (`NOT_FOUND`); values, reads and feeds of another dtype or shape,
//! ranges past the end, reads before any run, unknown feed kinds, lent buffers
//! that break the rules and null pointers (`INVALID_ARGUMENT`). Output names go
//! through the raw table (the host library names outputs by position).

use super::state::with_state;
use super::util::*;
use crate::graphs::{rows, CACHE};
use crate::{expect_err, Kit, Outcome};
use rlx_plugin_api::tables::{feed_kind, RlxStateApi};
use rlx_plugin_api::tensor::{ownership, RlxTensor};
use rlx_plugin_api::{DType, Feed, HostTensor, HostTensorRef, Mode, RlxStr};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::ffi::c_void;
use std::ptr::{null, null_mut};
use std::sync::Arc;

pub(super) fn run(kit: &mut Kit) {
    kit.record("state: bind to a name that is no input", |p| {
        on_counter(p, |exe, _| {
            let t = fill(0.0);
            all(vec![
                (
                    "\"nope\"",
                    expect_err(exe.state_bind("nope", (&t).into()), &[NOT_FOUND]),
                ),
                (
                    "the param \"w\"",
                    expect_err(exe.state_bind("w", (&t).into()), &[NOT_FOUND]),
                ),
            ])
        })
    });
    kit.record("state: unknown state name", |p| {
        on_counter(p, |exe, _| {
            let mut buf = [0u8; 4];
            all(vec![
                ("unbind", expect_err(exe.state_unbind("nope"), &[NOT_FOUND])),
                (
                    "read",
                    expect_err(
                        exe.state_read_into("nope", 0, DType::F32, &mut buf),
                        &[NOT_FOUND],
                    ),
                ),
                (
                    "set_feed",
                    expect_err(exe.state_set_feed("nope", Feed::Replace(0)), &[NOT_FOUND]),
                ),
            ])
        })
    });
    kit.record("state: unknown output name", unknown_output);
    kit.record("state: bind of another dtype", |p| {
        let t = HostTensor::new(DType::I32, COUNTER_DIMS.to_vec(), vec![0; 24]).expect("sized");
        refused_bind(p, &t)
    });
    kit.record("state: bind of another shape", |p| {
        refused_bind(p, &f32s(&[3, 2], &[9.0; 6]))
    });
    kit.record("state: read of another dtype", |p| {
        on_counter(p, |exe, _| {
            let mut buf = [0u8; 8];
            expect_err(
                exe.state_read_into("s", 0, DType::I32, &mut buf),
                &[INVALID],
            )
        })
    });
    kit.record("state: read past the end", |p| {
        on_counter(p, |exe, _| {
            let mut buf = [0u8; 8];
            all(vec![
                (
                    "elements 5..7",
                    expect_err(
                        exe.state_read_into("s", 5, DType::F32, &mut buf),
                        &[INVALID],
                    ),
                ),
                (
                    "elements 6..8",
                    expect_err(
                        exe.state_read_into("s", 6, DType::F32, &mut buf),
                        &[INVALID],
                    ),
                ),
            ])
        })
    });
    kit.record("state: read_output before any run", |p| {
        on_counter(p, |exe, _| {
            let mut buf = [0u8; 8];
            expect_err(exe.output_read_into(0, 0, DType::F32, &mut buf), &[INVALID])
        })
    });
    kit.record("state: read_output past the end", |p| {
        on_counter(p, |exe, _| {
            if let Err(e) = exec(exe, &[("x", &fill(1.0))]) {
                return Outcome::Fail(e);
            }
            let mut buf = [0u8; 8];
            expect_err(exe.output_read_into(1, 5, DType::F32, &mut buf), &[INVALID])
        })
    });
    kit.record(
        "state: REPLACE feed from an output of another shape",
        another_shape,
    );
    kit.record("state: unknown feed kind", |p| {
        on_counter(p, |exe, t| {
            // SAFETY: a live executable; names borrowed for the call.
            let s = unsafe {
                (t.set_feed.unwrap())(
                    exe.raw_handle(),
                    RlxStr::from_str("s"),
                    7,
                    RlxStr::from_str("next"),
                )
            };
            raw_expect(p, s, INVALID)
        })
    });
    kit.record("state: lent buffers that break the rules", bad_buffers);
    kit.record("state: null pointers", null_pointers);
}

/// f32[2, 3], the counter's shape.
const COUNTER_DIMS: [usize; 2] = crate::graphs::COUNTER;

/// The counter with `s` bound to 7s (no feed), and its state table.
fn on_counter(
    p: &Arc<LoadedPlugin>,
    f: impl FnOnce(&mut PluginExecutable, &RlxStateApi) -> Outcome,
) -> Outcome {
    let table = p.raw_state().expect("offered");
    match with_state(p, Mode::Lazy, &fill(7.0), Feed::None) {
        Ok(mut exe) => f(&mut exe, table),
        Err(e) => Outcome::Fail(e),
    }
}

/// A refused bind leaves the state's value as it was.
fn refused_bind(p: &Arc<LoadedPlugin>, t: &HostTensor) -> Outcome {
    on_counter(p, |exe, _| {
        match expect_err(exe.state_bind("s", t.into()), &[INVALID]) {
            Outcome::Ok => match read_state(exe, "s", 0, 6) {
                Ok(v) if v == [7.0; 6] => Outcome::Ok,
                Ok(v) => Outcome::Fail(format!("the refused bind changed the state to {v:?}")),
                Err(e) => Outcome::Fail(e),
            },
            o => o,
        }
    })
}

fn unknown_output(p: &Arc<LoadedPlugin>) -> Outcome {
    on_counter(p, |exe, t| {
        let h = exe.raw_handle();
        // SAFETY: a live executable; names borrowed for the call.
        let feed = unsafe {
            (t.set_feed.unwrap())(
                h,
                RlxStr::from_str("s"),
                feed_kind::REPLACE,
                RlxStr::from_str("nope"),
            )
        };
        let feed = raw_expect(p, feed, NOT_FOUND);
        if let Err(e) = exec(exe, &[("x", &fill(1.0))]) {
            return Outcome::Fail(e);
        }
        let mut v = [0f32; 2];
        let mut shape = [2i64];
        let mut into = lent(&mut v, &mut shape);
        // SAFETY: a live executable; `into` describes `v`, writable for the call.
        let read = unsafe { (t.read_output.unwrap())(h, RlxStr::from_str("nope"), 0, &mut into) };
        all(vec![
            ("set_feed", feed),
            ("read_output", raw_expect(p, read, NOT_FOUND)),
        ])
    })
}

/// `REPLACE` needs an output of the state's shape: the cache `k`
/// (f32[1, 4, 2]) from `row` (f32[1, 1, 2]).
fn another_shape(p: &Arc<LoadedPlugin>) -> Outcome {
    let r = (|| {
        let mut exe = compile(p, &rows(), Mode::Lazy)?;
        exe.state_bind("k", HostTensorRef::from(&f32s(&CACHE, &[0.0; 8])))
            .map_err(|e| format!("state bind \"k\": {e}"))?;
        Ok::<_, String>(exe)
    })();
    match r {
        Ok(mut exe) => expect_err(exe.state_set_feed("k", Feed::Replace(0)), &[INVALID]),
        Err(e) => Outcome::Fail(e),
    }
}

/// A 1-D BORROWED f32 descriptor of `v` (the caller keeps `shape`).
fn lent(v: &mut [f32], shape: &mut [i64; 1]) -> RlxTensor {
    shape[0] = v.len() as i64;
    RlxTensor::compact(
        DType::F32,
        v.as_mut_ptr() as *mut c_void,
        shape.as_mut_ptr(),
        1,
        ownership::BORROWED,
    )
}

/// One way to spoil a lent buffer, and its name.
type Spoil<'a> = (&'a str, &'a dyn Fn(&mut RlxTensor));

/// Reads into an `OWNED` buffer, a buffer with no data, one of another
/// dtype, and one that is not compact.
fn bad_buffers(p: &Arc<LoadedPlugin>) -> Outcome {
    on_counter(p, |exe, t| {
        let h = exe.raw_handle();
        let mut v = [0f32; 2];
        let mut shape = [2i64];
        let mut strides = [2i64];
        let strides = strides.as_mut_ptr();
        let cases: [Spoil; 4] = [
            ("an OWNED buffer", &|b| b.ownership = ownership::OWNED),
            ("no data", &|b| b.dl.data = null_mut()),
            ("another dtype (i32)", &|b| b.dl.dtype = DType::I32.to_dl()),
            ("strides [2]", &|b| b.dl.strides = strides),
        ];
        let mut steps = Vec::new();
        for (what, spoil) in cases {
            let mut into = lent(&mut v, &mut shape);
            spoil(&mut into);
            // SAFETY: a live executable; `into` describes `v` (or no data),
            // writable for the call; an OWNED one has no deleter to call.
            let s = unsafe { (t.read.unwrap())(h, RlxStr::from_str("s"), 0, &mut into) };
            steps.push((what, raw_expect(p, s, INVALID)));
        }
        all(steps)
    })
}

fn null_pointers(p: &Arc<LoadedPlugin>) -> Outcome {
    on_counter(p, |exe, t| {
        let h = exe.raw_handle();
        if let Err(e) = exec(exe, &[("x", &fill(1.0))]) {
            return Outcome::Fail(e);
        }
        let s = RlxStr::from_str("s");
        // SAFETY: a live executable; each null pointer is the case under test.
        unsafe {
            all(vec![
                (
                    "bind(.., NULL value)",
                    raw_expect(p, (t.bind.unwrap())(h, s, null()), INVALID),
                ),
                (
                    "read(.., NULL into)",
                    raw_expect(p, (t.read.unwrap())(h, s, 0, null_mut()), INVALID),
                ),
                (
                    "list(.., NULL visitor)",
                    raw_expect(p, (t.list.unwrap())(h, null()), INVALID),
                ),
                (
                    "read_output(.., NULL into)",
                    raw_expect(
                        p,
                        (t.read_output.unwrap())(h, RlxStr::from_str("next"), 0, null_mut()),
                        INVALID,
                    ),
                ),
            ])
        }
    })
}
