//! The correctness guard: every plugin row's outputs against the CPU
//! row's, so a fast wrong answer shows as a mismatch, not as a speed-up.

use super::outputs;
use super::row::{Row, Status};
use crate::run;
use rlx_ir::{DType, Graph, Op};
use std::path::Path;

/// An element agrees when `|got - cpu| <= atol + rtol * |cpu|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
    /// Why this tolerance (`f32`, `bf16/f16`).
    pub label: &'static str,
}

/// f32: the demo's parity tolerance (backends that only sum in another
/// order differ by ~1e-6 relative; a wrong kernel by O(1)).
pub const F32: Tolerance = Tolerance {
    atol: crate::demo::ATOL,
    rtol: crate::demo::RTOL,
    label: "f32",
};

/// bf16/f16: a bf16 value carries 8 significant bits (steps of 2^-8 to
/// 2^-7 relative), and where a backend rounds intermediates (after each
/// matmul, before or after the bias) is its own choice, so results differ
/// by a step or two: 2e-2 absolute + 2e-2 relative, about two steps at
/// magnitude 1 (the MLX plugin's bf16 MLP differs from the CPU backend's
/// by one, 7.8e-3). A wrong kernel still differs by O(1).
pub const LOW_PRECISION: Tolerance = Tolerance {
    atol: 2e-2,
    rtol: 2e-2,
    label: "bf16/f16",
};

/// The tolerance for `graph`: the low-precision one when any input,
/// param or output is bf16 or f16.
pub fn tolerance_for(graph: &Graph) -> Tolerance {
    let low = |d: DType| matches!(d, DType::BF16 | DType::F16);
    let boundary = graph
        .nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Input { .. } | Op::Param { .. }))
        .any(|n| low(n.shape.dtype()));
    let output = graph.outputs.iter().any(|id| low(graph.shape(*id).dtype()));
    if boundary || output {
        LOW_PRECISION
    } else {
        F32
    }
}

fn within(got: &[f32], want: &[f32], tol: Tolerance) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(&a, &b)| {
            let (a, b) = (a as f64, b as f64);
            (a - b).abs() <= tol.atol + tol.rtol * b.abs() || (a.is_nan() && b.is_nan()) || a == b
        })
}

/// Fill the error columns of the `rlx` rows: `rows[i]`'s outputs are in
/// `files[i]`; the reference is the `cpu` row. Rows that did not run, and
/// every row when the CPU row did not run, keep empty error columns.
pub fn against_cpu(rows: &mut [Row], files: &[&Path], tol: Tolerance) {
    let Some(cpu) = rows
        .iter()
        .position(|r| r.requested == "cpu" && r.status == Status::Ok)
    else {
        return;
    };
    let reference = match outputs::read(files[cpu]) {
        Ok(r) => r,
        Err(e) => {
            rows[cpu] = rows[cpu]
                .clone()
                .failed(format!("its outputs cannot be read back: {e}"));
            return;
        }
    };
    rows[cpu].max_abs_err = Some(0.0);
    rows[cpu].max_rel_err = Some(0.0);
    rows[cpu].reference = Some("cpu".into());
    for (i, row) in rows.iter_mut().enumerate() {
        if i == cpu || row.status != Status::Ok || row.source != "rlx" {
            continue;
        }
        let got = match outputs::read(files[i]) {
            Ok(g) => g,
            Err(e) => {
                *row = row
                    .clone()
                    .failed(format!("its outputs cannot be read back: {e}"));
                continue;
            }
        };
        match run::parity(&got, &reference) {
            Ok(errs) => {
                row.max_abs_err = Some(errs.iter().map(|e| e.0).fold(0.0, f64::max));
                row.max_rel_err = Some(errs.iter().map(|e| e.1).fold(0.0, f64::max));
                row.reference = Some("cpu".into());
                if !got.iter().zip(&reference).all(|(g, r)| within(g, r, tol)) {
                    row.status = Status::Mismatch;
                    row.error = Some(format!(
                        "outputs differ from the cpu row's beyond {:e} + {:e} * |cpu| ({})",
                        tol.atol, tol.rtol, tol.label
                    ));
                }
            }
            Err(e) => {
                *row = row
                    .clone()
                    .failed(format!("outputs do not match the cpu row's: {e}"));
            }
        }
    }
}

/// `median / cpu's median` for every row with a median.
pub fn ratios(rows: &mut [Row]) {
    let cpu = rows
        .iter()
        .find(|r| r.requested == "cpu" && r.status == Status::Ok)
        .and_then(|r| r.median_ms)
        .filter(|m| *m > 0.0);
    for r in rows.iter_mut() {
        r.ratio_vs_cpu = match (r.median_ms, cpu) {
            (Some(m), Some(c)) => Some(m / c),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(req: &str) -> Row {
        let mut r = Row::empty(req, None, req, "rlx");
        r.median_ms = Some(2.0);
        r
    }

    #[test]
    fn a_wrong_answer_is_a_mismatch_and_errors_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        outputs::write(&p("cpu"), &[vec![1.0, 2.0]]).unwrap();
        outputs::write(&p("good"), &[vec![1.0, 2.0 + 1e-6]]).unwrap();
        outputs::write(&p("bad"), &[vec![1.0, 3.0]]).unwrap();
        let mut rows = vec![row("cpu"), row("mlx:lazy"), row("mlx:eager")];
        let (c, g, b) = (p("cpu"), p("good"), p("bad"));
        against_cpu(&mut rows, &[&c, &g, &b], F32);
        assert_eq!(rows[0].max_abs_err, Some(0.0));
        assert_eq!(rows[1].status, Status::Ok);
        assert!(rows[1].max_abs_err.unwrap() < 1e-5);
        assert_eq!(rows[2].status, Status::Mismatch);
        assert_eq!(rows[2].max_abs_err, Some(1.0));
        rows[1].median_ms = Some(1.0);
        ratios(&mut rows);
        assert_eq!(rows[1].ratio_vs_cpu, Some(0.5));
    }

    #[test]
    fn bf16_graphs_get_the_low_precision_tolerance() {
        let g = super::super::builtins::builtin("mlp-bf16").unwrap().graph;
        assert_eq!(tolerance_for(&g), LOW_PRECISION);
        let g = super::super::builtins::builtin("mlp").unwrap().graph;
        assert_eq!(tolerance_for(&g), F32);
    }
}
