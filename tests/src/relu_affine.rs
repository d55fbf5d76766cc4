//! The small graph the concurrency and soak tests drive: `relu(x · w + b)`
//! with f32 `x [4, 8]`, param `w [8, 3]` and input `b [4, 3]`, its
//! deterministic inputs, and the formula in f64 as the reference.

/// The graph as `.rlxmodel` text.
pub const GRAPH: &str = "rlxmodel 1\nopset 1\n\ngraph @g {\n  %x = input : f32[4, 8]\n  \
%w = param : f32[8, 3]\n  %2 = MatMul %x, %w : f32[4, 3]\n  %b = input : f32[4, 3]\n  \
%4 = Binary(Add) %2, %b : f32[4, 3]\n  %5 = Activation(Relu) %4 : f32[4, 3]\n  return %5\n}\n";

/// `n` deterministic values in [-1, 1) for thread `t`, cycle `i`.
pub fn values(n: usize, t: usize, i: usize) -> Vec<f32> {
    (0..n)
        .map(|k| (((k * 7 + t * 13 + i * 5) % 17) as f32 - 8.0) / 8.0)
        .collect()
}

/// `relu(x · w + b)` in f64, rounded to f32.
pub fn reference(x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; 12];
    for r in 0..4 {
        for c in 0..3 {
            let mut s = b[r * 3 + c] as f64;
            for k in 0..8 {
                s += x[r * 8 + k] as f64 * w[k * 3 + c] as f64;
            }
            out[r * 3 + c] = s.max(0.0) as f32;
        }
    }
    out
}
