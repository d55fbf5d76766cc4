//! Parity of the MLX plugin's signal ops (Fft, LogMel, LogMelBackward,
//! WelchPeaks) against rlx-runtime's CPU backend.
//!
//! All four read rlx's 2N block layout: the last axis holds the N real
//! parts then the N imaginary parts.
//!
//! Tolerances: rlx-cpu runs its own radix-2/4 FFT (powers of two), a naive
//! DFT (other n <= 16) or Bluestein (other n > 16) in f32; MLX runs
//! pocketfft on complex64. Both are O(eps·log n) accurate relative to the
//! size of the spectrum (Bluestein through three FFTs of size >= 2n, so a
//! few times more), and random inputs in [-1, 1) give spectra of rms about
//! sqrt(n/3). So the FFT tolerance is absolute, scaled by
//! eps · (log2 n + 1) · sqrt(n) · |norm scale| with a constant factor, plus
//! 1e-5 relative.

use rlx_ir::fft::{FftAlgo, FftNorm};
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{
    assert_close, check_against, check_parity, mlx, random_feeds, random_values, run_cpu, Feed, Tol,
};

const F32: IrDType = IrDType::F32;

fn s(dims: &[usize]) -> Shape {
    Shape::new(dims, F32)
}

/// The FFT tolerance for length `n` (see the module comment).
fn fft_tol(n: usize, norm: FftNorm, inverse: bool) -> Tol {
    let scale = norm.output_scale(n, inverse) as f32;
    let log = (n as f32).log2() + 1.0;
    Tol {
        abs: 8.0 * f32::EPSILON * log * (n as f32).sqrt() * scale,
        rel: 1e-5,
    }
}

fn fft_graph(dims: &[usize], inverse: bool, norm: FftNorm) -> Graph {
    let mut g = Graph::new("fft");
    let x = g.input("x", s(dims));
    let y = g.fft_norm(x, inverse, norm);
    g.set_outputs(vec![y]);
    g
}

const NORMS: [FftNorm; 3] = [FftNorm::Backward, FftNorm::Forward, FftNorm::Ortho];

/// Powers of two (radix-2 and radix-4 paths on the CPU), and odd, prime and
/// composite non-powers (naive DFT for n <= 16, Bluestein above).
const SIZES: [usize; 12] = [1, 2, 4, 8, 64, 256, 1024, 3, 7, 12, 17, 127];

#[test]
fn fft_parity_sizes_norms_directions() {
    for (i, &n) in SIZES.iter().enumerate() {
        // Rank 1 to 3 across the sizes; the leading axes are batch rows.
        let dims: Vec<usize> = match i % 3 {
            0 => vec![2 * n],
            1 => vec![3, 2 * n],
            _ => vec![2, 3, 2 * n],
        };
        for norm in NORMS {
            for inverse in [false, true] {
                let g = fft_graph(&dims, inverse, norm);
                check_parity(
                    &format!("fft n={n} {dims:?} {norm:?} inverse={inverse}"),
                    &g,
                    100 + i as u64,
                    fft_tol(n, norm, inverse),
                );
            }
        }
    }
}

/// Forward then inverse under each norm pairing that is the identity, and
/// the unnormalised pair that gives n·x. Checked against the CPU and against
/// the input itself (an independent reference).
#[test]
fn fft_round_trip() {
    for &n in &[8usize, 17, 100, 512] {
        for (fwd, inv, gain) in [
            (FftNorm::Forward, FftNorm::Forward, 1.0f32),
            (FftNorm::Ortho, FftNorm::Ortho, 1.0),
            (FftNorm::Backward, FftNorm::Backward, n as f32),
        ] {
            let mut g = Graph::new("fft_rt");
            let x = g.input("x", s(&[4, 2 * n]));
            let y = g.fft_norm(x, false, fwd);
            let z = g.fft_norm(y, true, inv);
            g.set_outputs(vec![z]);
            // Two transforms: twice the single-FFT error, in output units.
            let t = fft_tol(n, FftNorm::Backward, false);
            let tol = Tol {
                abs: 2.0 * t.abs * gain / (n as f32).sqrt(),
                rel: 1e-5,
            };
            let what = format!("fft round trip n={n} {fwd:?}/{inv:?}");
            check_parity(&what, &g, 7 + n as u64, tol);
            let feeds = random_feeds(&g, 7 + n as u64);
            let want: Vec<f32> = feeds[0].values.iter().map(|v| v * gain).collect();
            check_against(&format!("{what} vs x·{gain}"), &g, &feeds, &[want], tol);
        }
    }
}

/// A plain-Rust f64 DFT as an independent reference for one case (so the
/// CPU reference is itself checked).
#[test]
fn fft_matches_f64_dft() {
    let n = 31usize;
    let g = fft_graph(&[2, 2 * n], false, FftNorm::Ortho);
    let feeds = random_feeds(&g, 3);
    let x = &feeds[0].values;
    let mut want = vec![0f32; 4 * n];
    for r in 0..2 {
        let row = &x[r * 2 * n..(r + 1) * 2 * n];
        for k in 0..n {
            let (mut re, mut im) = (0f64, 0f64);
            for t in 0..n {
                let a = -2.0 * std::f64::consts::PI * (k * t) as f64 / n as f64;
                let (xr, xi) = (row[t] as f64, row[n + t] as f64);
                re += xr * a.cos() - xi * a.sin();
                im += xr * a.sin() + xi * a.cos();
            }
            let sc = 1.0 / (n as f64).sqrt();
            want[r * 2 * n + k] = (re * sc) as f32;
            want[r * 2 * n + n + k] = (im * sc) as f32;
        }
    }
    let tol = fft_tol(n, FftNorm::Ortho, false);
    assert_close("cpu fft vs f64 dft", &run_cpu(&g, &feeds)[0], &want, tol);
    check_against("mlx fft vs f64 dft", &g, &feeds, &[want], tol);
}

/// Spectrum feed: random block layout, with the first `quiet` bins (re and
/// im) scaled by 1e-5 so that some mel energies fall more than 8 decades
/// below the frame's maximum and hit the floor.
fn spectrum_feed(outer: usize, n_fft: usize, quiet: usize, seed: u64) -> Vec<f32> {
    let mut v = random_values(outer * 2 * n_fft, F32, -1.0, 1.0, seed);
    for o in 0..outer {
        for k in 0..quiet.min(n_fft) {
            v[o * 2 * n_fft + k] *= 1e-5;
            v[o * 2 * n_fft + n_fft + k] *= 1e-5;
        }
    }
    v
}

fn mel_bank(n_fft: usize, n_mels: usize) -> Vec<f32> {
    rlx_ir::filterbank::mel_filterbank(16000.0, n_fft, n_mels, 0.0, 8000.0)
}

#[test]
fn log_mel_parity() {
    // (spectrum dims without the last axis, n_fft, n_mels, quiet bins)
    let cases: [(&[usize], usize, usize, usize); 5] = [
        (&[], 16, 4, 0),
        (&[5], 64, 8, 6),
        (&[2, 3], 400, 80, 40),
        (&[3, 1, 2], 33, 7, 3),
        (&[4], 2, 1, 0),
    ];
    for (i, (lead, n_fft, n_mels, quiet)) in cases.into_iter().enumerate() {
        let n_bins = n_fft / 2 + 1;
        let mut dims = lead.to_vec();
        dims.push(2 * n_fft);
        let outer: usize = lead.iter().product();
        let mut g = Graph::new("log_mel");
        let spec = g.input("spec", s(&dims));
        let filt = g.param("filt", s(&[n_mels, n_bins]));
        let y = g.log_mel(spec, filt);
        g.set_outputs(vec![y]);
        let bank = if n_fft >= 2 && i != 4 {
            mel_bank(n_fft, n_mels)
        } else {
            // n_fft = 2: a hand-made non-negative bank.
            vec![0.5, 1.0]
        };
        let feeds = vec![
            Feed {
                name: "spec".into(),
                values: spectrum_feed(outer, n_fft, quiet, 40 + i as u64),
            },
            Feed {
                name: "filt".into(),
                values: bank,
            },
        ];
        let reference = run_cpu(&g, &feeds);
        if quiet > 0 {
            // The floor (max − 8 → (max−8+4)/4) must actually be hit.
            let out = &reference[0];
            let hit = out.chunks(n_mels).any(|f| {
                let m = f.iter().cloned().fold(f32::MIN, f32::max);
                f.iter().any(|v| (*v - (m - 2.0)).abs() < 1e-6)
            });
            assert!(hit, "case {i}: no mel value hit the floor");
        }
        // Outputs are (log10(E)+4)/4 of order 1: the n_bins-term dot product
        // (a matmul on MLX, a sequential sum on the CPU) is good to about
        // n_bins·eps relative in E, i.e. ~n_bins·eps/(4·ln10) absolute.
        let tol = Tol {
            abs: 1e-5 + n_bins as f32 * f32::EPSILON / 4.0,
            rel: 1e-5,
        };
        check_against(
            &format!("log_mel case {i} {dims:?}"),
            &g,
            &feeds,
            &reference,
            tol,
        );
    }
    // Random filters in [-1, 1) (negative weights, dense rows): the default
    // seeded feeds straight into check_parity. Dense sums with cancellation
    // lose more of E's relative precision, hence the looser absolute part.
    let mut g = Graph::new("log_mel_rand");
    let spec = g.input("spec", s(&[3, 2 * 20]));
    let filt = g.input("filt", s(&[5, 11]));
    let y = g.log_mel(spec, filt);
    g.set_outputs(vec![y]);
    check_parity(
        "log_mel random filters",
        &g,
        5,
        Tol {
            abs: 2e-5,
            rel: 1e-5,
        },
    );
}

#[test]
fn log_mel_backward_parity() {
    let cases: [(&[usize], usize, usize, usize); 4] = [
        (&[], 16, 4, 0),
        (&[5], 64, 8, 6),
        (&[2, 3], 400, 80, 40),
        (&[3, 1, 2], 33, 7, 3),
    ];
    for (i, (lead, n_fft, n_mels, quiet)) in cases.into_iter().enumerate() {
        let n_bins = n_fft / 2 + 1;
        let mut dims = lead.to_vec();
        dims.push(2 * n_fft);
        let mut dy_dims = lead.to_vec();
        dy_dims.push(n_mels);
        let outer: usize = lead.iter().product();
        let mut g = Graph::new("log_mel_bwd");
        let spec = g.input("spec", s(&dims));
        let filt = g.param("filt", s(&[n_mels, n_bins]));
        let dy = g.input("dy", s(&dy_dims));
        let d = g.log_mel_backward(spec, filt, dy);
        g.set_outputs(vec![d]);
        let feeds = vec![
            Feed {
                name: "spec".into(),
                values: spectrum_feed(outer, n_fft, quiet, 60 + i as u64),
            },
            Feed {
                name: "filt".into(),
                values: mel_bank(n_fft, n_mels),
            },
            Feed {
                name: "dy".into(),
                values: random_values(outer * n_mels, F32, -1.0, 1.0, 70 + i as u64),
            },
        ];
        let reference = run_cpu(&g, &feeds);
        // d_spec[k] = 2·re_k·Σ_m dy_m/(4·E_m·ln10)·F_mk: the CPU sums the
        // mel terms one by one, MLX as a matmul (and E itself differs in the
        // last bits, see log_mel_parity), so a few n_bins·eps relative, with
        // the absolute part scaled to the largest gradient (the quiet bins'
        // energies are tiny, so their gradients are large).
        let peak = reference[0].iter().fold(0f32, |m, v| m.max(v.abs()));
        let tol = Tol {
            abs: 1e-6 * peak,
            rel: 1e-5 + 4.0 * n_bins as f32 * f32::EPSILON,
        };
        check_against(
            &format!("log_mel_backward case {i} {dims:?}"),
            &g,
            &feeds,
            &reference,
            tol,
        );
    }
}

fn welch_graph(rows: usize, n_fft: usize, k: usize, segs: usize) -> Graph {
    let mut g = Graph::new("welch");
    let spec = g.input("spec", s(&[rows, 2 * n_fft]));
    let y = g.welch_peaks(spec, k, segs);
    g.set_outputs(vec![y]);
    g
}

#[test]
fn welch_peaks_parity() {
    // (batch, n_segments, n_fft, k)
    for (i, &(batch, segs, n_fft, k)) in [
        (1usize, 1usize, 8usize, 1usize),
        (2, 3, 32, 4),
        (3, 2, 17, 9),
        (1, 5, 256, 16),
        (4, 1, 2, 2),
    ]
    .iter()
    .enumerate()
    {
        let g = welch_graph(batch * segs, n_fft, k, segs);
        // Bins are exact integers; the powers are sums of n_segments
        // products: a few eps relative.
        check_parity(
            &format!("welch_peaks batch={batch} segs={segs} n_fft={n_fft} k={k}"),
            &g,
            200 + i as u64,
            Tol {
                abs: 1e-6,
                rel: 4.0 * f32::EPSILON * segs as f32,
            },
        );
    }
}

/// Equal powers everywhere: the order must break ties to the lower bin, as
/// rlx's insertion top-k does.
#[test]
fn welch_peaks_ties() {
    let (batch, segs, n_fft, k) = (2usize, 2usize, 16usize, 6usize);
    let g = welch_graph(batch * segs, n_fft, k, segs);
    let mut v = vec![0.5f32; batch * segs * 2 * n_fft];
    // Batch row 1: bins 3 and 5 louder, equal to each other.
    for seg in 0..segs {
        let base = (segs + seg) * 2 * n_fft;
        v[base + 3] = 2.0;
        v[base + 5] = 2.0;
    }
    let feeds = vec![Feed {
        name: "spec".into(),
        values: v,
    }];
    let reference = run_cpu(&g, &feeds);
    // Row 0: bins 1..=6 tie (DC and Nyquist carry half weight).
    let bins0: Vec<f32> = reference[0][..2 * k].iter().step_by(2).cloned().collect();
    assert_eq!(bins0, vec![1., 2., 3., 4., 5., 6.]);
    let bins1: Vec<f32> = reference[0][2 * k..].iter().step_by(2).cloned().collect();
    assert_eq!(bins1, vec![3., 5., 1., 2., 4., 6.]);
    check_against(
        "welch_peaks ties",
        &g,
        &feeds,
        &reference,
        Tol {
            abs: 0.0,
            rel: 1e-6,
        },
    );
}

/// Variants the plugin does not lower fail at compile, naming the node.
#[test]
fn unlowered_variants_fail_at_compile() {
    let p = mlx();
    // k > n_bins: rlx leaves part of the row unwritten.
    let g = welch_graph(2, 8, 6, 1);
    let e = p
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("k > n_bins is not lowered");
    assert!(
        e.message.contains("node %1") && e.message.contains("not lowered"),
        "{e}"
    );
    // The pocketfft rounding variant is its own op kind, claimed for F32
    // and F64 (tests/pocketfft_kernel.rs), not for C64.
    let mut g = Graph::new("pocket");
    let x = g.input("x", Shape::new(&[2, 16], IrDType::C64));
    let y = g.fft_algo(x, false, FftNorm::Backward, FftAlgo::SCIPY);
    g.set_outputs(vec![y]);
    let e = p
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("FftPocketFft on c64 is not lowered");
    assert!(
        e.message.contains("node %1") && e.message.contains("FftPocketFft"),
        "{e}"
    );
}

/// The C64 layout (interleaved `[re, im]` per element): fed as raw bytes
/// (the f32 feed helpers cannot write c64), checked against a plain-Rust
/// f64 DFT (independent reference) and against the CPU backend.
/// Ignored: the plugin's Input rows (lower/io.rs) do not bind c64 yet, so
/// Fft does not claim C64 (the lowering computes it; see signal.rs).
#[test]
fn fft_c64_parity() {
    use rlx_plugin_api::{DType, HostTensor};
    for (i, &n) in [1usize, 8, 12, 17, 64].iter().enumerate() {
        for norm in NORMS {
            for inverse in [false, true] {
                let rows = 3usize;
                let mut g = Graph::new("fft_c64");
                let x = g.input("x", Shape::new(&[rows, n], IrDType::C64));
                let y = g.fft_norm(x, inverse, norm);
                g.set_outputs(vec![y]);
                // Interleaved re/im pairs.
                let v = random_values(rows * n * 2, F32, -1.0, 1.0, 300 + i as u64);
                let sign = if inverse { 1.0 } else { -1.0 };
                let sc = norm.output_scale(n, inverse);
                let mut want = vec![0f32; rows * n * 2];
                for r in 0..rows {
                    for k in 0..n {
                        let (mut re, mut im) = (0f64, 0f64);
                        for t in 0..n {
                            let a =
                                sign * 2.0 * std::f64::consts::PI * (k * t % n) as f64 / n as f64;
                            let (xr, xi) =
                                (v[(r * n + t) * 2] as f64, v[(r * n + t) * 2 + 1] as f64);
                            re += xr * a.cos() - xi * a.sin();
                            im += xr * a.sin() + xi * a.cos();
                        }
                        want[(r * n + k) * 2] = (re * sc) as f32;
                        want[(r * n + k) * 2 + 1] = (im * sc) as f32;
                    }
                }
                let what = format!("fft c64 n={n} {norm:?} inverse={inverse}");
                let tol = fft_tol(n, norm, inverse);
                let cpu = run_cpu(
                    &g,
                    &[Feed {
                        name: "x".into(),
                        values: v.clone(),
                    }],
                );
                assert_close(&format!("{what} cpu vs f64 dft"), &cpu[0], &want, tol);
                let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                let t = HostTensor::new(DType::C64, vec![rows, n], bytes).unwrap();
                for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
                    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
                    let mut exe = mlx().compile(&text, mode).unwrap();
                    let out = exe.run(&[("x", &t)]).unwrap();
                    assert_eq!(out[0].dtype, DType::C64, "{what}");
                    let got: Vec<f32> = out[0]
                        .data
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                        .collect();
                    assert_close(
                        &format!("{what} [{}] vs f64 dft", mode.name()),
                        &got,
                        &want,
                        tol,
                    );
                    assert_close(
                        &format!("{what} [{}] vs cpu", mode.name()),
                        &got,
                        &cpu[0],
                        tol,
                    );
                }
            }
        }
    }
}
