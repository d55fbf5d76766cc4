//! Custom-op nodes are claimed by their name, not their kind: one the
//! plugin has no kernel for runs through the host-kernel bridge with
//! rlx-cpu's kernel (rlx-runtime's own `spd.matfn_batched` is such an op,
//! found by rlx-runtime's spd_batched_native.rs), or, with no kernel
//! anywhere, is placed on the CPU backend with its reason; never "no custom
//! op named ... is registered" from the plugin's compile. Its own test
//! binary: the ops it registers stay registered for the process.
//! Reference: the CPU backend with the same rlx-cpu kernel (the same code
//! on both sides), then an exp: 1e-6 relative (MLX's exp and rlx-cpu's
//! differ in the last bit).

use rlx_ir::op::Activation;
use rlx_ir::{DType, Graph, OpExtension, Shape};
use rlx_plugin_api::{CustomKernel, Mode, PluginError};
use rlx_plugin_host::backend::{explain, register_plugin_backend, set_fallback, with_mode};
use rlx_plugin_host::partition::{Fallback, Side};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_runtime::{Device, Session};
use std::sync::{Arc, Once};

/// An op rlx-ir knows, by name only.
struct Named(&'static str);
impl OpExtension for Named {
    fn name(&self) -> &str {
        self.0
    }
    fn num_inputs(&self) -> usize {
        1
    }
    fn infer_shape(&self, i: &[&Shape], _: &[u8]) -> Shape {
        i[0].clone()
    }
}

const CPU_ONLY: &str = "test.cpu_only_affine";
const NOWHERE: &str = "test.no_kernel_anywhere";

/// `CPU_ONLY` with a kernel in rlx-cpu's registry only (`3x + 1`);
/// `NOWHERE` with none.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        rlx_ir::register_op_strict(Arc::new(Named(CPU_ONLY))).unwrap();
        rlx_ir::register_op_strict(Arc::new(Named(NOWHERE))).unwrap();
        let k: CustomKernel = Arc::new(|ins, outs, _| {
            let x = ins[0].data.chunks_exact(4);
            for (o, x) in outs[0].data.chunks_exact_mut(4).zip(x) {
                let v = f32::from_le_bytes(x.try_into().map_err(|_| PluginError::internal("len"))?);
                o.copy_from_slice(&(3.0 * v + 1.0).to_le_bytes());
            }
            Ok(())
        });
        rlx_cpu::op_registry::register_cpu_kernel(rlx_plugin_host::custom_ops::cpu_kernel(
            CPU_ONLY, k,
        ));
    });
}

/// `exp(op(x))` over `x [2, 3]`.
fn graph(op: &str) -> Graph {
    let s = Shape::new(&[2, 3], DType::F32);
    let mut g = Graph::new("custom_by_name");
    let x = g.input("x", s.clone());
    let y = g.custom_op(op, vec![], vec![x]);
    let z = g.activation(Activation::Exp, y, s);
    g.set_outputs(vec![z]);
    g
}

const X: [f32; 6] = [0.1, -0.2, 0.3, -0.4, 0.5, -0.6];

fn run(device: Device, g: &Graph) -> Vec<f32> {
    Session::new(device)
        .compile(g.clone())
        .run(&[("x", &X)])
        .remove(0)
}

#[test]
fn an_op_with_only_an_rlx_cpu_kernel_runs_on_the_plugin_through_the_bridge() {
    setup();
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let g = graph(CPU_ONLY);
    let plan = explain(Device::Mlx, &g).unwrap();
    assert!(plan.is_whole(), "{plan}");
    let want = run(Device::Cpu, &g);
    assert!(want.iter().all(|v| *v != 0.0));
    for mode in MODES {
        let got = with_mode(mode, || run(Device::Mlx, &g));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| ((a - b) / b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= 1e-6, "[{}] {got:?} vs {want:?}", mode.name());
    }
    let info = mlx()
        .lookup_custom_op(CPU_ONLY)
        .expect("bridged into the plugin");
    assert_eq!(info.origin, rlx_plugin_api::Origin::Host);
}

#[test]
fn an_op_with_no_kernel_anywhere_is_placed_on_the_cpu_with_its_reason() {
    setup();
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let plan = explain(Device::Mlx, &graph(NOWHERE)).unwrap();
    let p = plan
        .placements
        .iter()
        .find(|p| p.kind == rlx_ir::OpKind::Custom)
        .unwrap();
    assert_eq!(p.side, Some(Side::Cpu), "{plan}");
    assert!(
        p.why
            .contains(&format!("no kernel for custom op {NOWHERE}")),
        "{}",
        p.why
    );
    // Without fallback the compile fails with that reason, before the
    // plugin sees the graph. (Its own device slot.)
    register_plugin_backend(mlx(), Device::Gpu, Mode::Lazy);
    assert!(set_fallback(Device::Gpu, Fallback::Never));
    let e = rlx_plugin_host::guard::catch("compile", || {
        Session::new(Device::Gpu).compile(graph(NOWHERE))
    })
    .err()
    .expect("the compile fails");
    assert!(
        e.contains(&format!("no kernel for custom op {NOWHERE}")),
        "{e}"
    );
    assert!(!e.contains("is registered"), "{e}");
}
