//! Random numbers and sampling on the MLX plugin: RngUniform, RngNormal and
//! Sample reproduce rlx's Philox4×32-10 stream (default `RngOptions`:
//! Philox, seed 42, mixed with the node's key) and rlx-cpu's sampler.
//!
//! The CPU reference (`run_cpu`: `Session::new(Device::Cpu)`, default
//! `RngOptions`) is checked against an independent reference too — the
//! stream computed directly with `rlx_ir::Philox4x32` — so a skipped kernel
//! (zeros) or a different seed policy in the reference would be caught.

use rlx_ir::{DType as IrDType, Graph, NodeId, Op, Philox4x32, RngOptions, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{
    check_against, mlx, random_values, run_cpu, run_mlx, Feed, Tol, MODES,
};

fn s(dims: &[usize]) -> Shape {
    Shape::new(dims, IrDType::F32)
}

/// An RngUniform/RngNormal graph; with `template`, the ONNX `*Like` form
/// (one input whose shape the output takes).
fn rng_graph(op: Op, dims: &[usize], template: bool) -> Graph {
    let mut g = Graph::new("rng");
    let inputs: Vec<NodeId> = if template {
        vec![g.input("t", s(dims))]
    } else {
        vec![]
    };
    let r = g.append_node(op, inputs, s(dims), Some("rng".into()));
    g.set_outputs(vec![r]);
    g
}

fn feeds_for(g: &Graph, dims: &[usize], template: bool) -> Vec<Feed> {
    let _ = g;
    if template {
        let n = dims.iter().product();
        vec![Feed {
            name: "t".into(),
            values: random_values(n, IrDType::F32, -1.0, 1.0, 3),
        }]
    } else {
        vec![]
    }
}

fn mlx_out(what: &str, g: &Graph, feeds: &[Feed], mode: Mode) -> Vec<f32> {
    let outs = run_mlx(g, feeds, mode).unwrap_or_else(|e| panic!("{what} [{}]: {e}", mode.name()));
    assert_eq!(outs.len(), 1, "{what}: output count");
    outs[0].to_f32_vec().unwrap()
}

const SHAPES: &[&[usize]] = &[&[1], &[7], &[3, 5], &[2, 3, 5], &[2, 1, 3, 13], &[1031]];

/// Independent reference: rlx's Philox stream with the default policy.
fn philox_for(key: u64) -> Philox4x32 {
    let o = RngOptions::default();
    Philox4x32::new(rlx_ir::combine_seed(o.seed, key))
}

#[test]
fn rng_uniform_is_bit_identical_to_cpu() {
    let cases: &[(f32, f32, u64)] = &[
        (0.0, 1.0, 0),
        (-2.0, 3.0, 7),
        (0.25, 0.75, 0xDEAD_BEEF_1234),
        (-1e2, 1e2, u64::MAX),
    ];
    for (ci, &(low, high, key)) in cases.iter().enumerate() {
        for (si, dims) in SHAPES.iter().enumerate() {
            let template = (ci + si) % 2 == 1;
            // The ONNX per-op seed only steers the Ort backend; under
            // Philox rlx-cpu ignores it, and so does the plugin.
            let op_seed = if ci == 1 { Some(5.0) } else { None };
            let op = Op::RngUniform {
                low,
                high,
                key,
                op_seed,
            };
            let g = rng_graph(op, dims, template);
            let feeds = feeds_for(&g, dims, template);
            let what = format!("uniform[{low},{high}) key={key} {dims:?} template={template}");
            let cpu = run_cpu(&g, &feeds).remove(0);
            let n: usize = dims.iter().product();
            let mut rng = philox_for(key);
            let indep: Vec<f32> = (0..n).map(|_| rng.uniform(low, high)).collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&cpu),
                bits(&indep),
                "{what}: CPU reference vs Philox4x32"
            );
            for mode in MODES {
                let got = mlx_out(&what, &g, &feeds, mode);
                assert_eq!(
                    bits(&got),
                    bits(&cpu),
                    "{what} [{}]: f32 bits differ from CPU",
                    mode.name()
                );
            }
        }
    }
}

#[test]
fn rng_normal_matches_cpu() {
    // Box-Muller through MLX's log/sqrt/cos vs Rust's libm: a few ulps of
    // f32 per transcendental. 1e-6 relative (with a 1e-6 absolute floor for
    // samples near a zero of cos) bounds it.
    let tol = Tol {
        abs: 1e-6,
        rel: 1e-6,
    };
    let cases: &[(f32, f32, u64)] = &[(0.0, 1.0, 0), (0.5, 2.0, 3), (-1.0, 0.1, 0xFFFF_0000_1234)];
    for (ci, &(mean, scale, key)) in cases.iter().enumerate() {
        for (si, dims) in SHAPES.iter().enumerate() {
            let template = (ci + si) % 2 == 0;
            let op = Op::RngNormal {
                mean,
                scale,
                key,
                op_seed: None,
            };
            let g = rng_graph(op, dims, template);
            let feeds = feeds_for(&g, dims, template);
            let what = format!("normal({mean},{scale}) key={key} {dims:?} template={template}");
            let cpu = run_cpu(&g, &feeds);
            let n: usize = dims.iter().product();
            let mut rng = philox_for(key);
            let indep: Vec<f32> = (0..n).map(|_| mean + scale * rng.normal()).collect();
            assert_eq!(cpu[0], indep, "{what}: CPU reference vs Philox4x32");
            // check_against runs lazy, eager and compiled (f32 graph).
            check_against(&what, &g, &feeds, &cpu, tol);
        }
    }
}

/// Sample graph: logits `[.., vocab]` → one id per row.
fn sample_graph(
    logit_dims: &[usize],
    out_dims: &[usize],
    top_k: usize,
    top_p: f32,
    temperature: f32,
    seed: u64,
) -> Graph {
    let mut g = Graph::new("sample");
    let x = g.input("logits", s(logit_dims));
    let o = g.sample(x, top_k, top_p, temperature, seed, s(out_dims));
    g.set_outputs(vec![o]);
    g
}

#[test]
fn sample_picks_the_same_token_as_cpu() {
    // (top_k, top_p, temperature)
    let settings: &[(usize, f32, f32)] = &[
        (0, 1.0, 1.0),
        (5, 1.0, 0.7),
        (0, 0.9, 1.3),
        (3, 0.5, 0.5),
        (0, 0.0, 1.0),
        (1, 1.0, 1.0),
        (50, 0.95, 2.0),
        (0, 1.0, 0.0),
    ];
    let shapes: &[(&[usize], &[usize])] = &[
        (&[1, 11], &[1]),
        (&[4, 37], &[4]),
        (&[2, 3, 50], &[2, 3]),
        (&[13], &[1]),
        (&[9, 129], &[9]),
    ];
    let seeds = [0u64, 1, 12345, 0xFFFF_FFFF_FFFF];
    let mut cases = 0;
    let mut nonzero = 0;
    for (i, &(k, p, t)) in settings.iter().enumerate() {
        for (j, &(ld, od)) in shapes.iter().enumerate() {
            let seed = seeds[(i + j) % seeds.len()];
            let g = sample_graph(ld, od, k, p, t, seed);
            let n: usize = ld.iter().product();
            let vocab = *ld.last().unwrap();
            // Logits spread over [-4, 4) so the distributions are neither
            // flat nor one-hot.
            let feeds = vec![Feed {
                name: "logits".into(),
                values: random_values(n, IrDType::F32, -4.0, 4.0, 100 + (i * 10 + j) as u64),
            }];
            let what = format!("sample k={k} p={p} t={t} seed={seed} {ld:?}");
            let cpu = run_cpu(&g, &feeds).remove(0);
            assert!(
                cpu.iter()
                    .all(|v| v.fract() == 0.0 && *v >= 0.0 && (*v as usize) < vocab),
                "{what}: CPU ids {cpu:?}"
            );
            for mode in MODES {
                let got = mlx_out(&what, &g, &feeds, mode);
                assert_eq!(got, cpu, "{what} [{}]: sampled ids", mode.name());
            }
            cases += 1;
            nonzero += cpu.iter().filter(|v| **v != 0.0).count();
        }
    }
    assert!(cases > 30);
    // The reference is a real sampler, not a skipped kernel's zeros.
    assert!(nonzero > cases, "{nonzero} nonzero ids over {cases} cases");
}

#[test]
fn sample_top_k_one_is_argmax() {
    // Independent check of the reference: top_k = 1 leaves one token.
    let g = sample_graph(&[6, 23], &[6], 1, 1.0, 1.0, 9);
    let values = random_values(6 * 23, IrDType::F32, -1.0, 1.0, 77);
    let want: Vec<f32> = values
        .chunks(23)
        .map(|r| {
            let mut best = 0;
            for (i, v) in r.iter().enumerate() {
                if *v > r[best] {
                    best = i;
                }
            }
            best as f32
        })
        .collect();
    let feeds = vec![Feed {
        name: "logits".into(),
        values,
    }];
    assert_eq!(run_cpu(&g, &feeds)[0], want);
    for mode in MODES {
        assert_eq!(mlx_out("sample argmax", &g, &feeds, mode), want);
    }
}

#[test]
fn sample_with_fewer_outputs_than_rows_fails_at_compile_naming_the_node() {
    // rlx-cpu samples only the first rows when the output is shorter than
    // the logit rows; the plugin does not lower that variant.
    let mut g = Graph::new("bad");
    let x = g.input("logits", s(&[4, 10]));
    let o = g.append_node(
        Op::Sample {
            top_k: 0,
            top_p: 1.0,
            temperature: 1.0,
            seed: 3,
        },
        vec![x],
        s(&[2]),
        Some("short_sample".into()),
    );
    g.set_outputs(vec![o]);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let e = mlx()
        .compile(&text, Mode::Lazy)
        .err()
        .expect("compile must fail");
    assert!(
        e.message.contains("short_sample") || e.message.contains("Sample"),
        "{e}"
    );
    assert!(e.message.contains("not lowered"), "{e}");
}

/// A non-default global seed reaches the plugin in the compile options: the
/// plugin draws the stream the CPU backend draws with that seed, through the
/// ABI directly and through `Session::new(Device::Mlx)`.
#[test]
fn a_non_default_seed_reaches_the_plugin() {
    use rlx_plugin_api::tables::rng_policy;
    use rlx_plugin_api::CompileOptions;
    use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
    use rlx_runtime::{Device, Session};
    let dims = [3, 7];
    let key = 11;
    let g = rng_graph(
        Op::RngUniform {
            low: -2.0,
            high: 3.0,
            key,
            op_seed: None,
        },
        &dims,
        false,
    );
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    for seed in [7u64, 0xDEAD_BEEF_0000_0001] {
        // Independent reference: rlx's Philox stream for (seed, key).
        let mut rng = Philox4x32::new(rlx_ir::combine_seed(seed, key));
        let want: Vec<f32> = (0..21).map(|_| rng.uniform(-2.0, 3.0)).collect();
        let cpu_opts = rlx_runtime::CompileOptions::new().rng(RngOptions::philox(seed));
        let cpu = Session::new(Device::Cpu)
            .compile_with(g.clone(), &cpu_opts)
            .run(&[])
            .remove(0);
        assert_eq!(
            cpu.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        for mode in rlx_plugin_tests::parity::MODES {
            let opts = CompileOptions {
                mode,
                rng_policy: rng_policy::PHILOX,
                rng_seed: seed,
                device: None,
                memory_limit: None,
            };
            let mut exe = mlx().compile_with(&text, &opts).unwrap();
            let got = exe.run(&[]).unwrap()[0].to_f32_vec().unwrap();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "seed {seed} [{}]",
                mode.name()
            );
        }
        register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
        let via_session = with_mode(Mode::Eager, || {
            Session::new(Device::Mlx)
                .compile_with(g.clone(), &cpu_opts)
                .run(&[])
                .remove(0)
        });
        assert_eq!(
            via_session, want,
            "seed {seed} through Session::new(Device::Mlx)"
        );
    }
    // A policy the plugin does not lower is refused at compile, naming the node.
    let opts = CompileOptions {
        mode: Mode::Lazy,
        rng_policy: rng_policy::ORT,
        rng_seed: 1,
        device: None,
        memory_limit: None,
    };
    let e = mlx().compile_with(&text, &opts).err().unwrap();
    assert!(
        e.message.contains("RngUniform") && e.message.contains("not lowered"),
        "{e}"
    );
}
