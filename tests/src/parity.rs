//! Parity against rlx-runtime's CPU backend, through the path a user
//! takes: the MLX plugin loaded from its plugin directory, graphs passed
//! as `.rlxmodel` text, run in every execution mode.

use rand::{Rng, SeedableRng};
use rlx_ir::{DType as IrDType, Graph, Op};
use rlx_plugin_api::{DType, HostTensor, Mode};
use rlx_plugin_loader::{CandidateState, LoadedPlugin, PluginSet};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The assembled MLX plugin directory in the build tree, with the freshly
/// built `librlx_mlx.so` installed (`rlx_host::build_tree`).
pub fn mlx_plugin_dir() -> PathBuf {
    rlx_host::build_tree::mlx_plugin_dir(&crate::profile_dir()).unwrap_or_else(|e| panic!("{e}"))
}

/// The environment variable naming a complete MLX plugin directory to test
/// instead of the build tree's `plugins/mlx`: `plugins/mlx-cuda` on a GPU
/// machine runs every parity suite on the GPU (the plugin's default device
/// there).
pub const ENV_TEST_DIR: &str = "RLX_TEST_MLX_DIR";

/// The MLX plugin, loaded once per test binary through discovery: from
/// `RLX_TEST_MLX_DIR` when set (used as it is), else the build tree's
/// `plugins/mlx` with the freshly built library copied in.
pub fn mlx() -> Arc<LoadedPlugin> {
    static P: OnceLock<Arc<LoadedPlugin>> = OnceLock::new();
    P.get_or_init(|| {
        let dir = match std::env::var_os(ENV_TEST_DIR) {
            Some(d) => {
                let d = PathBuf::from(d);
                eprintln!(
                    "testing the MLX plugin directory {} ({ENV_TEST_DIR})",
                    d.display()
                );
                d
            }
            None => mlx_plugin_dir(),
        };
        let set = PluginSet::load(&crate::only_dir(&dir));
        for c in &set.candidates {
            if let CandidateState::Rejected(e) = &c.state {
                panic!("{}: {e}", c.path.display());
            }
        }
        let p = set.select("mlx").expect("an mlx plugin loads");
        if let Some(d) = p.descriptor().device_infos.first() {
            eprintln!("the {} plugin's default device: {d}", p.descriptor().name);
        }
        p
    })
    .clone()
}

/// A tolerance: |got - want| <= abs + rel * |want|, elementwise.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub abs: f32,
    pub rel: f32,
}

impl Tol {
    /// Per-dtype defaults for single ops (a few ulps of the dtype around
    /// values of order 1). Tests of long reductions state their own.
    pub fn for_dtype(d: IrDType) -> Tol {
        match d {
            IrDType::F16 => Tol {
                abs: 2e-3,
                rel: 2e-3,
            },
            IrDType::BF16 => Tol {
                abs: 1.6e-2,
                rel: 1.6e-2,
            },
            _ => Tol {
                abs: 1e-5,
                rel: 1e-5,
            },
        }
    }
}

/// Compare; on failure the message names the worst element.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: Tol) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs reference {}",
        got.len(),
        want.len()
    );
    let mut worst: Option<(usize, f32)> = None;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol.abs + tol.rel * w.abs()
        };
        if !ok {
            let excess = (g - w).abs();
            if worst.is_none_or(|(_, e)| excess > e || excess.is_nan()) {
                worst = Some((i, excess));
            }
        }
    }
    if let Some((i, _)) = worst {
        panic!(
            "{what}: element {i}: got {} want {} (tol abs {} rel {}); got[..8]={:?} want[..8]={:?}",
            got[i],
            want[i],
            tol.abs,
            tol.rel,
            &got[..got.len().min(8)],
            &want[..want.len().min(8)]
        );
    }
    // A reference of all zeros proves nothing (a skipped CPU kernel leaves
    // zeros): refuse it unless the plugin agrees exactly and the test says so.
    assert!(
        want.is_empty() || want.iter().any(|v| *v != 0.0) || got.iter().all(|v| *v == 0.0),
        "{what}: the reference is all zeros"
    );
}

/// The ABI dtype of an rlx-ir dtype (the adapter's mapping).
pub fn abi_dtype(d: IrDType) -> DType {
    rlx_plugin_host::backend::abi_dtype(d)
        .unwrap_or_else(|| panic!("dtype {d:?} has no ABI equivalent"))
}

/// Seeded values in [lo, hi), rounded to `dtype`, as f32 (what both sides
/// see).
pub fn random_values(n: usize, dtype: IrDType, lo: f32, hi: f32, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
    round_to(&v, dtype)
}

/// Round f32 values through `dtype` (identity for f32).
pub fn round_to(v: &[f32], dtype: IrDType) -> Vec<f32> {
    let d = abi_dtype(dtype);
    rlx_plugin_api::convert::bytes_to_f32(d, &rlx_plugin_api::convert::f32_to_bytes(d, v).unwrap())
        .unwrap()
}

/// A named value bound to a graph leaf, as f32 (converted to the leaf's
/// dtype for the plugin).
#[derive(Clone, Debug)]
pub struct Feed {
    pub name: String,
    pub values: Vec<f32>,
}

/// One leaf (Input or Param) of a graph.
pub struct Leaf {
    pub name: String,
    pub is_param: bool,
    pub dtype: IrDType,
    pub dims: Vec<usize>,
}

pub fn leaves(g: &Graph) -> Vec<Leaf> {
    g.nodes()
        .iter()
        .filter_map(|n| {
            let (name, is_param) = match &n.op {
                Op::Input { name } => (name.clone(), false),
                Op::Param { name } => (name.clone(), true),
                _ => return None,
            };
            let s = g.shape(n.id);
            let dims = s
                .dims()
                .iter()
                .map(|d| match d {
                    rlx_ir::Dim::Static(n) => *n,
                    rlx_ir::Dim::Dynamic(_) => panic!("parity graphs are static"),
                })
                .collect();
            Some(Leaf {
                name,
                is_param,
                dtype: s.dtype(),
                dims,
            })
        })
        .collect()
}

/// Random feeds for every leaf: uniform in [-1, 1), rounded to its dtype.
pub fn random_feeds(g: &Graph, seed: u64) -> Vec<Feed> {
    leaves(g)
        .iter()
        .enumerate()
        .map(|(i, l)| Feed {
            name: l.name.clone(),
            values: random_values(
                l.dims.iter().product(),
                l.dtype,
                -1.0,
                1.0,
                seed.wrapping_add(i as u64 * 7919),
            ),
        })
        .collect()
}

/// Run on rlx-runtime's CPU backend (the reference).
pub fn run_cpu(g: &Graph, feeds: &[Feed]) -> Vec<Vec<f32>> {
    let ls = leaves(g);
    let mut compiled = rlx_runtime::Session::new(rlx_runtime::Device::Cpu).compile(g.clone());
    let mut inputs: Vec<(&str, &[f32])> = Vec::new();
    for f in feeds {
        let l = ls
            .iter()
            .find(|l| l.name == f.name)
            .expect("feed names a leaf");
        if l.is_param {
            compiled.set_param(&f.name, &f.values);
        } else {
            inputs.push((f.name.as_str(), &f.values));
        }
    }
    compiled.run(&inputs)
}

/// With `RLX_DUMP_GRAPHS=DIR`, every graph the parity helpers compile is
/// written to DIR (named by a hash of its text): how the fuzz seed corpus
/// gets the suites' graphs (fuzz/README.md).
fn dump_graph(text: &str) {
    if let Some(dir) = std::env::var_os("RLX_DUMP_GRAPHS") {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(
            std::path::Path::new(&dir).join(format!("suite-{:016x}", h.finish())),
            text,
        );
    }
}

/// Run on the MLX plugin in `mode`.
pub fn run_mlx(
    g: &Graph,
    feeds: &[Feed],
    mode: Mode,
) -> Result<Vec<HostTensor>, rlx_plugin_api::PluginError> {
    let text = rlx_ir::rlxmodel::to_text(g).expect("graph to text");
    dump_graph(&text);
    let ls = leaves(g);
    let mut exe = mlx().compile(&text, mode)?;
    let mut inputs: Vec<(String, HostTensor)> = Vec::new();
    for f in feeds {
        let l = ls
            .iter()
            .find(|l| l.name == f.name)
            .expect("feed names a leaf");
        let d = abi_dtype(l.dtype);
        let t = HostTensor::new(
            d,
            l.dims.clone(),
            rlx_plugin_api::convert::f32_to_bytes(d, &f.values).unwrap(),
        )
        .unwrap();
        if l.is_param {
            exe.bind_param_shared(&f.name, Arc::new(t))?;
        } else {
            inputs.push((f.name.clone(), t));
        }
    }
    let refs: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    exe.run(&refs)
}

pub const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];

/// The modes an op test runs `g` in. Compiled mode JIT-compiles a C++
/// kernel for every fused chain and dtype (about half a second each on a
/// cold cache, kept under `$TMPDIR/mlx`); it lowers exactly the same ops as
/// the other two modes. Op tests run it for graphs without f16/bf16 values;
/// half-precision graphs run lazy and eager, and compiled mode is covered
/// for them by the model tests (`check_against_every_mode`).
pub fn modes_for(g: &Graph) -> Vec<Mode> {
    let half = g
        .nodes()
        .iter()
        .any(|n| matches!(g.shape(n.id).dtype(), IrDType::F16 | IrDType::BF16));
    if half {
        vec![Mode::Lazy, Mode::Eager]
    } else {
        MODES.to_vec()
    }
}

/// Check `g` on the plugin against `reference` outputs, in [`modes_for`].
pub fn check_against(what: &str, g: &Graph, feeds: &[Feed], reference: &[Vec<f32>], tol: Tol) {
    check_against_modes(what, g, feeds, reference, tol, &modes_for(g));
}

/// Check `g` against `reference` in all three modes, whatever its dtypes.
pub fn check_against_every_mode(
    what: &str,
    g: &Graph,
    feeds: &[Feed],
    reference: &[Vec<f32>],
    tol: Tol,
) {
    check_against_modes(what, g, feeds, reference, tol, &MODES);
}

pub fn check_against_modes(
    what: &str,
    g: &Graph,
    feeds: &[Feed],
    reference: &[Vec<f32>],
    tol: Tol,
    modes: &[Mode],
) {
    for &mode in modes {
        let outs =
            run_mlx(g, feeds, mode).unwrap_or_else(|e| panic!("{what} [{}]: {e}", mode.name()));
        assert_eq!(outs.len(), reference.len(), "{what}: output count");
        for (i, (o, r)) in outs.iter().zip(reference).enumerate() {
            let got = o.to_f32_vec().unwrap();
            assert_close(
                &format!("{what} [{}] output {i}", mode.name()),
                &got,
                r,
                tol,
            );
        }
    }
}

/// Check `g` with random feeds against the CPU backend, in [`modes_for`].
pub fn check_parity(what: &str, g: &Graph, seed: u64, tol: Tol) {
    let feeds = random_feeds(g, seed);
    let reference = run_cpu(g, &feeds);
    check_against(what, g, &feeds, &reference, tol);
}

/// Every rlx-ir activation the plugin lowers, for the suites that run
/// each one (elementwise, regions).
pub const ALL_ACTIVATIONS: [rlx_ir::op::Activation; 29] = [
    rlx_ir::op::Activation::Gelu,
    rlx_ir::op::Activation::GeluApprox,
    rlx_ir::op::Activation::Silu,
    rlx_ir::op::Activation::Relu,
    rlx_ir::op::Activation::Sigmoid,
    rlx_ir::op::Activation::Tanh,
    rlx_ir::op::Activation::Exp,
    rlx_ir::op::Activation::Log,
    rlx_ir::op::Activation::Sqrt,
    rlx_ir::op::Activation::Rsqrt,
    rlx_ir::op::Activation::Neg,
    rlx_ir::op::Activation::Abs,
    rlx_ir::op::Activation::Sin,
    rlx_ir::op::Activation::Cos,
    rlx_ir::op::Activation::Tan,
    rlx_ir::op::Activation::Atan,
    rlx_ir::op::Activation::Recip,
    rlx_ir::op::Activation::Round,
    rlx_ir::op::Activation::Floor,
    rlx_ir::op::Activation::Ceil,
    rlx_ir::op::Activation::Sign,
    rlx_ir::op::Activation::Softplus,
    rlx_ir::op::Activation::Elu,
    rlx_ir::op::Activation::Erf,
    rlx_ir::op::Activation::HardSwish,
    rlx_ir::op::Activation::HardSigmoid,
    rlx_ir::op::Activation::Mish,
    rlx_ir::op::Activation::Softsign,
    rlx_ir::op::Activation::LogSigmoid,
];
