//! The backends `--backends` names: `cpu`, `NAME:MODE`, or `NAME` for
//! every mode of a plugin.

use rlx_plugin_api::Mode;

/// The default `--backends`: the CPU reference and every mode of `mlx`.
pub const DEFAULT_BACKENDS: &str = "cpu,mlx";

/// Every mode a plugin is measured in when only its name is given.
pub const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];

/// One backend to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    /// rlx-runtime's CPU backend (the reference).
    Cpu,
    /// A plugin, by the name a user asks for (resolved with
    /// `run::find_plugin`), in one mode.
    Plugin { name: String, mode: Mode },
}

impl BackendSpec {
    /// `cpu` or `NAME:MODE`: what a child is told to measure.
    pub fn label(&self) -> String {
        match self {
            BackendSpec::Cpu => "cpu".into(),
            BackendSpec::Plugin { name, mode } => format!("{name}:{}", mode.name()),
        }
    }

    /// One `NAME:MODE` or `cpu` (a child's `--child` value).
    pub fn parse_one(s: &str) -> Result<BackendSpec, String> {
        let list = parse_list(s)?;
        match list.as_slice() {
            [one] => Ok(one.clone()),
            _ => Err(format!("{s:?} names more than one backend")),
        }
    }
}

/// A comma-separated list, in order, without repeats.
pub fn parse_list(list: &str) -> Result<Vec<BackendSpec>, String> {
    let mut out: Vec<BackendSpec> = Vec::new();
    for item in list.split(',').map(str::trim) {
        let specs = parse_item(item)?;
        for s in specs {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

fn parse_item(item: &str) -> Result<Vec<BackendSpec>, String> {
    if item.is_empty() {
        return Err("--backends: an empty entry (expected cpu, NAME or NAME:MODE)".into());
    }
    if item == "cpu" {
        return Ok(vec![BackendSpec::Cpu]);
    }
    let (name, mode) = match item.split_once(':') {
        Some((n, m)) => (n, Some(m)),
        None => (item, None),
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!(
            "--backends: {item:?} is not a backend (expected cpu, NAME or NAME:MODE)"
        ));
    }
    let modes = match mode {
        None => MODES.to_vec(),
        Some(m) => vec![Mode::from_name(m).ok_or_else(|| {
            format!("--backends: unknown mode {m:?} in {item:?} (expected lazy, eager or compiled)")
        })?],
    };
    Ok(modes
        .into_iter()
        .map(|mode| BackendSpec::Plugin {
            name: name.to_string(),
            mode,
        })
        .collect())
}

/// The plugin names in `specs`, in order, without repeats.
pub fn plugin_names(specs: &[BackendSpec]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in specs {
        if let BackendSpec::Plugin { name, .. } = s {
            if !out.contains(&name.as_str()) {
                out.push(name);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_expand_names_to_every_mode_and_drop_repeats() {
        let l = parse_list(DEFAULT_BACKENDS).unwrap();
        let labels: Vec<String> = l.iter().map(BackendSpec::label).collect();
        assert_eq!(labels, ["cpu", "mlx:lazy", "mlx:eager", "mlx:compiled"]);
        let l = parse_list("mlx:eager, cpu,mlx:eager").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(plugin_names(&l), ["mlx"]);
        assert_eq!(
            BackendSpec::parse_one("mlx:compiled").unwrap().label(),
            "mlx:compiled"
        );
    }

    #[test]
    fn bad_entries_are_named() {
        assert!(parse_list("cpu,,mlx").unwrap_err().contains("empty"));
        assert!(parse_list("mlx:fast").unwrap_err().contains("\"fast\""));
        assert!(parse_list(":lazy").is_err());
        assert!(BackendSpec::parse_one("mlx").is_err());
    }
}
