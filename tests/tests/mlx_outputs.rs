//! Outputs handed over through the ABI stay valid and unchanged until the
//! host releases them: after later runs of the same executable and after
//! the executable is destroyed. On the CPU the plugin lends MLX's own
//! buffers (no copy), so this is what keeps that honest; views it cannot
//! lend (a transpose) are copied out. Reference: `relu(x · w + b)` in f64
//! (tests/src/relu_affine.rs), exact to f32 rounding.

use rlx_plugin_api::{HostTensor, RlxTensor};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_plugin_tests::relu_affine::{reference, values};

const GRAPH: &str = "rlxmodel 1\nopset 1\n\ngraph @g {\n  %x = input : f32[4, 8]\n  \
%w = param : f32[8, 3]\n  %2 = MatMul %x, %w : f32[4, 3]\n  %b = input : f32[4, 3]\n  \
%4 = Binary(Add) %2, %b : f32[4, 3]\n  %5 = Activation(Relu) %4 : f32[4, 3]\n  \
%6 = Transpose{perm: [1, 0]} %5 : f32[3, 4]\n  return %5, %6, %x\n}\n";

fn transposed(y: &[f32]) -> Vec<f32> {
    (0..12).map(|k| y[(k % 4) * 3 + k / 4]).collect()
}

#[test]
fn outputs_outlive_later_runs_and_the_executable() {
    let plugin = mlx();
    let api = plugin.raw_api();
    for mode in MODES {
        let mut exe = plugin.compile(GRAPH, mode).expect("compile");
        let w = values(24, 1, 2);
        exe.bind_param("w", &HostTensor::from_f32(vec![8, 3], &w).unwrap())
            .unwrap();
        let mut kept: Vec<(Vec<f32>, Vec<f32>, [RlxTensor; 3])> = Vec::new();
        for i in 0..3 {
            let x = values(32, 3, i);
            let b = values(12, 4, i);
            let xt = HostTensor::from_f32(vec![4, 8], &x).unwrap();
            let bt = HostTensor::from_f32(vec![4, 3], &b).unwrap();
            let borrowed = rlx_plugin_api::tensor::borrow_named(&[("x", &xt), ("b", &bt)]);
            let mut slots = [RlxTensor::empty(); 3];
            // SAFETY: the executable is live and used by this thread only;
            // the inputs and the slots outlive the call.
            unsafe {
                plugin.take_status((api.executable_run.unwrap())(
                    exe.raw_handle(),
                    borrowed.named.as_ptr(),
                    borrowed.named.len(),
                    slots.as_mut_ptr(),
                    3,
                ))
            }
            .unwrap_or_else(|e| panic!("{mode:?} run {i}: {e}"));
            kept.push((x, b, slots));
        }
        drop(exe);
        for (i, (x, b, slots)) in kept.into_iter().enumerate() {
            let want = reference(&x, &w, &b);
            let [y, yt, xo] = slots.map(|s| {
                // SAFETY: each slot is an owned output of a successful run,
                // read and released once here.
                let t = unsafe { HostTensor::take_raw(s) }.expect("a readable output");
                t.to_f32_vec().unwrap()
            });
            assert_eq!(y, want, "{mode:?} run {i}: relu(x·w + b)");
            assert_eq!(yt, transposed(&want), "{mode:?} run {i}: its transpose");
            assert_eq!(xo, x, "{mode:?} run {i}: the input returned as it came");
        }
    }
}
