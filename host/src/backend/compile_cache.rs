//! Graphs the plugin has compiled, recognised when they come again.
//!
//! A client that builds its decode step from scratch every token (rlx's own LM
//! crates do) hands the backend the same graph each time: same nodes, shapes,
//! attributes and constants. Compiling it again costs rlx-runtime's pipeline
//! and the plugin's compile every step. Instead, each graph the plugin took
//! whole is kept here as a pristine executable (compiled, no params bound, no
//! state, never run), by the graph's bytes in rlx-ir's own serialisation and
//! everything else the compile depended on (the plugin, the device, the mode,
//! the options); the same graph later gets a clone of it (the compiled program
//! shared, nothing bound), for a few microseconds instead of a compile. The
//! clone is a new executable, as a compile's would be: its params and state are
//! its own to bind (or to take from another executable: `share_params_from`,
//! `hold_from`).
//!
//! The bytes are compared whole, not by a hash, so two graphs are never
//! confused. The cache keeps the most recently used [`CAPACITY`] graphs;
//! `RLX_PLUGIN_COMPILE_CACHE=0` turns it off (every compile compiles).

use super::PluginGraph;
use rlx_ir::Graph;
use std::sync::{Mutex, OnceLock};

/// Graphs kept.
pub const CAPACITY: usize = 16;

/// What a compile depended on besides the graph.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct Context(String);

impl Context {
    pub(super) fn new(parts: std::fmt::Arguments<'_>) -> Context {
        Context(parts.to_string())
    }
}

struct Entry {
    context: Context,
    bytes: Vec<u8>,
    template: PluginGraph,
}

fn entries() -> &'static Mutex<Vec<Entry>> {
    static E: OnceLock<Mutex<Vec<Entry>>> = OnceLock::new();
    E.get_or_init(Default::default)
}

fn enabled() -> bool {
    rlx_ir::env::var("RLX_PLUGIN_COMPILE_CACHE").is_none_or(|v| v != "0")
}

/// The key bytes of `graph`, or None when it cannot be cached (a
/// symbolic graph has no bytes in the form; the cache is off).
pub(super) fn key_bytes(graph: &Graph) -> Option<Vec<u8>> {
    if !enabled() || graph.is_symbolic() {
        return None;
    }
    rlx_plugin_api::graph_forms::encode(graph).ok()
}

/// A new executable like the one compiled before from these bytes in this
/// context, if there is one (the most recently used entry moves to the
/// front).
pub(super) fn lookup(context: &Context, bytes: &[u8]) -> Option<PluginGraph> {
    let mut e = entries().lock().unwrap_or_else(|e| e.into_inner());
    let at = e
        .iter()
        .position(|x| x.context == *context && x.bytes == bytes)?;
    let hit = e.remove(at);
    let exe = hit.template.pristine_clone();
    e.insert(0, hit);
    match exe {
        Ok(mut exe) => {
            exe.reused = true;
            Some(exe)
        }
        Err(err) => {
            log::debug!("compile cache: a clone failed ({err}); compiling instead");
            None
        }
    }
}

/// Keep a pristine clone of `fresh` (just compiled, nothing bound) for the
/// next compile of the same bytes in this context.
pub(super) fn store(context: Context, bytes: Vec<u8>, fresh: &PluginGraph) {
    if !fresh.offers.clone {
        return;
    }
    let template = match fresh.pristine_clone() {
        Ok(t) => t,
        Err(err) => {
            log::debug!("compile cache: not kept ({err})");
            return;
        }
    };
    let mut e = entries().lock().unwrap_or_else(|e| e.into_inner());
    e.retain(|x| !(x.context == context && x.bytes == bytes));
    e.insert(
        0,
        Entry {
            context,
            bytes,
            template,
        },
    );
    e.truncate(CAPACITY);
}

/// Forget every graph (tests that count compiles start from nothing).
pub fn clear() {
    entries().lock().unwrap_or_else(|e| e.into_inner()).clear();
}
