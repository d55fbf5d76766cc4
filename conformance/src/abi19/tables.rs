//! The state, sharing and submit tables agree with themselves: each table the
//! root table points at is at least the size 1.9 (the minor that defined it)
//! gave it, and offers something, the state table all of its entries but the
//! optional `feed_rows`, and the submit table `submit` and `wait` together
//! (docs/ABI.md §20-§22). A table that offers half of a pair would have a host
//! start what it cannot finish.

use crate::Outcome;
use rlx_plugin_api::tables::{RlxSharingApi, RlxStateApi, RlxSubmitApi};
use rlx_plugin_loader::LoadedPlugin;

/// The end of `field` in `T`: the table's size in 1.9, the minor that defined
/// these tables (a newer minor appending fields does not raise what a 1.9
/// plugin owes).
macro_rules! size_through {
    ($t:ty, $f:ident) => {
        std::mem::offset_of!($t, $f) + std::mem::size_of::<usize>()
    };
}

const STATE_1_9: usize = size_through!(RlxStateApi, read_output);
const SHARING_1_9: usize = size_through!(RlxSharingApi, share_params);
const SUBMIT_1_9: usize = size_through!(RlxSubmitApi, wait);

pub(super) fn consistent(p: &LoadedPlugin) -> Outcome {
    let mut bad = Vec::new();
    if let Some(t) = p.raw_state() {
        size("state", t.struct_size, STATE_1_9, &mut bad);
        let missing = nulls(&[
            ("bind", t.bind.is_none()),
            ("unbind", t.unbind.is_none()),
            ("read", t.read.is_none()),
            ("list", t.list.is_none()),
            ("set_feed", t.set_feed.is_none()),
            ("read_output", t.read_output.is_none()),
        ]);
        if !missing.is_empty() {
            bad.push(format!(
                "the state table lacks {missing} (only feed_rows is optional; a plugin \
                 without state leaves the table null)"
            ));
        }
    }
    if let Some(t) = p.raw_sharing() {
        size("sharing", t.struct_size, SHARING_1_9, &mut bad);
        if t.clone.is_none() && t.share_params.is_none() {
            bad.push(
                "the sharing table offers neither clone nor share_params (leave it null)".into(),
            );
        }
    }
    if let Some(t) = p.raw_submits() {
        size("submits", t.struct_size, SUBMIT_1_9, &mut bad);
        match (t.submit.is_some(), t.wait.is_some()) {
            (true, true) => {}
            (true, false) => bad.push("submit without wait: nothing could take the runs".into()),
            (false, true) => bad.push("wait without submit".into()),
            (false, false) => {
                bad.push("the submit table offers neither submit nor wait (leave it null)".into())
            }
        }
    }
    if bad.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Fail(bad.join("; "))
    }
}

fn size(table: &str, got: usize, need: usize, bad: &mut Vec<String>) {
    if got < need {
        bad.push(format!(
            "the {table} table's struct_size {got} is smaller than its 1.9 size ({need})"
        ));
    }
}

fn nulls(fns: &[(&str, bool)]) -> String {
    fns.iter()
        .filter(|(_, null)| *null)
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}
