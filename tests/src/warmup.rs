//! Compiled mode's kernels built beside the runs (plugin-mlx's
//! `executable/warmup.rs`), checked the same way whichever builds them (a
//! thread, or a process of their own): runs are lazy until the kernels are
//! ready, then switch to the compiled function, and the values across the
//! switch are bit-identical.

use crate::parity::mlx;
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::{HostTensor, Mode};
use std::time::{Duration, Instant};

/// A chain of elementwise ops MLX fuses into one kernel:
/// `tanh(x * w + b) * x + sigmoid(x)`.
pub fn graph() -> Graph {
    let s = Shape::new(&[64, 128], DType::F32);
    let mut g = Graph::new("fused_chain");
    let x = g.input("x", s.clone());
    let w = g.param("w", s.clone());
    let b = g.param("b", s.clone());
    let xw = g.binary(BinaryOp::Mul, x, w, s.clone());
    let y = g.binary(BinaryOp::Add, xw, b, s.clone());
    let t = g.activation(Activation::Tanh, y, s.clone());
    let tx = g.binary(BinaryOp::Mul, t, x, s.clone());
    let sg = g.activation(Activation::Sigmoid, x, s.clone());
    let z = g.binary(BinaryOp::Add, tx, sg, s);
    g.set_outputs(vec![z]);
    g
}

pub fn tensor(seed: u32) -> HostTensor {
    let v: Vec<f32> = (0..64 * 128)
        .map(|i| {
            ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2000) as f32 / 1000.0 - 1.0
        })
        .collect();
    HostTensor::new(
        rlx_plugin_api::DType::F32,
        vec![64, 128],
        rlx_plugin_api::convert::f32_to_bytes(rlx_plugin_api::DType::F32, &v).unwrap(),
    )
    .unwrap()
}

/// How the graph reaches the plugin: `.rlxmodel` text, or the fastest form the
/// plugin reads (a graph form), which a host sends.
#[derive(Clone, Copy, Debug)]
pub enum Sent {
    Text,
    Form,
}

/// Compile [`graph`] in compiled mode and run it until a run has switched
/// from lazy evaluation to the compiled function, then twice more, every
/// output bit-identical to the first run's (lazy). Returns the plugin's
/// log lines from this call.
pub fn runs_switch_bit_identical(sent: Sent) -> Vec<String> {
    let all_logs = crate::capture_logs(log::LevelFilter::Debug);
    let start = all_logs().len();
    let logs = move || all_logs().split_off(start);
    let options = rlx_plugin_api::CompileOptions::mode(Mode::Compiled);
    let mut exe = match sent {
        Sent::Text => {
            let text = rlx_ir::rlxmodel::to_text(&graph()).unwrap();
            mlx().compile_with(&text, &options).unwrap()
        }
        Sent::Form => mlx().compile_graph(&graph(), &options).unwrap(),
    };
    exe.bind_param("w", &tensor(2)).unwrap();
    exe.bind_param("b", &tensor(3)).unwrap();
    let x = tensor(1);
    let first = exe.run(&[("x", &x)]).unwrap();
    let switched = |logs: &dyn Fn() -> Vec<crate::Captured>| {
        logs().iter().any(|r| {
            r.message
                .contains("runs switch from lazy evaluation to the compiled function")
        })
    };
    assert!(!switched(&logs), "the first run used the compiled function");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut runs = 1;
    while !switched(&logs) {
        assert!(Instant::now() < deadline, "no switch after {runs} runs");
        let again = exe.run(&[("x", &x)]).unwrap();
        assert_eq!(again[0].data, first[0].data, "run {runs}");
        runs += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    // The run that switched, and one after it.
    for _ in 0..2 {
        let after = exe.run(&[("x", &x)]).unwrap();
        assert_eq!(after[0].data, first[0].data, "after the switch");
    }
    logs().iter().map(|r| r.message.clone()).collect()
}
