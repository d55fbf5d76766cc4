//! Check 9, the executable as a whole backend (state, clones and shared params,
//! submitted runs and the root table's extras): the tables agree with
//! themselves, then each part the plugin's table offers
//! (`LoadedPlugin::offers`) is checked with exact values and every misuse the
//! ABI names; each part it does not offer is one skipped "not offered" check
//! (every part is optional).
//!
//! Files: `tables` (consistency), `state` and `state_errors` (§20),
//! `state_from` (§20's `bind_from`), `rows` (row feeds), `sharing` (§21),
//! `submit` (§22), `extras` (the root table's param ranges, RNG, active extents
//! and memory figures) and `slots` (skipped output slots, §11). Their graphs
//! are additions only (`crate::graphs`), so any plugin that claims `Binary` in
//! f32 runs them.

mod extras;
mod rows;
mod sharing;
mod slots;
mod state;
mod state_errors;
mod state_from;
mod submit;
mod tables;
mod util;

use crate::Kit;

/// Every part, by the name of its "not offered" check, with why.
const PARTS: [(&str, &str); 9] = [
    ("state", "RlxPluginApi::state is null (no executable state)"),
    (
        "clone",
        "the sharing table's clone is null (or no sharing table)",
    ),
    (
        "share_params",
        "the sharing table's share_params is null (or no sharing table)",
    ),
    (
        "submit",
        "RlxPluginApi::submits is null (runs are synchronous only)",
    ),
    ("param range", "executable_bind_param_range is null"),
    ("set_rng", "executable_set_rng is null"),
    ("active extent", "executable_set_active_extent is null"),
    ("memory_usage", "memory_usage is null"),
    (
        "skipped slots",
        "executable_run_into is null (no lent or skipped slots)",
    ),
];

pub(crate) fn run(kit: &mut Kit) {
    let minor = kit.plugin.abi_version().minor;
    if minor < 9 {
        let why = format!("the plugin claims ABI 1.{minor}; this part is 1.9");
        kit.skip("1.9 tables: consistent", why.clone());
        for (part, _) in PARTS {
            kit.skip(format!("{part}: not offered"), why.clone());
        }
        return;
    }
    kit.record("1.9 tables: consistent", |p| tables::consistent(p));
    let o = kit.plugin.offers();
    let offered = [
        o.state,
        o.clone,
        o.share_params,
        o.submit,
        o.param_range,
        o.set_rng,
        o.active_extent,
        o.memory_usage,
        kit.plugin.has_run_into(),
    ];
    // Parts that need no graph of the kit's come first.
    if o.memory_usage {
        extras::memory_usage(kit);
    }
    if let Some(why) = crate::graphs::additions_unclaimed(&kit.plugin) {
        for ((part, _), on) in PARTS.iter().zip(offered) {
            if on && *part != "memory_usage" {
                kit.skip(format!("{part}: checks"), why.clone());
            }
        }
    } else {
        offered_parts(kit, &o);
    }
    for ((part, why), on) in PARTS.iter().zip(offered) {
        if !on {
            kit.skip(format!("{part}: not offered"), *why);
        }
    }
}

fn offered_parts(kit: &mut Kit, o: &rlx_plugin_api::plugin::Offers) {
    if o.state {
        state::run(kit);
        state_errors::run(kit);
        rows::run(kit, o.row_feeds);
        if o.state_from {
            state_from::run(kit);
        } else {
            kit.skip(
                "bind_from: not offered",
                "the state table's bind_from is null or beyond its size (ABI 1.13)",
            );
        }
    }
    if o.clone {
        sharing::run_clone(kit, o.state);
    }
    if o.share_params {
        sharing::run_share(kit);
    }
    if o.submit {
        submit::run(kit, o.state);
    }
    if o.param_range {
        extras::param_range(kit, o.clone);
    }
    if o.set_rng {
        extras::set_rng(kit);
    }
    if o.active_extent {
        extras::active_extent(kit);
    }
    if kit.plugin.has_run_into() {
        slots::run(kit, o.state);
    }
}
