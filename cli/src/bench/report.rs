//! Printing a benchmark: a table side by side, or one JSON object.

use super::header::Header;
use super::row::{Row, Status};
use super::rss::format_bytes;
use serde_json::json;

/// The `--json` object: the header's fields and `"rows"`.
pub fn to_json(header: &Header, rows: &[Row]) -> serde_json::Value {
    let mut v = header.to_json();
    v["rows"] = json!(rows.iter().map(Row::to_json).collect::<Vec<_>>());
    v
}

pub fn print_text(header: &Header, rows: &[Row]) {
    header.print_text();
    println!();
    let table: Vec<[String; 12]> = rows.iter().map(cells).collect();
    crate::tables::print_table(
        &[
            "BACKEND",
            "MODE",
            "DEVICE",
            "COMPILE MS",
            "BIND MS",
            "FIRST RUN MS",
            "MEDIAN MS",
            "MIN MS",
            "PEAK RSS",
            "x CPU",
            "MAX ABS ERR",
            "STATUS",
        ],
        &table,
    );
    println!();
    let t = header.tolerance;
    println!(
        "MAX ABS ERR: against the cpu row's outputs; agreement means every element within {:e} + {:e} * |cpu| ({})",
        t.atol, t.rtol, t.label
    );
    if rows.iter().any(|r| r.source == "peer") {
        println!("peers: timed by scripts/bench_peers.py on their own seeded data, MAX ABS ERR against NumPy in float64");
    }
    println!(
        "x CPU: median / the cpu row's median (below 1: faster than rlx-runtime's CPU backend)"
    );
    for r in rows {
        if let Some(e) = &r.error {
            let label = match r.status {
                Status::Skipped => "SKIPPED",
                Status::Mismatch => "MISMATCH",
                _ => "FAILED",
            };
            println!("{label:<8} {}: {e}", r.requested);
        }
    }
}

fn cells(r: &Row) -> [String; 12] {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), format_ms);
    let err = match r.max_abs_err {
        _ if r.requested == "cpu" && r.status == Status::Ok => "reference".to_string(),
        Some(0.0) => "0".into(),
        Some(e) => format!("{e:.2e}"),
        None => "-".into(),
    };
    [
        r.backend.clone(),
        r.mode.clone().unwrap_or_else(|| "-".into()),
        r.device.clone().unwrap_or_else(|| "-".into()),
        ms(r.compile_ms),
        ms(r.bind_ms),
        ms(r.first_run_ms),
        ms(r.median_ms),
        ms(r.min_ms),
        if r.status == Status::Ok || r.status == Status::Mismatch {
            format_bytes(r.peak_rss_bytes)
        } else {
            "-".into()
        },
        r.ratio_vs_cpu
            .map_or("-".to_string(), |x| format!("{x:.2}")),
        err,
        r.status.name().to_uppercase(),
    ]
}

/// Milliseconds with about four significant digits.
pub fn format_ms(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.4}")
    } else if v < 100.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_show_dashes_for_what_was_not_measured() {
        let r = Row::empty("mlx", Some("lazy"), "mlx:lazy", "rlx").failed("boom");
        let c = cells(&r);
        assert_eq!(c[0], "mlx");
        assert_eq!(c[6], "-");
        assert_eq!(c[11], "FAILED");
        assert_eq!(format_ms(0.01234), "0.0123");
        assert_eq!(format_ms(12.3456), "12.346");
        assert_eq!(format_ms(1234.56), "1234.6");
    }
}
