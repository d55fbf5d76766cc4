//! A run writes its inputs into the arrays the last run read them from,
//! when MLX no longer holds them, instead of allocating new ones, and every
//! run still computes on its own values: `exp(x)` and `x` itself returned
//! as an output, held to `f64::exp` (1e-6 relative) and to the input bits,
//! in every mode. The plugin is linked in, so the test reaches its
//! executable directly (`input_buffer_address`).

use rlx_mlx::executable::MlxExecutable;
use rlx_plugin_api::convert::{f32_from_le, f32_to_le};
use rlx_plugin_api::tensor::RawView;
use rlx_plugin_api::{CompileOptions, DType, Executable, Mode, TensorRef};

const N: usize = 1000;

fn graph() -> String {
    use rlx_ir::infer::GraphExt;
    let mut g = rlx_ir::Graph::new("g");
    let x = g.input("x", rlx_ir::Shape::new(&[N], rlx_ir::DType::F32));
    let y = g.exp(x);
    g.set_named_outputs([("y", y), ("x", x)]);
    rlx_ir::rlxmodel::to_text(&g).unwrap()
}

fn run(exe: &mut MlxExecutable, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let bytes = f32_to_le(x);
    let view = RawView::of(DType::F32, &[N], &bytes, 0);
    // SAFETY: the view describes `bytes`, alive for the call.
    let t = unsafe { TensorRef::from_raw(&view.raw) }.unwrap();
    let mut out = exe.run(&[("x", t)]).unwrap();
    let xo = f32_from_le(&out.pop().unwrap().data);
    let y = f32_from_le(&out.pop().unwrap().data);
    (y, xo)
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
        let mut addresses = Vec::new();
        for run_no in 0..4 {
            let x: Vec<f32> = (0..N)
                .map(|i| ((i * 7 + run_no * 13) % 41) as f32 * 0.1 - 2.0)
                .collect();
            let (y, xo) = run(&mut exe, &x);
            for (i, (&got, &xi)) in y.iter().zip(&x).enumerate() {
                let want = (xi as f64).exp();
                assert!(
                    ((got as f64) - want).abs() <= 1e-6 * want,
                    "{mode:?} run {run_no}: exp(x)[{i}] = {got}, want {want}"
                );
            }
            assert_eq!(xo, x, "{mode:?} run {run_no}: x returned as it came");
            addresses.push(exe.input_buffer_address("x").unwrap());
        }
        assert!(
            addresses.iter().all(|&a| a == addresses[0]),
            "{mode:?}: every run should reuse the first run's input buffer: {addresses:x?}"
        );
    }
}
