//! Check 6, status ownership: `status_new` round-trips code and message
//! through `status_code` / `status_message`, an unknown code survives
//! (as itself, or as INTERNAL), and `status_free` releases (many times).

use super::{Kit, Outcome};
use rlx_plugin_api::tables::RlxPluginApi;
use rlx_plugin_api::{RlxStr, StatusCode};

pub(super) fn run(kit: &mut Kit) {
    kit.record("status: round trip of every code", |p| {
        round_trips(p.raw_api()).into()
    });
    kit.record("status: empty message", |p| {
        round_trip(p.raw_api(), StatusCode::Internal as u32, "").into()
    });
    kit.record("status: unknown code", |p| unknown_code(p.raw_api()));
    kit.record("status: 10000 new/free pairs", |p| {
        let api = p.raw_api();
        for i in 0..10_000u32 {
            let msg = format!("conformance status {i}");
            // SAFETY: made and freed here, once each.
            unsafe {
                let s = (api.status_new.unwrap())(1 + i % 7, RlxStr::from_str(&msg));
                if s.is_null() {
                    return Outcome::Fail(format!("status_new returned null at {i}"));
                }
                (api.status_free.unwrap())(s);
            }
        }
        Outcome::Ok
    });
}

/// (code, message) read back from a status made with `code`, `msg`.
fn make_and_read(api: &RlxPluginApi, code: u32, msg: &str) -> Result<(u32, String), String> {
    // SAFETY: the message is copied by status_new; the status is read,
    // then freed exactly once.
    unsafe {
        let s = (api.status_new.unwrap())(code, RlxStr::from_str(msg));
        if s.is_null() {
            return Err(format!("status_new({code}, ..) returned null"));
        }
        let got_code = (api.status_code.unwrap())(s);
        let got = (api.status_message.unwrap())(s)
            .to_str()
            .map(str::to_string);
        (api.status_free.unwrap())(s);
        let got = got.map_err(|e| format!("the message read back is not UTF-8: {e}"))?;
        Ok((got_code, got))
    }
}

fn round_trip(api: &RlxPluginApi, code: u32, msg: &str) -> Result<(), String> {
    let (c, m) = make_and_read(api, code, msg)?;
    if c != code || m != msg {
        return Err(format!(
            "status_new({code}, {msg:?}) reads back as ({c}, {m:?})"
        ));
    }
    Ok(())
}

fn round_trips(api: &RlxPluginApi) -> Result<(), String> {
    for code in StatusCode::ALL {
        // Non-ASCII, so a message cut at a byte count shows.
        let msg = format!("conformance: {} — ünïcödé", code.name());
        round_trip(api, code as u32, &msg)?;
    }
    Ok(())
}

/// A code from a newer peer must stay an error: read back as itself or
/// as INTERNAL (docs/ABI.md §6), never as success or another code.
fn unknown_code(api: &RlxPluginApi) -> Outcome {
    match make_and_read(api, 99, "from a newer peer") {
        Err(e) => Outcome::Fail(e),
        Ok((99, _)) | Ok((4, _)) => Outcome::Ok,
        Ok((c, _)) => Outcome::Fail(format!(
            "status_new(99, ..) reads back as code {c}; expected 99 or INTERNAL (4)"
        )),
    }
}
