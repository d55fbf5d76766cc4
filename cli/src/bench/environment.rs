//! The environment as the user started `rlx-host bench` with it.
//!
//! Loading a plugin may change this process's environment: the MLX
//! plugin sets `MLX_ENABLE_TF32` from `RLX_MLX_TF32` before MLX reads it.
//! The parent loads plugins (to check the request and print their
//! devices), so it captures the environment first and starts every child
//! and the Python peers with that capture: each sees the variables
//! exactly as the user set them.

use std::ffi::OsString;
use std::process::Command;

#[derive(Clone, Debug)]
pub struct EnvSnapshot(Vec<(OsString, OsString)>);

impl EnvSnapshot {
    /// Call before loading any plugin.
    pub fn capture() -> EnvSnapshot {
        EnvSnapshot(std::env::vars_os().collect())
    }

    /// A variable's value as captured (`None` when unset or not UTF-8).
    pub fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.to_str().map(str::to_string))
    }

    /// Names and values of the captured variables whose name satisfies
    /// `keep`, sorted by name.
    pub fn matching(&self, keep: impl Fn(&str) -> bool) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .0
            .iter()
            .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v.to_str()?.to_string())))
            .filter(|(k, _)| keep(k))
            .collect();
        v.sort();
        v
    }

    /// Give `cmd` exactly the captured environment.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env_clear();
        cmd.envs(self.0.iter().map(|(k, v)| (k, v)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_changes_do_not_reach_the_snapshot() {
        let snap = EnvSnapshot(vec![("A_VAR".into(), "1".into()), ("B".into(), "x".into())]);
        assert_eq!(snap.get("A_VAR").as_deref(), Some("1"));
        assert_eq!(snap.get("C"), None);
        assert_eq!(
            snap.matching(|k| k.starts_with("A_")),
            [("A_VAR".into(), "1".into())]
        );
        let mut cmd = Command::new("true");
        snap.apply(&mut cmd);
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs.iter().any(|(k, v)| *k == "B" && v.is_some()));
    }
}
