//! The host's compile cache (host/src/backend/compile_cache.rs): a graph
//! compiled for the plugin before, handed over again (built from
//! scratch), is a clone of that compile's executable instead of a new
//! compile: nothing bound, the same results. A graph that differs in any
//! constant, attribute or shape, or a compile in another mode, compiles.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend::{
    compile_cache, compile_on_plugin, register_plugin_backend, with_mode,
};
use rlx_plugin_tests::parity::mlx;
use rlx_runtime::{Device, ExecutableGraph};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `y = (x + c) * w`, built from scratch each call.
fn graph(c: f64, n: usize) -> Graph {
    let s = Shape::new(&[2, n], DType::F32);
    let mut g = Graph::new("cached");
    let x = g.input("x", s.clone());
    let w = g.param("w", s);
    let k = g.constant(c, DType::F32);
    let a = g.add(x, k);
    let y = g.mul(a, w);
    g.set_outputs(vec![y]);
    g
}

fn compile(g: &Graph, mode: Mode) -> rlx_plugin_host::backend::PluginGraph {
    with_mode(mode, || compile_on_plugin(Device::Mlx, g)).unwrap()
}

#[test]
fn the_same_graph_again_is_a_fresh_clone_not_a_compile() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    compile_cache::clear();
    let x = [1.0f32, 2., 3., 4., 5., 6.];
    let w = [2.0f32; 6];
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut first = compile(&graph(1.0, 3), mode);
        assert!(!first.reused(), "[{}] the first compile", mode.name());
        first.set_param("w", &w);
        let want = first.run(&[("x", &x)]);
        assert_eq!(want[0], vec![4., 6., 8., 10., 12., 14.]);
        let mut again = compile(&graph(1.0, 3), mode);
        assert!(again.reused(), "[{}] the same graph", mode.name());
        // A new executable: the first one's param is not bound here.
        assert!(!again.param_already_set("w"));
        again.set_param("w", &w);
        assert_eq!(again.run(&[("x", &x)]), want, "[{}]", mode.name());
        // Another constant, another shape: compiled.
        assert!(
            !compile(&graph(1.5, 3), mode).reused(),
            "[{}] constant",
            mode.name()
        );
        assert!(
            !compile(&graph(1.0, 4), mode).reused(),
            "[{}] shape",
            mode.name()
        );
    }
    // The mode is part of what a compile depends on: each mode above
    // compiled once.
    assert!(compile(&graph(1.0, 3), Mode::Eager).reused());
    compile_cache::clear();
    assert!(
        !compile(&graph(1.0, 3), Mode::Eager).reused(),
        "after clear"
    );
}
