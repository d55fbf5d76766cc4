//! Work on params alone is done once per param value, not once per run
//! (plugin-mlx/src/executable/hoist.rs): `x · Concat(w1, w2)` (the form
//! rlx's optimiser gives a transformer's fused Q/K/V projection) and an
//! output made of params only. What must hold is that a run never sees a
//! stale value: after a bind, a partial overwrite, a shared param, in a
//! clone, in every mode. References are computed here from the values
//! bound (small integers: every sum and product is exact in f32).

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_api::HostTensor;
use rlx_plugin_loader::PluginExecutable;
use rlx_plugin_tests::parity::{mlx, MODES};

const K: usize = 3;
const N: usize = 2;

/// `y = x [2, K] · Concat(w1, w2) [K, 2N]`, `s = w1 * 2 + w2`.
fn graph() -> String {
    let f = |d: &[usize]| Shape::new(d, IrDType::F32);
    let mut g = Graph::new("hoist");
    let x = g.input("x", f(&[2, K]));
    let w1 = g.param("w1", f(&[K, N]));
    let w2 = g.param("w2", f(&[K, N]));
    let wc = g.concat_(vec![w1, w2], 1);
    let y = g.matmul(x, wc, f(&[2, 2 * N]));
    let two = g.constant(2.0, IrDType::F32);
    let w1x2 = g.mul(w1, two);
    let s = g.add(w1x2, w2);
    g.set_outputs(vec![y, s]);
    rlx_ir::rlxmodel::to_text(&g).expect("graph text")
}

fn t(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).unwrap()
}

/// What the graph gives for these values.
fn want(x: &[f32], w1: &[f32], w2: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut y = Vec::new();
    for r in 0..2 {
        for j in 0..2 * N {
            let w = |k: usize| {
                if j < N {
                    w1[k * N + j]
                } else {
                    w2[k * N + j - N]
                }
            };
            y.push((0..K).map(|k| x[r * K + k] * w(k)).sum());
        }
    }
    let s = w1.iter().zip(w2).map(|(a, b)| a * 2.0 + b).collect();
    (y, s)
}

fn check(exe: &mut PluginExecutable, x: &[f32], w1: &[f32], w2: &[f32], what: &str) {
    let out = exe.run(&[("x", &t(&[2, K], x))]).expect(what);
    let (y, s) = want(x, w1, w2);
    assert_eq!(out[0].to_f32_vec().unwrap(), y, "{what}: y");
    assert_eq!(out[1].to_f32_vec().unwrap(), s, "{what}: s");
}

#[test]
fn a_params_only_value_follows_every_change_of_its_params() {
    let plugin = mlx();
    let x = [1., 2., 3., -1., 0., 2.];
    let mut w1: Vec<f32> = (1..=6).map(|v| v as f32).collect();
    let w2: Vec<f32> = (1..=6).map(|v| -(v as f32)).collect();
    for mode in MODES {
        let m = format!("{mode:?}");
        let mut exe = plugin.compile(&graph(), mode).unwrap();
        exe.bind_param("w1", &t(&[K, N], &w1)).unwrap();
        exe.bind_param("w2", &t(&[K, N], &w2)).unwrap();
        check(&mut exe, &x, &w1, &w2, &format!("{m}: first run"));
        check(&mut exe, &x, &w1, &w2, &format!("{m}: second run"));

        // A new value for one param.
        let w1b: Vec<f32> = w1.iter().map(|v| v + 10.0).collect();
        exe.bind_param("w1", &t(&[K, N], &w1b)).unwrap();
        check(&mut exe, &x, &w1b, &w2, &format!("{m}: after a bind"));

        // Part of a param overwritten (elements 2..4 of w2).
        let mut w2b = w2.clone();
        w2b[2] = 7.0;
        w2b[3] = 8.0;
        let bytes: Vec<u8> = [7.0f32, 8.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        exe.bind_param_range("w2", 8, &bytes).unwrap();
        check(&mut exe, &x, &w1b, &w2b, &format!("{m}: after a range"));

        // A clone sees the same, and a bind in it leaves the first alone.
        let mut twin = exe.clone_executable().unwrap();
        check(&mut twin, &x, &w1b, &w2b, &format!("{m}: the clone"));
        twin.bind_param("w1", &t(&[K, N], &w1)).unwrap();
        check(&mut twin, &x, &w1, &w2b, &format!("{m}: the clone rebound"));
        check(&mut exe, &x, &w1b, &w2b, &format!("{m}: the first after"));

        // Params taken from another executable.
        let mut other = plugin.compile(&graph(), mode).unwrap();
        other.share_params_from(&twin).unwrap();
        check(&mut other, &x, &w1, &w2b, &format!("{m}: shared params"));
        exe.share_params_from(&twin).unwrap();
        check(
            &mut exe,
            &x,
            &w1,
            &w2b,
            &format!("{m}: shared into the first"),
        );
    }
    w1.clear();
}
