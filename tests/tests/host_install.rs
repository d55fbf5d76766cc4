//! The host library's one call: `rlx_plugin_host::install` discovers the
//! MLX plugin (here: the build tree's plugin directory, named explicitly),
//! registers it for `Device::Mlx`, and `Session::new(Device::Mlx)` then
//! runs there; a backend no candidate serves is an error that names what
//! was found. Reference: the formula in f64.

use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::mlx_plugin_dir;
use rlx_runtime::{Device, Session};

#[test]
fn install_then_session_new_runs_on_the_plugin() {
    let installed = rlx_plugin_host::install(&rlx_plugin_host::Options {
        plugins: vec![mlx_plugin_dir()],
        mode: Mode::Eager,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(installed.plugin.descriptor().name, "mlx");
    assert_eq!(installed.device, Device::Mlx);
    assert_eq!(
        rlx_plugin_host::backend::registered_plugin(Device::Mlx)
            .map(|p| p.descriptor().name.clone()),
        Some("mlx".to_string())
    );
    let s = Shape::new(&[4], DType::F32);
    let mut g = Graph::new("install");
    let x = g.input("x", s.clone());
    let y = g.input("y", s.clone());
    let m = g.binary(BinaryOp::Mul, x, y, s.clone());
    let o = g.binary(BinaryOp::Add, m, x, s);
    g.set_outputs(vec![o]);
    let mut exe = Session::new(Device::Mlx).compile(g);
    let (xv, yv) = ([1.5f32, -2.0, 0.25, 3.0], [2.0f32, 0.5, -4.0, 1.0]);
    let out = exe.run(&[("x", &xv[..]), ("y", &yv[..])]);
    let want: Vec<f32> = xv
        .iter()
        .zip(yv)
        .map(|(a, b)| (*a as f64 * b as f64 + *a as f64) as f32)
        .collect();
    assert_eq!(out[0], want);
}

#[test]
fn a_backend_nobody_serves_is_an_error_naming_the_candidates() {
    let e = rlx_plugin_host::install(&rlx_plugin_host::Options {
        plugins: vec![mlx_plugin_dir()],
        backend: "nosuch".into(),
        device: Device::Mlx,
        ..Default::default()
    })
    .err()
    .expect("no plugin is called nosuch");
    assert!(
        e.starts_with("no plugin named \"nosuch\" is loaded; found: "),
        "{e}"
    );
    assert!(e.contains("(plugin \"mlx\"): loaded"), "{e}");
}

/// `Options::memory_limit` reaches the plugin through the compile options: a
/// graph with a 4 MiB tensor fails to compile under a 1 MiB limit, naming the
/// host's limit, and compiles once the limit is lifted. (Registered on a device
/// slot of its own, so the other test's registration for `Device::Mlx` does not
/// interfere.)
#[test]
fn the_memory_limit_option_reaches_the_plugin() {
    let device = Device::Vulkan;
    rlx_plugin_host::install(&rlx_plugin_host::Options {
        plugins: vec![mlx_plugin_dir()],
        device,
        memory_limit: Some(1 << 20),
        ..Default::default()
    })
    .unwrap();
    let graph = || {
        let s = Shape::new(&[1024, 1024], DType::F32);
        let mut g = Graph::new("four_mib");
        let x = g.input("x", s.clone());
        let y = g.binary(BinaryOp::Add, x, x, s);
        g.set_outputs(vec![y]);
        g
    };
    let e = rlx_plugin_host::guard::catch("compile", || Session::new(device).compile(graph()))
        .err()
        .expect("refused under 1 MiB");
    assert!(e.contains("resource exhausted"), "{e}");
    assert!(e.contains("the host's limit (compile options)"), "{e}");
    assert!(rlx_plugin_host::backend::set_memory_limit(device, None));
    let mut exe = Session::new(device).compile(graph());
    let x = vec![0.5f32; 1 << 20];
    assert_eq!(exe.run(&[("x", &x[..])])[0][12345], 1.0);
}
