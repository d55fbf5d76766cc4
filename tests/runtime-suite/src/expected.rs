//! Tests expected to fail on the plugin: each a bug of rlx-runtime's own
//! or a test that cannot apply to a plugin, with the reason and where its
//! minimal reproduction is written down (`docs/RUNTIME-SUITE.md`). The
//! driver counts such a failure as expected, and fails the run when one
//! passes (so the list cannot go stale).

/// One expected failure.
pub struct Expected {
    /// The test's path in the suite binary (`file::test` or
    /// `file::module::test`).
    pub test: &'static str,
    /// The modes it fails in (empty: every mode).
    pub modes: &'static [&'static str],
    pub reason: &'static str,
}

pub const EXPECTED: &[Expected] = &[];

/// The entry for `test` in `mode`, if it is expected to fail there.
pub fn lookup(test: &str, mode: &str) -> Option<&'static Expected> {
    EXPECTED
        .iter()
        .find(|e| e.test == test && (e.modes.is_empty() || e.modes.contains(&mode)))
}
