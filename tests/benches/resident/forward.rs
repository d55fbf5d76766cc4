//! The `forward` workload: the f32 MLP 256x1024 -> 4096 -> 1024 (ReLU)
//! forward, on the plugin through the host library. **resident**: the
//! input is a state bound once and the output stays on the device
//! (skipped), as a framework keeps its arrays where they are;
//! **host**: the input crosses in and the output out each run. The CPU
//! variant is not offered (the train and decode workloads have it).

use super::{measure, Measured, Variant};
use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::{HostTensor, HostTensorRef};
use rlx_plugin_loader::OutputDest;

const BATCH: usize = 256;
const D_IN: usize = 1024;
const D_HID: usize = 4096;
const D_OUT: usize = 1024;

fn mlp() -> String {
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let mut g = Graph::new("mlp_forward");
    let x = g.input("x", f(&[BATCH, D_IN]));
    let w1 = g.param("w1", f(&[D_IN, D_HID]));
    let b1 = g.param("b1", f(&[1, D_HID]));
    let w2 = g.param("w2", f(&[D_HID, D_OUT]));
    let b2 = g.param("b2", f(&[1, D_OUT]));
    let h = g.mm(x, w1);
    let h = g.add(h, b1);
    let h = g.relu(h);
    let y = g.mm(h, w2);
    let y = g.add(y, b2);
    g.set_outputs(vec![y]);
    rlx_ir::rlxmodel::to_text(&g).expect("graph text")
}

pub fn run(variant: Variant, warmup: usize, steps: usize) -> Measured {
    let Variant::Mlx { mode, resident, .. } = variant else {
        panic!("the forward workload runs on the plugin only");
    };
    let plugin = rlx_plugin_tests::parity::mlx();
    let mut exe = plugin.compile(&mlp(), mode).expect("compile");
    let t = |d: &[usize], seed: u32, scale: f32| {
        let n: usize = d.iter().product();
        HostTensor::from_f32(d.to_vec(), &super::mlp::values(n, seed, scale)).unwrap()
    };
    for (name, d, seed, scale) in [
        ("w1", [D_IN, D_HID], 1, 0.03),
        ("b1", [1, D_HID], 5, 0.1),
        ("w2", [D_HID, D_OUT], 2, 0.015),
        ("b2", [1, D_OUT], 6, 0.1),
    ] {
        exe.bind_param(name, &t(&d, seed, scale)).expect("bind");
    }
    let x = t(&[BATCH, D_IN], 3, 1.0);
    let mut y = vec![0u8; BATCH * D_OUT * 4];
    if resident {
        exe.state_bind("x", HostTensorRef::from(&x)).expect("state");
        measure(warmup, steps, true, || {
            // SAFETY: nothing is lent.
            unsafe { exe.run_refs_dest_raw(&[], &[OutputDest::Skip], |_| Ok(())) }.expect("run");
        })
    } else {
        measure(warmup, steps, false, || {
            exe.run_refs_into(
                &[("x", HostTensorRef::from(&x))],
                &mut [Some(&mut y)],
                |_| Ok(()),
            )
            .expect("run");
        })
    }
}
