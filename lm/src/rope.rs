//! Rotary position tables: `cos` and `sin` of `position * frequency`, one
//! row per position, one column per rotated pair (`head_dim / 2`),
//! computed in f64 on the host (MLX's `fast.rope`, which mlx-lm calls,
//! computes the same angles in f32 on the device).

use crate::config::{ModelConfig, RopeScaling};

/// The angle per position of each rotated pair `i` (`0 .. head_dim/2`),
/// as mlx-lm's `initialize_rope` makes them for the config's scaling.
pub fn frequencies(c: &ModelConfig) -> Vec<f64> {
    let d = c.head_dim as f64;
    let base: Vec<f64> = (0..c.head_dim / 2)
        .map(|i| c.rope_theta.powf(-((2 * i) as f64) / d))
        .collect();
    match &c.rope_scaling {
        RopeScaling::None => base,
        RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
        // mlx-lm's Llama3RoPE, on periods `1 / f`.
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        } => base
            .iter()
            .map(|&f| {
                let period = 1.0 / f;
                let wavelen = 2.0 * std::f64::consts::PI * period;
                let (low_wl, high_wl) = (old / low_freq_factor, old / high_freq_factor);
                let scaled = if wavelen > low_wl {
                    period * factor
                } else {
                    period
                };
                let smooth =
                    (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                let medium = wavelen > high_wl && wavelen < low_wl;
                let period = if medium {
                    scaled / ((1.0 - smooth) / factor + smooth)
                } else {
                    scaled
                };
                1.0 / period
            })
            .collect(),
    }
}

/// `(cos, sin)`, each `rows x head_dim/2`, row-major.
pub fn tables(c: &ModelConfig, rows: usize) -> (Vec<f32>, Vec<f32>) {
    let freqs = frequencies(c);
    let mut cos = Vec::with_capacity(rows * freqs.len());
    let mut sin = Vec::with_capacity(rows * freqs.len());
    for p in 0..rows {
        for f in &freqs {
            let a = p as f64 * f;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(scaling: RopeScaling) -> ModelConfig {
        let mut c = ModelConfig::parse(
            r#"{"model_type":"llama","vocab_size":8,"hidden_size":128,"intermediate_size":8,
                "num_hidden_layers":1,"num_attention_heads":1,"rms_norm_eps":1e-5,
                "rope_theta":500000}"#,
            "config.json",
        )
        .unwrap();
        c.rope_scaling = scaling;
        c
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let plain = frequencies(&config(RopeScaling::None));
        let scaled = frequencies(&config(RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        }));
        // Wavelength below 8192/4: unchanged; above 8192: divided by 32.
        assert_eq!(scaled[0], plain[0]);
        let last = plain.len() - 1;
        assert!((scaled[last] * 32.0 / plain[last] - 1.0).abs() < 1e-12);
        assert!(scaled
            .iter()
            .zip(&plain)
            .all(|(s, p)| *s <= p * (1.0 + 1e-12)));
    }

    #[test]
    fn row_zero_is_the_identity_rotation() {
        let (cos, sin) = tables(&config(RopeScaling::None), 3);
        assert_eq!(cos.len(), 3 * 64);
        assert!(cos[..64].iter().all(|&c| c == 1.0) && sin[..64].iter().all(|&s| s == 0.0));
        assert!((cos[64] - 1f64.cos() as f32).abs() < 1e-7);
    }
}
