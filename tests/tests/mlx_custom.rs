//! Custom ops end to end on the MLX plugin: the plugin's native ops, host
//! kernels and composites inside graphs, in every mode, f32 and f16.
//!
//! References:
//! - native ops: rlx-runtime's CPU backend running the same graph with a
//!   CPU kernel registered for each op name here, computing the op's
//!   definition in f64 (erfinv by Newton's method on libm's erf);
//! - host kernels: the CPU backend running the same graph with the same
//!   kernel (registered with rlx-cpu by `register_host_op`);
//! - composites: the CPU backend running the graph with the body's ops
//!   written out in place of the custom node.
//!
//! Tolerances: f32 1e-5 abs + 1e-5 rel; f16 inputs and outputs rounded to
//! f16, 2e-3 abs + 2e-3 rel (a few f16 ulps).

use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType as IrDType, Graph, OpExtension, Shape};
use rlx_plugin_api::{
    CustomImpl, CustomKernel, CustomOp, DType, Mode, Origin, PluginResult, ShapeRule, StatusCode,
    TensorView, TensorViewMut,
};
use rlx_plugin_host::custom_ops::{register_host_op, register_plugin_ops};
use rlx_plugin_tests::parity::{
    check_against_every_mode, mlx, random_feeds, run_cpu, run_mlx, Feed, Tol,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

const F32: Tol = Tol {
    abs: 1e-5,
    rel: 1e-5,
};
const F16: Tol = Tol {
    abs: 2e-3,
    rel: 2e-3,
};

fn tol(d: IrDType) -> Tol {
    if d == IrDType::F32 {
        F32
    } else {
        F16
    }
}

/// The plugin's ops as rlx-ir ops, and f64 CPU references for its native
/// ones, once per test binary.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let skipped = register_plugin_ops(&mlx());
        assert!(skipped.is_empty(), "{skipped:?}");
        rlx_cpu_kernel::register_native_references();
    });
}

/// Values of a view as f64, by dtype.
fn values(t: &TensorView) -> Vec<f64> {
    rlx_plugin_api::convert::bytes_to_f32(t.dtype, t.data)
        .unwrap()
        .iter()
        .map(|v| *v as f64)
        .collect()
}

fn write(out: &mut TensorViewMut, v: &[f64]) -> PluginResult<()> {
    let f: Vec<f32> = v.iter().map(|x| *x as f32).collect();
    let bytes = rlx_plugin_api::convert::f32_to_bytes(out.dtype, &f)?;
    out.data.copy_from_slice(&bytes);
    Ok(())
}

/// erf⁻¹ in f64: Newton's method on libm's erf from a rough start.
fn erfinv(y: f64) -> f64 {
    if y <= -1.0 {
        return f64::NEG_INFINITY;
    }
    if y >= 1.0 {
        return f64::INFINITY;
    }
    let mut x = if y.abs() < 0.9 {
        y * std::f64::consts::PI.sqrt() / 2.0
    } else {
        y.signum() * (-(1.0 - y.abs()).ln()).sqrt()
    };
    for _ in 0..60 {
        let e = libm::erf(x) - y;
        x -= e / (2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp());
    }
    x
}

fn reference_unary(f: fn(f64) -> f64) -> CustomKernel {
    Arc::new(move |ins, outs, _| {
        let v: Vec<f64> = values(&ins[0]).into_iter().map(f).collect();
        write(&mut outs[0], &v)
    })
}

mod rlx_cpu_kernel {
    //! The native ops' f64 references as rlx-cpu kernels.
    use super::*;

    fn shape_usize(s: &[usize]) -> Vec<usize> {
        s.to_vec()
    }

    /// `[.., n]`-shaped index helpers for logcumsumexp along the last axis.
    fn logcumsumexp_last(x: &[f64], shape: &[usize]) -> Vec<f64> {
        let n = *shape.last().unwrap();
        let mut out = vec![0.0; x.len()];
        for (row, o) in x.chunks(n).zip(out.chunks_mut(n)) {
            let mut acc = f64::NEG_INFINITY;
            for (i, v) in row.iter().enumerate() {
                let m = acc.max(*v);
                acc = m + ((acc - m).exp() + (v - m).exp()).ln();
                o[i] = acc;
            }
        }
        out
    }

    fn broadcast_index(i: usize, out: &[usize], inp: &[usize]) -> usize {
        // Row-major index of out element i in a broadcast input.
        let mut rem = i;
        let mut idx = 0;
        let mut stride = 1;
        let off = out.len() - inp.len();
        let mut coords = vec![0; out.len()];
        for d in (0..out.len()).rev() {
            coords[d] = rem % out[d];
            rem /= out[d];
        }
        for d in (0..inp.len()).rev() {
            let c = if inp[d] == 1 { 0 } else { coords[d + off] };
            idx += c * stride;
            stride *= inp[d];
        }
        idx
    }

    pub fn register_native_references() {
        use rlx_cpu::op_registry::register_cpu_kernel;
        let reg = |name: &str, k: CustomKernel| {
            register_cpu_kernel(rlx_plugin_host::custom_ops::cpu_kernel(name, k));
        };
        reg("mlx.erfinv", reference_unary(erfinv));
        reg(
            "mlx.logaddexp",
            Arc::new(|ins, outs, _| {
                let (a, b) = (values(&ins[0]), values(&ins[1]));
                let os = shape_usize(outs[0].shape);
                let n: usize = os.iter().product();
                let v: Vec<f64> = (0..n)
                    .map(|i| {
                        let x = a[broadcast_index(i, &os, ins[0].shape)];
                        let y = b[broadcast_index(i, &os, ins[1].shape)];
                        let m = x.max(y);
                        m + ((x - m).exp() + (y - m).exp()).ln()
                    })
                    .collect();
                write(&mut outs[0], &v)
            }),
        );
        reg(
            "mlx.logcumsumexp",
            Arc::new(|ins, outs, attrs| {
                // The tests use the default attributes or axis = last.
                assert!(attrs.is_empty() || attrs == (-1i32).to_le_bytes());
                let v = logcumsumexp_last(&values(&ins[0]), ins[0].shape);
                write(&mut outs[0], &v)
            }),
        );
        reg(
            "mlx.kron",
            Arc::new(|ins, outs, _| {
                // 2-D × 2-D: out[i*p + k, j*q + l] = a[i, j] * b[k, l].
                let (a, b) = (values(&ins[0]), values(&ins[1]));
                let (m, n) = (ins[0].shape[0], ins[0].shape[1]);
                let (p, q) = (ins[1].shape[0], ins[1].shape[1]);
                let mut v = vec![0.0; m * p * n * q];
                for i in 0..m {
                    for j in 0..n {
                        for k in 0..p {
                            for l in 0..q {
                                v[(i * p + k) * (n * q) + j * q + l] = a[i * n + j] * b[k * q + l];
                            }
                        }
                    }
                }
                write(&mut outs[0], &v)
            }),
        );
    }
}

/// A `[1]` constant of `dt` (broadcast by Binary).
fn scalar(g: &mut Graph, v: f64, dt: IrDType) -> rlx_ir::NodeId {
    let d = rlx_plugin_tests::parity::abi_dtype(dt);
    let data = rlx_plugin_api::convert::f32_to_bytes(d, &[v as f32]).unwrap();
    g.add_node(rlx_ir::Op::Constant { data }, vec![], Shape::new(&[1], dt))
}

fn cast(g: &mut Graph, x: rlx_ir::NodeId, to: IrDType) -> rlx_ir::NodeId {
    let d = dims(g, x);
    g.add_node(rlx_ir::Op::Cast { to }, vec![x], Shape::new(&d, to))
}

fn dims(g: &Graph, x: rlx_ir::NodeId) -> Vec<usize> {
    g.shape(x)
        .dims()
        .iter()
        .map(|d| match d {
            rlx_ir::Dim::Static(n) => *n,
            rlx_ir::Dim::Dynamic(_) => unreachable!("static test graphs"),
        })
        .collect()
}

/// `op(a, b)`, broadcasting (a `[1]` operand against anything).
fn bin(g: &mut Graph, op: BinaryOp, a: rlx_ir::NodeId, b: rlx_ir::NodeId) -> rlx_ir::NodeId {
    let (da, db) = (dims(g, a), dims(g, b));
    let out = if da.iter().product::<usize>() >= db.iter().product::<usize>() {
        da
    } else {
        db
    };
    let dt = g.shape(a).dtype();
    g.binary(op, a, b, Shape::new(&out, dt))
}

fn act(g: &mut Graph, a: Activation, x: rlx_ir::NodeId) -> rlx_ir::NodeId {
    let s = g.shape(x).clone();
    g.activation(a, x, s)
}

fn rounded_feeds(g: &Graph, seed: u64, scale: f32) -> Vec<Feed> {
    random_feeds(g, seed)
        .into_iter()
        .map(|mut f| {
            for v in &mut f.values {
                *v *= scale;
            }
            f
        })
        .collect()
}

/// The same graph, run on the CPU reference and on the plugin in all three
/// modes.
fn check(what: &str, g: &Graph, feeds: &[Feed], t: Tol) {
    let reference = run_cpu(g, feeds);
    check_against_every_mode(what, g, feeds, &reference, t);
}

fn native_graph(dt: IrDType) -> Graph {
    let mut g = Graph::new("native");
    let x = g.input("x", Shape::new(&[3, 5], dt));
    let b = g.input("b", Shape::new(&[5], dt));
    let a = g.input("a", Shape::new(&[2, 3], dt));
    let k = g.input("k", Shape::new(&[2, 2], dt));
    let lae = g.custom_op("mlx.logaddexp", vec![], vec![x, b]);
    let lcse = g.custom_op(
        "mlx.logcumsumexp",
        (-1i32).to_le_bytes().to_vec(),
        vec![lae],
    );
    // erfinv on tanh(x) * 0.9, inside (-1, 1).
    let t = act(&mut g, Activation::Tanh, x);
    let s = scalar(&mut g, 0.9, dt);
    let ts = bin(&mut g, BinaryOp::Mul, t, s);
    let ei = g.custom_op("mlx.erfinv", vec![], vec![ts]);
    let sum = bin(&mut g, BinaryOp::Add, lcse, ei);
    let kr = g.custom_op("mlx.kron", vec![], vec![a, k]);
    g.set_outputs(vec![sum, kr]);
    g
}

#[test]
fn native_ops_match_f64_references_in_every_mode_f32_and_f16() {
    setup();
    for dt in [IrDType::F32, IrDType::F16] {
        let g = native_graph(dt);
        assert_eq!(g.shape(g.outputs[1]).dims().len(), 2);
        let feeds = rounded_feeds(&g, 11, 1.0);
        check(&format!("native ops {dt:?}"), &g, &feeds, tol(dt));
    }
}

/// y = x * sigmoid(alpha * x), alpha from the attributes (f32 LE), counting
/// its calls.
fn swish_kernel(calls: Arc<AtomicUsize>) -> CustomKernel {
    Arc::new(move |ins, outs, attrs| {
        calls.fetch_add(1, Ordering::Relaxed);
        let alpha = f32::from_le_bytes(attrs.try_into().expect("4 attribute bytes")) as f64;
        let v: Vec<f64> = values(&ins[0])
            .iter()
            .map(|x| x / (1.0 + (-alpha * x).exp()))
            .collect();
        write(&mut outs[0], &v)
    })
}

fn host_graph(name: &str, dt: IrDType) -> Graph {
    let mut g = Graph::new("host_kernel");
    let x = g.input("x", Shape::new(&[4, 6], dt));
    let w = g.param("w", Shape::new(&[6, 8], dt));
    let h = g.matmul(x, w, Shape::new(&[4, 8], dt));
    let y = g.custom_op(name, 1.5f32.to_le_bytes().to_vec(), vec![h]);
    let z = act(&mut g, Activation::Tanh, y);
    g.set_outputs(vec![z]);
    g
}

#[test]
fn a_host_kernel_runs_inside_the_graph_in_every_mode_f32_and_f16() {
    setup();
    let calls = Arc::new(AtomicUsize::new(0));
    let name = "test.swish_alpha";
    register_host_op(
        &mlx(),
        CustomOp::new(
            name,
            "x * sigmoid(alpha x)",
            1,
            Origin::Host,
            CustomImpl::Kernel(swish_kernel(calls.clone())),
        )
        .with_shape(ShapeRule::SameAsInput(0)),
    )
    .unwrap();
    let info = mlx().lookup_custom_op(name).unwrap();
    assert_eq!(info.origin, Origin::Host);
    for dt in [IrDType::F32, IrDType::F16] {
        let g = host_graph(name, dt);
        let feeds = rounded_feeds(&g, 5, 1.0);
        let reference = run_cpu(&g, &feeds);
        let before = calls.load(Ordering::Relaxed);
        check_against_every_mode(
            &format!("host kernel {dt:?}"),
            &g,
            &feeds,
            &reference,
            tol(dt),
        );
        // The CPU run and three plugin runs each called the kernel.
        assert!(
            calls.load(Ordering::Relaxed) >= before + 3,
            "the plugin did not call the host kernel"
        );
    }
}

/// On the CPU a host kernel runs on the thread that runs the graph, which
/// the plugin evaluates itself (no hand-over to MLX's stream thread and
/// wait per kernel), lazily and node by node; the values are the
/// kernel's (an identity here, then tanh, against Rust's f32 tanh).
#[test]
fn a_host_kernel_runs_on_the_calling_thread_on_the_cpu() {
    setup();
    if mlx().descriptor().device_infos.first().map(|i| i.kind)
        == Some(rlx_plugin_api::DeviceKind::Gpu)
    {
        eprintln!(
            "skipped: the plugin evaluates on a GPU here, where kernels run on its CPU stream"
        );
        return;
    }
    let threads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = threads.clone();
    let kernel: CustomKernel = Arc::new(move |ins, outs, _| {
        seen.lock().unwrap().push(std::thread::current().id());
        outs[0].data.copy_from_slice(ins[0].data);
        Ok(())
    });
    let name = "test.identity_noting_its_thread";
    register_host_op(
        &mlx(),
        CustomOp::new(
            name,
            "identity, noting the thread it runs on",
            1,
            Origin::Host,
            CustomImpl::Kernel(kernel),
        )
        .with_shape(ShapeRule::SameAsInput(0)),
    )
    .unwrap();
    let mut g = Graph::new("where_kernels_run");
    let x = g.input("x", Shape::new(&[4, 6], IrDType::F32));
    let y = g.custom_op(name, vec![], vec![x]);
    let z = act(&mut g, Activation::Tanh, y);
    g.set_outputs(vec![z]);
    let feeds = random_feeds(&g, 9);
    for mode in [Mode::Lazy, Mode::Eager] {
        threads.lock().unwrap().clear();
        let out = run_mlx(&g, &feeds, mode).unwrap();
        let got = rlx_plugin_api::convert::bytes_to_f32(out[0].dtype, &out[0].data).unwrap();
        for (g, x) in got.iter().zip(&feeds[0].values) {
            assert!(
                (g - x.tanh()).abs() <= 1e-6,
                "{mode:?}: {g} against tanh({x})"
            );
        }
        let ran_on = threads.lock().unwrap().clone();
        assert!(!ran_on.is_empty(), "{mode:?}: the kernel was not called");
        assert!(
            ran_on.iter().all(|t| *t == std::thread::current().id()),
            "{mode:?}: the kernel ran on another thread than the run's"
        );
    }
}

/// tanh-GELU written as an rlx graph: the composite's body.
fn gelu_body(g: &mut Graph, x: rlx_ir::NodeId) -> rlx_ir::NodeId {
    let dt = g.shape(x).dtype();
    let x3 = {
        let x2 = bin(g, BinaryOp::Mul, x, x);
        bin(g, BinaryOp::Mul, x2, x)
    };
    let c = scalar(g, 0.044715, dt);
    let cx3 = bin(g, BinaryOp::Mul, c, x3);
    let inner = bin(g, BinaryOp::Add, x, cx3);
    let k = scalar(g, (2.0f64 / std::f64::consts::PI).sqrt(), dt);
    let u = bin(g, BinaryOp::Mul, k, inner);
    let t = act(g, Activation::Tanh, u);
    let one = scalar(g, 1.0, dt);
    let onep = bin(g, BinaryOp::Add, one, t);
    let half = scalar(g, 0.5, dt);
    let hx = bin(g, BinaryOp::Mul, half, x);
    bin(g, BinaryOp::Mul, hx, onep)
}

#[test]
fn a_composite_is_inlined_in_every_mode_f32_and_f16() {
    setup();
    let name = "test.gelu_tanh";
    let mut body = Graph::new("gelu_tanh");
    let bx = body.input("x", Shape::new(&[4, 8], IrDType::F32));
    let by = gelu_body(&mut body, bx);
    body.set_outputs(vec![by]);
    let text = rlx_ir::rlxmodel::to_text(&body).unwrap();
    register_host_op(
        &mlx(),
        CustomOp::new(
            name,
            "tanh GELU",
            1,
            Origin::Host,
            CustomImpl::Composite(text.into()),
        ),
    )
    .unwrap();
    assert_eq!(
        mlx().lookup_custom_op(name).unwrap().kind,
        rlx_plugin_api::CustomKind::Composite
    );
    for dt in [IrDType::F32, IrDType::F16] {
        let mut g = Graph::new("uses_composite");
        let x = g.input("x", Shape::new(&[4, 8], dt));
        let s = act(&mut g, Activation::Sigmoid, x);
        let y = g.custom_op(name, vec![], vec![s]);
        g.set_outputs(vec![y]);
        assert_eq!(
            g.shape(y).dtype(),
            dt,
            "the body's f32 converts to the node's dtype"
        );
        // The reference: the body's ops written out in place of the node,
        // computed in f32 as the body declares, on the CPU.
        let mut r = Graph::new("written_out");
        let rx = r.input("x", Shape::new(&[4, 8], dt));
        let rs = act(&mut r, Activation::Sigmoid, rx);
        let rs32 = cast(&mut r, rs, IrDType::F32);
        let ry = gelu_body(&mut r, rs32);
        let ry = cast(&mut r, ry, dt);
        r.set_outputs(vec![ry]);
        let feeds = rounded_feeds(&g, 3, 2.0);
        let reference = run_cpu(&r, &feeds);
        check_against_every_mode(
            &format!("composite {dt:?}"),
            &g,
            &feeds,
            &reference,
            tol(dt),
        );
    }
    // Input shapes other than the body's are refused, naming the body's.
    let mut g = Graph::new("wrong_shape");
    let x = g.input("x", Shape::new(&[2, 8], IrDType::F32));
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        g.custom_op(name, vec![], vec![x])
    }));
    let msg = rlx_plugin_api::error::panic_message(&*ok.unwrap_err());
    assert!(msg.contains("[4, 8]"), "{msg}");
}

#[test]
fn an_unknown_name_fails_at_compile_naming_it_and_the_registered_ones() {
    setup();
    let g = rlx_plugin_tests::one_custom_op("nobody.has_this");
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let e = mlx().compile(&text, mode).err().expect("compile fails");
        assert_eq!(e.code, StatusCode::NotFound, "{e}");
        assert!(e.message.contains("nobody.has_this"), "{e}");
        assert!(e.message.contains("mlx.erfinv"), "{e}");
        assert!(e.message.contains("node %1"), "{e}");
    }
}

/// Fails for a negative first element, panics for one above 100.
fn picky_kernel() -> CustomKernel {
    Arc::new(|ins, outs, _| {
        let v = values(&ins[0]);
        if v[0] > 100.0 {
            panic!("picky kernel saw {}", v[0]);
        }
        if v[0] < 0.0 {
            return Err(rlx_plugin_api::PluginError::invalid_argument(format!(
                "picky kernel refuses {}",
                v[0]
            )));
        }
        write(&mut outs[0], &v)
    })
}

#[test]
fn a_failing_or_panicking_kernel_fails_only_that_run() {
    setup();
    let name = "test.picky";
    register_host_op(
        &mlx(),
        CustomOp::new(
            name,
            "",
            1,
            Origin::Host,
            CustomImpl::Kernel(picky_kernel()),
        )
        .with_shape(ShapeRule::SameAsInput(0)),
    )
    .unwrap();
    let mut g = Graph::new("picky");
    let x = g.input("x", Shape::new(&[3], IrDType::F32));
    let y = g.custom_op(name, vec![], vec![x]);
    let z = act(&mut g, Activation::Relu, y);
    g.set_outputs(vec![z]);
    let feed = |v: [f32; 3]| {
        vec![Feed {
            name: "x".into(),
            values: v.to_vec(),
        }]
    };
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let ok = run_mlx(&g, &feed([1.0, -2.0, 3.0]), mode).unwrap();
        assert_eq!(ok[0].to_f32_vec().unwrap(), vec![1.0, 0.0, 3.0]);
        let e = run_mlx(&g, &feed([-1.0, 2.0, 3.0]), mode).unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument, "{e}");
        assert!(
            e.message.contains("picky kernel refuses -1") && e.message.contains(name),
            "[{}] {e}",
            mode.name()
        );
        let e = run_mlx(&g, &feed([200.0, 2.0, 3.0]), mode).unwrap_err();
        assert_eq!(e.code, StatusCode::Panic, "{e}");
        assert!(e.message.contains("picky kernel saw 200"), "{e}");
        // The same executable runs again afterwards.
        let again = run_mlx(&g, &feed([2.0, 2.0, -3.0]), mode).unwrap();
        assert_eq!(again[0].to_f32_vec().unwrap(), vec![2.0, 2.0, 0.0]);
    }
}

#[test]
fn an_unregistered_op_lives_on_in_the_executables_that_use_it() {
    setup();
    let name = "test.kept_alive";
    let ctx = Arc::new(());
    let keep = ctx.clone();
    let kernel: CustomKernel = Arc::new(move |ins, outs, _| {
        let _ = &keep;
        outs[0].data.copy_from_slice(ins[0].data);
        Ok(())
    });
    // Registered with the plugin only, so that the plugin is the kernel's
    // one holder.
    mlx()
        .register_op(
            CustomOp::new(name, "copy", 1, Origin::Host, CustomImpl::Kernel(kernel))
                .with_shape(ShapeRule::SameAsInput(0)),
        )
        .unwrap();
    let g = rlx_plugin_tests::one_custom_op(name);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let mut exe = mlx().compile(&text, Mode::Lazy).unwrap();
    let held_before = Arc::strong_count(&ctx);
    assert_eq!(held_before, 2, "this test and the kernel hold the context");
    mlx().unregister_custom_op(name).unwrap();
    let x = rlx_plugin_api::HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
    let out = exe.run(&[("x", &x)]).unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0]);
    let e = mlx().compile(&text, Mode::Lazy).err().unwrap();
    assert_eq!(e.code, StatusCode::NotFound);
    assert_eq!(
        Arc::strong_count(&ctx),
        held_before,
        "kept while the executable lives"
    );
    drop(exe);
    assert_eq!(
        Arc::strong_count(&ctx),
        held_before - 1,
        "the plugin dropped its context with the last executable"
    );
}

#[test]
fn eight_threads_register_look_up_and_run_at_once() {
    setup();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..12 {
                    let name = format!("test.thread{t}_{i}");
                    let add = (t * 100 + i) as f32;
                    let kernel: CustomKernel = Arc::new(move |ins, outs, _| {
                        let v: Vec<f64> = values(&ins[0]).iter().map(|x| x + add as f64).collect();
                        write(&mut outs[0], &v)
                    });
                    mlx()
                        .register_op(
                            CustomOp::new(&name, "", 1, Origin::Host, CustomImpl::Kernel(kernel))
                                .with_shape(ShapeRule::SameAsInput(0)),
                        )
                        .unwrap();
                    assert_eq!(mlx().lookup_custom_op(&name).unwrap().name, name);
                    let g = rlx_plugin_tests::one_custom_op(&name);
                    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
                    let mode = [Mode::Lazy, Mode::Eager][i % 2];
                    let mut exe = mlx().compile(&text, mode).unwrap();
                    let x =
                        rlx_plugin_api::HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
                    let out = exe.run(&[("x", &x)]).unwrap();
                    assert_eq!(
                        out[0].to_f32_vec().unwrap(),
                        vec![1.0 + add, 2.0 + add, 3.0 + add]
                    );
                    mlx().unregister_custom_op(&name).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread failed");
    }
}

struct Taken;
impl OpExtension for Taken {
    fn name(&self) -> &str {
        "test.taken_by_the_host"
    }
    fn num_inputs(&self) -> usize {
        1
    }
    fn infer_shape(&self, i: &[&Shape], _: &[u8]) -> Shape {
        i[0].clone()
    }
}

#[test]
fn a_name_the_host_already_has_is_reported_never_replaced() {
    setup();
    rlx_ir::register_op_strict(Arc::new(Taken)).unwrap();
    let k: CustomKernel = Arc::new(|_, _, _| Ok(()));
    let e = register_host_op(
        &mlx(),
        CustomOp::new(Taken.name(), "", 1, Origin::Host, CustomImpl::Kernel(k))
            .with_shape(ShapeRule::SameAsInput(0)),
    )
    .unwrap_err();
    assert_eq!(e.code, StatusCode::AlreadyExists, "{e}");
    assert_eq!(
        mlx().lookup_custom_op(Taken.name()).unwrap_err().code,
        StatusCode::NotFound
    );
    // A plugin op whose name is taken twice over in the registry is refused.
    let k: CustomKernel = Arc::new(|_, _, _| Ok(()));
    let e = mlx()
        .register_op(
            CustomOp::new("mlx.erfinv", "", 1, Origin::Host, CustomImpl::Kernel(k))
                .with_shape(ShapeRule::SameAsInput(0)),
        )
        .unwrap_err();
    assert_eq!(e.code, StatusCode::AlreadyExists);
    let _ = DType::F32;
}

#[test]
fn session_new_mlx_compiles_custom_nodes_and_matches_the_cpu() {
    use rlx_host::run::{errors, execute, random_data};
    use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
    use rlx_runtime::Device;
    setup();
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let g = native_graph(IrDType::F32);
    let data = random_data(&g, 9).unwrap();
    let cpu = execute(Device::Cpu, &g, &data, 1).unwrap();
    assert!(cpu.outputs.iter().all(|o| o.iter().any(|v| *v != 0.0)));
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let got = with_mode(mode, || execute(Device::Mlx, &g, &data, 2))
            .unwrap_or_else(|e| panic!("[{}] {e}", mode.name()));
        for (i, (a, b)) in got.outputs.iter().zip(&cpu.outputs).enumerate() {
            let (abs, _) = errors(a, b).unwrap();
            assert!(abs <= 1e-5, "[{}] output {i}: {abs}", mode.name());
        }
    }
}
