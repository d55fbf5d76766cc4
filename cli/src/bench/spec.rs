//! The backends `--backends` names: `cpu`, `NAME:MODE`, or `NAME` for
//! every mode of a plugin; either plugin form with `+cpu` after it is the
//! same plugin measured in a process where rlx-runtime's CPU backend ran
//! the model first (a host that uses both: the CPU backend sets
//! process-wide state, such as the thread count of a BLAS both call).

use rlx_plugin_api::Mode;

/// The default `--backends`: the CPU reference and every mode of `mlx`.
pub const DEFAULT_BACKENDS: &str = "cpu,mlx";

/// The suffix of a plugin measured after the CPU backend ran.
const AFTER_CPU: &str = "+cpu";

/// Every mode a plugin is measured in when only its name is given.
pub const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];

/// One backend to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    /// rlx-runtime's CPU backend (the reference).
    Cpu,
    /// A plugin, by the name a user asks for (resolved with
    /// `run::find_plugin`), in one mode; `after_cpu`: in a process where
    /// the CPU backend compiled and ran the model first.
    Plugin {
        name: String,
        mode: Mode,
        after_cpu: bool,
    },
}

impl BackendSpec {
    /// `cpu` or `NAME:MODE`: what a child is told to measure.
    pub fn label(&self) -> String {
        match self {
            BackendSpec::Cpu => "cpu".into(),
            BackendSpec::Plugin { name, .. } => {
                format!("{name}:{}", self.mode_label().unwrap_or_default())
            }
        }
    }

    /// The MODE column: the mode, with `+cpu` when measured after the
    /// CPU backend ran; None for the CPU backend.
    pub fn mode_label(&self) -> Option<String> {
        match self {
            BackendSpec::Cpu => None,
            BackendSpec::Plugin {
                mode, after_cpu, ..
            } => {
                let tail = if *after_cpu { AFTER_CPU } else { "" };
                Some(format!("{}{tail}", mode.name()))
            }
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
    let (item, after_cpu) = match item.strip_suffix(AFTER_CPU) {
        Some(rest) => (rest, true),
        None => (item, false),
    };
    if item == "cpu" {
        return Err(format!(
            "--backends: {AFTER_CPU} follows a plugin (NAME or NAME:MODE), not cpu"
        ));
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
            after_cpu,
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
    fn after_cpu_is_its_own_row_of_the_same_plugin() {
        let l = parse_list("mlx:lazy,mlx+cpu").unwrap();
        let labels: Vec<String> = l.iter().map(BackendSpec::label).collect();
        assert_eq!(
            labels,
            [
                "mlx:lazy",
                "mlx:lazy+cpu",
                "mlx:eager+cpu",
                "mlx:compiled+cpu"
            ]
        );
        assert_eq!(plugin_names(&l), ["mlx"]);
        assert_eq!(
            BackendSpec::parse_one("mlx:eager+cpu").unwrap(),
            BackendSpec::Plugin {
                name: "mlx".into(),
                mode: Mode::Eager,
                after_cpu: true
            }
        );
    }

    #[test]
    fn bad_entries_are_named() {
        assert!(parse_list("cpu,,mlx").unwrap_err().contains("empty"));
        assert!(parse_list("mlx:fast").unwrap_err().contains("\"fast\""));
        assert!(parse_list(":lazy").is_err());
        assert!(BackendSpec::parse_one("mlx").is_err());
        assert!(parse_list("cpu+cpu").is_err());
        assert!(parse_list("+cpu").is_err());
    }
}
