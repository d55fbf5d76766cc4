//! The two-layer MLP the training tests learn with, in plain f64: an
//! independent reference for its loss.

/// The mean softmax cross-entropy of `relu(x · w1 + b1) · w2 + b2` over
/// the rows of `x` (`[n, d]`, row-major) against class indices `labels`
/// (`[n]`, stored as f32). `w1` is `[d, h]`, `w2` `[h, c]`; the sizes come
/// from `b1` (h) and `b2` (c).
pub fn mean_cross_entropy(
    x: &[f32],
    labels: &[f32],
    w1: &[f64],
    b1: &[f64],
    w2: &[f64],
    b2: &[f64],
) -> f64 {
    let (h, c) = (b1.len(), b2.len());
    let n = labels.len();
    let d = x.len() / n;
    let mut total = 0.0;
    for (row, label) in x.chunks_exact(d).zip(labels) {
        let r: Vec<f64> = (0..h)
            .map(|j| {
                let s: f64 = row
                    .iter()
                    .enumerate()
                    .map(|(k, xk)| *xk as f64 * w1[k * h + j])
                    .sum();
                (b1[j] + s).max(0.0)
            })
            .collect();
        let z: Vec<f64> = (0..c)
            .map(|k| {
                b2[k]
                    + r.iter()
                        .enumerate()
                        .map(|(j, rj)| rj * w2[j * c + k])
                        .sum::<f64>()
            })
            .collect();
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        total += lse - z[*label as usize];
    }
    total / n as f64
}
