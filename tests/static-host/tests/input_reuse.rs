//! A run writes its inputs into the arrays the last run read them from, when
//! nothing else holds them, instead of allocating new ones, and every run still
//! computes on its own values, in every mode. The graph reads `x` (outputs
//! `exp(x)`, held to `f64::exp` at 1e-6 relative) and `w`, which it returns as
//! an output unchanged: the last run's outputs stay readable until the next run
//! (`output_read`), so `w`'s array is not written over while it is one of them,
//! and the previous run's `w` read after the next run has started building is
//! still its own. The plugin is linked in, so the test reaches its executable
//! directly (`input_buffer_address`).

use rlx_mlx::executable::MlxExecutable;
use rlx_plugin_api::convert::{f32_from_le, f32_to_le};
use rlx_plugin_api::tensor::RawView;
use rlx_plugin_api::{CompileOptions, DType, Executable, Mode, StateBuf, TensorRef};

const N: usize = 1000;

fn graph() -> String {
    use rlx_ir::infer::GraphExt;
    let mut g = rlx_ir::Graph::new("g");
    let x = g.input("x", rlx_ir::Shape::new(&[N], rlx_ir::DType::F32));
    let w = g.input("w", rlx_ir::Shape::new(&[N], rlx_ir::DType::F32));
    let y = g.exp(x);
    g.set_named_outputs([("y", y), ("w", w)]);
    rlx_ir::rlxmodel::to_text(&g).unwrap()
}

fn values(run_no: usize, salt: usize) -> Vec<f32> {
    (0..N)
        .map(|i| ((i * 7 + run_no * 13 + salt) % 41) as f32 * 0.1 - 2.0)
        .collect()
}

/// One run: `exp(x)` and `w` as they came back.
fn run(exe: &mut MlxExecutable, x: &[f32], w: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let (xb, wb) = (f32_to_le(x), f32_to_le(w));
    let (xv, wv) = (
        RawView::of(DType::F32, &[N], &xb, 0),
        RawView::of(DType::F32, &[N], &wb, 0),
    );
    // SAFETY: the views describe `xb` and `wb`, alive for the call.
    let (xt, wt) = unsafe {
        (
            TensorRef::from_raw(&xv.raw).unwrap(),
            TensorRef::from_raw(&wv.raw).unwrap(),
        )
    };
    let mut out = exe.run(&[("x", xt), ("w", wt)]).unwrap();
    let wo = f32_from_le(&out.pop().unwrap().data);
    let y = f32_from_le(&out.pop().unwrap().data);
    (y, wo)
}

/// The last run's output `w`, read where the executable keeps it.
fn last_w(exe: &mut MlxExecutable) -> Vec<f32> {
    let mut bytes = vec![0u8; N * 4];
    let into = StateBuf {
        dtype: DType::F32,
        bytes: &mut bytes,
    };
    exe.output_read(1, 0, into).unwrap();
    f32_from_le(&bytes)
}

#[test]
fn inputs_are_written_into_the_last_runs_arrays_and_each_run_sees_its_own() {
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let opts = CompileOptions {
            mode,
            device: Some((rlx_plugin_api::DeviceKind::Cpu, 0)),
            ..CompileOptions::default()
        };
        let mut exe = MlxExecutable::compile(&graph(), &opts).unwrap();
        assert_eq!(exe.input_buffer_address("x"), None);
        let mut x_at = Vec::new();
        let mut w_at = Vec::new();
        for run_no in 0..4 {
            let (x, w) = (values(run_no, 0), values(run_no, 5));
            let (y, wo) = run(&mut exe, &x, &w);
            for (i, (&got, &xi)) in y.iter().zip(&x).enumerate() {
                let want = (xi as f64).exp();
                assert!(
                    ((got as f64) - want).abs() <= 1e-6 * want,
                    "{mode:?} run {run_no}: exp(x)[{i}] = {got}, want {want}"
                );
            }
            assert_eq!(wo, w, "{mode:?} run {run_no}: w returned as it came");
            assert_eq!(
                last_w(&mut exe),
                w,
                "{mode:?} run {run_no}: the last run's w, read after it"
            );
            x_at.push(exe.input_buffer_address("x").unwrap());
            w_at.push(exe.input_buffer_address("w").unwrap());
        }
        assert!(
            x_at.iter().all(|&a| a == x_at[0]),
            "{mode:?}: every run should reuse the first run's buffer for x: {x_at:x?}"
        );
        // Each w is the previous run's output when the next run starts: a
        // write into it would change what `output_read` returns.
        assert!(
            w_at.windows(2).all(|p| p[0] != p[1]),
            "{mode:?}: a run wrote w into the array the last run returned: {w_at:x?}"
        );
    }
}
