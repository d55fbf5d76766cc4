//! Compiled mode's elementwise regions (`plugin-mlx/src/executable/fusion.rs`):
//! connected f32 arithmetic of one shape made one MLX kernel with several
//! outputs, where MLX's own fuser would cut it at every value read twice.
//!
//! References are f64 formulas in plain Rust (not another backend), at
//! 2e-6 relative + 1e-7 absolute: each value is a chain of at most a dozen
//! f32 operations, each rounding once. Every run's MLX primitives are
//! counted (`RLX_MLX_OP_COUNTS`), so the tests also see how many kernels a
//! run took. Its own test binary: the settings are read once per process,
//! and kernels are built in the run (`RLX_MLX_BACKGROUND_COMPILE=0`), else
//! a compiled executable's first runs are lazy.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, NodeId, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{assert_close, run_mlx, Feed, Tol};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

const TOL: Tol = Tol {
    abs: 1e-7,
    rel: 2e-6,
};

/// The op-count file, set up before the plugin reads its settings.
fn counts_file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let file = dir.join("counts.jsonl");
        // SAFETY: every test calls this first, before the plugin is loaded
        // or any thread reads the environment.
        unsafe {
            std::env::set_var("RLX_MLX_OP_COUNTS", &file);
            std::env::set_var("RLX_MLX_BACKGROUND_COMPILE", "0");
        }
        file
    })
}

/// The op counts of the last run of graph `name`.
fn last_counts(name: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(counts_file()).unwrap_or_default();
    let line = text
        .lines()
        .rfind(|l| l.contains(&format!("\"graph\":\"{name}\"")))
        .unwrap_or_else(|| panic!("no run of {name:?} was counted"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["ops"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
        .collect()
}

/// A named input's values.
fn feed(name: impl Into<String>, values: Vec<f32>) -> Feed {
    Feed {
        name: name.into(),
        values,
    }
}

fn fused_kernels(counts: &BTreeMap<String, u64>) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| k.starts_with("Compiled"))
        .map(|(_, n)| n)
        .sum()
}

fn values(n: usize, seed: u32, lo: f32, hi: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503));
            lo + (hi - lo) * ((h >> 8) as f32 / (1u32 << 24) as f32)
        })
        .collect()
}

/// One parameter's Adam update as rlx-runtime's `ResidentTrainer` builds it
/// (`fused_adam_graph` of 0.2.19: the freeze gate, the moments held when
/// frozen): outputs p', m', v'.
struct Adam {
    b1: f32,
    b2: f32,
    eps: f32,
}

impl Adam {
    #[allow(clippy::too_many_arguments)]
    fn build(
        &self,
        g: &mut Graph,
        name: &str,
        dims: &[usize],
        lr: NodeId,
        bc1: NodeId,
        bc2: NodeId,
    ) -> [NodeId; 3] {
        let s = Shape::new(dims, DType::F32);
        let p = g.input(name, s.clone());
        let grad = g.input(format!("{name}__g"), s.clone());
        let m = g.input(format!("{name}__m"), s.clone());
        let v = g.input(format!("{name}__v"), s);
        let gate = g.input(format!("{name}__scale"), Shape::scalar(DType::F32));
        let c_b1 = g.constant(self.b1 as f64, DType::F32);
        let c_1mb1 = g.constant((1.0 - self.b1) as f64, DType::F32);
        let c_b2 = g.constant(self.b2 as f64, DType::F32);
        let c_1mb2 = g.constant((1.0 - self.b2) as f64, DType::F32);
        let c_eps = g.constant(self.eps as f64, DType::F32);
        let md = g.mul(m, c_b1);
        let gs = g.mul(grad, c_1mb1);
        let m_new = g.add(md, gs);
        let sq = g.mul(grad, grad);
        let vd = g.mul(v, c_b2);
        let sqs = g.mul(sq, c_1mb2);
        let v_new = g.add(vd, sqs);
        let mhat = g.div(m_new, bc1);
        let vhat = g.div(v_new, bc2);
        let root = g.sqrt(vhat);
        let denom = g.add(root, c_eps);
        let ratio = g.div(mhat, denom);
        let update = g.mul(ratio, lr);
        let gated = g.mul(update, gate);
        let p_new = g.sub(p, gated);
        let one = g.constant(1.0, DType::F32);
        let hold = g.sub(one, gate);
        let mt = g.mul(m_new, gate);
        let mh = g.mul(m, hold);
        let m_kept = g.add(mt, mh);
        let vt = g.mul(v_new, gate);
        let vh = g.mul(v, hold);
        let v_kept = g.add(vt, vh);
        [p_new, m_kept, v_kept]
    }

    /// The same in f64: p', m', v' of one element.
    #[allow(clippy::too_many_arguments)]
    fn reference(&self, p: f64, g: f64, m: f64, v: f64, gate: f64, s: [f64; 3]) -> [f64; 3] {
        let [lr, bc1, bc2] = s;
        let (b1, b2) = (self.b1 as f64, self.b2 as f64);
        let m_new = m * b1 + g * (1.0 - self.b1) as f64;
        let v_new = v * b2 + g * g * (1.0 - self.b2) as f64;
        let ratio = (m_new / bc1) / ((v_new / bc2).sqrt() + self.eps as f64);
        [
            p - ratio * lr * gate,
            m_new * gate + m * (1.0 - gate),
            v_new * gate + v * (1.0 - gate),
        ]
    }
}

/// Two parameters of different (odd) shapes, each trained, frozen and
/// half-gated: every output agrees with the f64 update, and each
/// parameter's update (three outputs, the gate's `1 - gate` inside) is one
/// kernel: the run has two fused kernels and no separate arithmetic.
#[test]
fn an_adam_step_is_one_kernel_per_parameter_and_matches_f64() {
    counts_file();
    let adam = Adam {
        b1: 0.9,
        b2: 0.999,
        eps: 1e-8,
    };
    let mut g = Graph::new("adam_regions");
    let lr = g.input("__lr", Shape::scalar(DType::F32));
    let bc1 = g.input("__bc1", Shape::scalar(DType::F32));
    let bc2 = g.input("__bc2", Shape::scalar(DType::F32));
    let params = [("w", vec![37usize, 65]), ("b", vec![1, 129])];
    let mut outs = Vec::new();
    for (name, dims) in &params {
        outs.extend(adam.build(&mut g, name, dims, lr, bc1, bc2));
    }
    g.set_outputs(outs);
    let scalars = [1e-3f32, 1.0 - 0.9f32.powi(3), 1.0 - 0.999f32.powi(3)];
    for gates in [[1.0f32, 1.0], [0.0, 1.0], [0.37, 0.0]] {
        let mut feeds = vec![
            feed("__lr", vec![scalars[0]]),
            feed("__bc1", vec![scalars[1]]),
            feed("__bc2", vec![scalars[2]]),
        ];
        for (k, ((name, dims), gate)) in params.iter().zip(gates).enumerate() {
            let n: usize = dims.iter().product();
            let seed = 10 * k as u32;
            feeds.push(feed(*name, values(n, seed, -1.0, 1.0)));
            feeds.push(feed(format!("{name}__g"), values(n, seed + 1, -0.5, 0.5)));
            feeds.push(feed(format!("{name}__m"), values(n, seed + 2, -0.1, 0.1)));
            feeds.push(feed(format!("{name}__v"), values(n, seed + 3, 1e-4, 1e-2)));
            feeds.push(feed(format!("{name}__scale"), vec![gate]));
        }
        let got = run_mlx(&g, &feeds, Mode::Compiled).unwrap();
        let fed = |name: &str| &feeds.iter().find(|f| f.name == name).unwrap().values;
        let s = scalars.map(|x| x as f64);
        for (k, ((name, _), gate)) in params.iter().zip(gates).enumerate() {
            let (p, gr, m, v) = (
                fed(name),
                fed(&format!("{name}__g")),
                fed(&format!("{name}__m")),
                fed(&format!("{name}__v")),
            );
            let want: Vec<[f64; 3]> = (0..p.len())
                .map(|i| {
                    adam.reference(
                        p[i] as f64,
                        gr[i] as f64,
                        m[i] as f64,
                        v[i] as f64,
                        gate as f64,
                        s,
                    )
                })
                .collect();
            for (j, what) in ["p'", "m'", "v'"].iter().enumerate() {
                let w: Vec<f32> = want.iter().map(|r| r[j] as f32).collect();
                assert_close(
                    &format!("{name} {what}, gate {gate}"),
                    &got[3 * k + j].to_f32_vec().unwrap(),
                    &w,
                    TOL,
                );
            }
        }
        let counts = last_counts("adam_regions");
        assert_eq!(
            fused_kernels(&counts),
            2,
            "one kernel per parameter: {counts:?}"
        );
        for op in ["Add", "Subtract", "Multiply", "Divide", "Sqrt"] {
            assert!(
                !counts.contains_key(op),
                "{op} outside a kernel: {counts:?}"
            );
        }
    }
}

/// `y = x·w` feeds a sum whose scalar is read back by `z = y·s + x`: one
/// region {y, z} would need its own output first, so it is not made; the
/// values still match (and a second, independent region beside it is).
#[test]
fn a_region_that_would_close_a_cycle_is_left_to_mlx() {
    counts_file();
    let dims = [17usize, 33];
    let s = Shape::new(&dims, DType::F32);
    let mut g = Graph::new("cycle_region");
    let x = g.input("x", s.clone());
    let w = g.input("w", s.clone());
    let u = g.input("u", s);
    let y = g.mul(x, w);
    let sum = g.sum(y, vec![0, 1], false);
    let ys = g.mul(y, sum);
    let z = g.add(ys, x);
    // Independent: a = -(u·u) / (u + 3), read once (one output).
    let uu = g.mul(u, u);
    let neg = g.neg(uu);
    let three = g.constant(3.0, DType::F32);
    let den = g.add(u, three);
    let a = g.div(neg, den);
    g.set_outputs(vec![z, a]);
    let n: usize = dims.iter().product();
    let feeds = vec![
        feed("x", values(n, 1, -1.0, 1.0)),
        feed("w", values(n, 2, -1.0, 1.0)),
        feed("u", values(n, 3, 0.0, 2.0)),
    ];
    let got = run_mlx(&g, &feeds, Mode::Compiled).unwrap();
    let (xv, wv, uv) = (&feeds[0].values, &feeds[1].values, &feeds[2].values);
    let total: f64 = (0..n).map(|i| (xv[i] * wv[i]) as f64).sum();
    let z_want: Vec<f32> = (0..n)
        .map(|i| ((xv[i] * wv[i]) as f64 * total + xv[i] as f64) as f32)
        .collect();
    // The sum's order differs from f64's: a looser bound for z.
    assert_close(
        "z",
        &got[0].to_f32_vec().unwrap(),
        &z_want,
        Tol {
            abs: 1e-4,
            rel: 1e-4,
        },
    );
    let a_want: Vec<f32> = uv
        .iter()
        .map(|&u| (-(u as f64 * u as f64) / (u as f64 + 3.0)) as f32)
        .collect();
    assert_close("a", &got[1].to_f32_vec().unwrap(), &a_want, TOL);
}

/// A region's value that is a graph output and also read inside it comes
/// out as one of the kernel's outputs.
#[test]
fn a_value_read_inside_and_returned_is_an_output_of_the_kernel() {
    counts_file();
    let dims = [5usize, 300];
    let s = Shape::new(&dims, DType::F32);
    let mut g = Graph::new("inner_output");
    let x = g.input("x", s.clone());
    let w = g.input("w", s);
    let a = g.mul(x, w);
    let b = g.sub(a, x);
    let c = g.mul(b, a);
    g.set_outputs(vec![a, c]);
    let n: usize = dims.iter().product();
    let feeds = vec![
        feed("x", values(n, 5, -2.0, 2.0)),
        feed("w", values(n, 6, -2.0, 2.0)),
    ];
    let got = run_mlx(&g, &feeds, Mode::Compiled).unwrap();
    let (xv, wv) = (&feeds[0].values, &feeds[1].values);
    let a_want: Vec<f32> = (0..n)
        .map(|i| (xv[i] as f64 * wv[i] as f64) as f32)
        .collect();
    let c_want: Vec<f32> = (0..n)
        .map(|i| {
            let a = xv[i] as f64 * wv[i] as f64;
            ((a - xv[i] as f64) * a) as f32
        })
        .collect();
    assert_close("a", &got[0].to_f32_vec().unwrap(), &a_want, TOL);
    assert_close("c", &got[1].to_f32_vec().unwrap(), &c_want, TOL);
    let counts = last_counts("inner_output");
    assert_eq!(fused_kernels(&counts), 1, "{counts:?}");
}
