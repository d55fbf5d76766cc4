//! One row of a benchmark: what a child process measured (sent to the
//! parent as one JSON line), what a Python peer measured (the same JSON
//! shape), and what the parent adds (the comparison with the CPU row).

use serde_json::{json, Value};

/// Did the row run?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// It ran, but its outputs differ from the CPU row's beyond the
    /// tolerance.
    Mismatch,
    Failed,
    /// Not run (a Python peer whose package is not installed).
    Skipped,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Mismatch => "mismatch",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }

    fn parse(s: &str) -> Option<Status> {
        [
            Status::Ok,
            Status::Mismatch,
            Status::Failed,
            Status::Skipped,
        ]
        .into_iter()
        .find(|x| x.name() == s)
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    /// `cpu`, the plugin's descriptor name (`mlx`, or `mlx-cuda` where the
    /// GPU variant serves `mlx`), or a peer (`python-mlx`, `torch`).
    pub backend: String,
    /// The plugin's mode, a peer's way of running; `None` for the CPU.
    pub mode: Option<String>,
    /// What was asked for: `cpu`, `mlx:lazy`, `peer:torch-eager`.
    pub requested: String,
    /// `rlx` (a backend through rlx-runtime) or `peer` (Python).
    pub source: String,
    /// The device it ran on (`cpu`, `gpu:0`), where known.
    pub device: Option<String>,
    pub compile_ms: Option<f64>,
    /// Binding every param after the compile (`set_param`).
    pub bind_ms: Option<f64>,
    pub first_run_ms: Option<f64>,
    pub median_ms: Option<f64>,
    pub min_ms: Option<f64>,
    /// Every timed run, in order.
    pub runs_ms: Vec<f64>,
    pub peak_rss_bytes: Option<u64>,
    /// Where the peak RSS was read (`VmHWM`, `getrusage`).
    pub rss_source: Option<String>,
    /// The sum of every output element (a quick fingerprint; the error
    /// columns are the real check).
    pub checksum: Option<f64>,
    /// Max abs / rel error of the outputs against [`Row::reference`].
    pub max_abs_err: Option<f64>,
    pub max_rel_err: Option<f64>,
    /// What the errors are against: `cpu`, or `numpy` for a peer.
    pub reference: Option<String>,
    /// `median_ms / cpu's median_ms`.
    pub ratio_vs_cpu: Option<f64>,
    pub status: Status,
    /// Why it failed or was skipped.
    pub error: Option<String>,
}

impl Row {
    /// A row with nothing measured.
    pub fn empty(backend: &str, mode: Option<&str>, requested: &str, source: &str) -> Row {
        Row {
            backend: backend.into(),
            mode: mode.map(str::to_string),
            requested: requested.into(),
            source: source.into(),
            device: None,
            compile_ms: None,
            bind_ms: None,
            first_run_ms: None,
            median_ms: None,
            min_ms: None,
            runs_ms: Vec::new(),
            peak_rss_bytes: None,
            rss_source: None,
            checksum: None,
            max_abs_err: None,
            max_rel_err: None,
            reference: None,
            ratio_vs_cpu: None,
            status: Status::Ok,
            error: None,
        }
    }

    /// A failed row saying why.
    pub fn failed(mut self, why: impl Into<String>) -> Row {
        self.status = Status::Failed;
        self.error = Some(why.into());
        self
    }

    pub fn to_json(&self) -> Value {
        json!({
            "backend": self.backend,
            "mode": self.mode,
            "requested": self.requested,
            "source": self.source,
            "device": self.device,
            "compile_ms": self.compile_ms.map(num),
            "bind_ms": self.bind_ms.map(num),
            "first_run_ms": self.first_run_ms.map(num),
            "median_ms": self.median_ms.map(num),
            "min_ms": self.min_ms.map(num),
            "runs_ms": self.runs_ms.iter().copied().map(num).collect::<Vec<_>>(),
            "peak_rss_bytes": self.peak_rss_bytes,
            "rss_source": self.rss_source,
            "checksum": self.checksum.map(num),
            "max_abs_err": self.max_abs_err.map(num),
            "max_rel_err": self.max_rel_err.map(num),
            "reference": self.reference,
            "ratio_vs_cpu": self.ratio_vs_cpu.map(num),
            "status": self.status.name(),
            "error": self.error,
        })
    }

    /// A row from its JSON object (a child's line, a peer's row). Fields
    /// other than `backend` may be missing or null.
    pub fn from_json(v: &Value) -> Result<Row, String> {
        let o = v
            .as_object()
            .ok_or_else(|| format!("a row is not a JSON object: {v}"))?;
        let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
        let f = |k: &str| o.get(k).and_then(as_f64);
        let backend = s("backend").ok_or_else(|| format!("a row has no \"backend\": {v}"))?;
        let status = match s("status") {
            Some(st) => Status::parse(&st).ok_or_else(|| format!("unknown row status {st:?}"))?,
            None => Status::Ok,
        };
        Ok(Row {
            requested: s("requested").unwrap_or_else(|| backend.clone()),
            source: s("source").unwrap_or_else(|| "rlx".into()),
            mode: s("mode"),
            device: s("device"),
            compile_ms: f("compile_ms"),
            bind_ms: f("bind_ms"),
            first_run_ms: f("first_run_ms"),
            median_ms: f("median_ms"),
            min_ms: f("min_ms"),
            runs_ms: o
                .get("runs_ms")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(as_f64).collect())
                .unwrap_or_default(),
            peak_rss_bytes: o.get("peak_rss_bytes").and_then(Value::as_u64),
            rss_source: s("rss_source"),
            checksum: f("checksum"),
            max_abs_err: f("max_abs_err"),
            max_rel_err: f("max_rel_err"),
            reference: s("reference"),
            ratio_vs_cpu: f("ratio_vs_cpu"),
            status,
            error: s("error"),
            backend,
        })
    }
}

/// JSON has no infinity or NaN: those are written as strings.
fn num(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else if v.is_nan() {
        json!("nan")
    } else if v > 0.0 {
        json!("inf")
    } else {
        json!("-inf")
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "nan" => Some(f64::NAN),
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_json_with_non_finite_values() {
        let mut r = Row::empty("mlx", Some("lazy"), "mlx:lazy", "rlx");
        r.median_ms = Some(1.5);
        r.runs_ms = vec![1.0, 2.0];
        r.max_abs_err = Some(f64::INFINITY);
        r.peak_rss_bytes = Some(42);
        let back = Row::from_json(&r.to_json()).unwrap();
        assert_eq!(back.median_ms, Some(1.5));
        assert_eq!(back.runs_ms, vec![1.0, 2.0]);
        assert_eq!(back.max_abs_err, Some(f64::INFINITY));
        assert_eq!(back.peak_rss_bytes, Some(42));
        assert_eq!(back.status, Status::Ok);
        let f = Row::from_json(&r.failed("boom").to_json()).unwrap();
        assert_eq!(
            (f.status, f.error.as_deref()),
            (Status::Failed, Some("boom"))
        );
        assert!(Row::from_json(&json!({"mode": "x"})).is_err());
    }
}
