//! The conformance kit (`rlx-host plugins check`), which lives in its own
//! crate so that plugin authors call it from their tests:
//! `rlx_plugin_conformance`, re-exported here under its earlier name.

pub use rlx_plugin_conformance::*;
