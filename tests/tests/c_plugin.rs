//! c-demo, the backend plugin written in plain C11 against
//! `plugin-api/include/rlx_plugin.h` (tests/plugins/c-plugin/c_plugin.c).
//! tests/build.rs builds it once per ABI minor it claims (1.0 ..= 1.13).
//!
//! - the 1.4 build through discovery: descriptor, ops, lowering table,
//!   eager single ops, custom ops, logging;
//! - rlx-runtime's `Session::new(Device::Mlx)` on it, in every mode, against
//!   `Session::new(Device::Cpu)`;
//! - the skew matrix's C half: each build, loaded by this (Rust) host;
//! - errors, with their exact messages;
//! - the C ABI driven by hand (what the Rust host API never sends: refused
//!   handshakes, short compile options, OWNED params, bad descriptors);
//! - the `rlx-host` CLI end to end;
//! - the plain-C host (tests/hosts/c-host) on every build, at every claim;
//! - executable state on the 1.9 build, which keeps it (no row feeds, clones,
//!   shared params, submitted runs, param ranges, RNG changes, active extents
//!   or memory figures): through the host library, by hand, and through the
//!   host adapter, whose capabilities each build must report exactly (each flag
//!   reported is shown to hold, each one not reported is shown to be refused).

use rlx_ir::infer::GraphExt;
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_api::tables::{
    RlxCompileOptions, RlxCustomOpDesc, RlxHostApi, RlxLogRecord, RlxPluginApi, RlxShapeOut,
    RlxValueInfo, CUSTOM_OP_API_SIZE_1_1, CUSTOM_OP_DESC_SIZE_1_1,
};
use rlx_plugin_api::tensor::{ownership, RlxNamedTensor};
use rlx_plugin_api::{
    CompileOptions, CustomImpl, CustomKernel, CustomKind, CustomOp, DType, Feed, HostTensor, Mode,
    Offers, Origin, OwnedKernel, PluginResult, RlxAbiVersion, RlxStatus, RlxStr, RlxTensor, Role,
    RowFeed, ShapeRule, ShapeRuleKind, StatusCode, Strategy, TensorType, TensorView, TensorViewMut,
};
use rlx_plugin_loader::{
    library_file_name, CandidateState, LentBuffer, LoadedPlugin, OutputDest, PluginExecutable,
    PluginSet,
};
use rlx_plugin_tests::{capture_logs, only_dir, plugins_dir, profile_dir};
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MODES: [Mode; 3] = [Mode::Lazy, Mode::Eager, Mode::Compiled];

/// The newest ABI minor: tests/build.rs builds the C plugin for 1.0 ..= it.
const NEWEST_MINOR: u32 = rlx_plugin_api::ABI_VERSION.minor;

/// The C build claiming ABI 1.`minor`.
fn c_build(minor: u32) -> PathBuf {
    let p = Path::new(env!("RLX_C_ARTIFACTS"))
        .join("c-plugins")
        .join(format!("1.{minor}"))
        .join(library_file_name("rlx_c_plugin"));
    assert!(
        p.exists(),
        "{} is missing: tests/build.rs builds it",
        p.display()
    );
    p
}

/// A temp plugins directory holding a copy of the 1.`minor` build, and the
/// plugin loaded from it through discovery. Every copy is a library of its
/// own (its own statics, so its own custom-op registry).
fn load_build(minor: u32) -> (tempfile::TempDir, Arc<LoadedPlugin>) {
    let file = library_file_name("rlx_c_plugin");
    let dir = plugins_dir(&[(&c_build(minor), &file)]);
    let set = PluginSet::load(&only_dir(dir.path()));
    assert_eq!(set.candidates.len(), 1);
    assert!(
        matches!(set.candidates[0].state, CandidateState::Loaded(_)),
        "1.{minor}: {}",
        set.candidates[0].reason()
    );
    let p = set.get("c-demo").expect("c-demo loaded");
    (dir, p)
}

fn f32s(shape: &[usize]) -> Shape {
    Shape::new(shape, IrDType::F32)
}

fn text(g: &Graph) -> String {
    rlx_ir::rlxmodel::to_text(g).unwrap()
}

fn t(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).unwrap()
}

/// x[2,3] · w[3,2] + b[2] → relu, with the bias an input named unlike its
/// label and the output named.
fn affine_relu() -> Graph {
    let mut g = Graph::new("affine");
    let x = g.input("x", f32s(&[2, 3]));
    let w = g.param("w", f32s(&[3, 2]));
    let b = g.input("the bias", f32s(&[2]));
    let m = g.matmul(x, w, f32s(&[2, 2]));
    let a = g.binary(BinaryOp::Add, m, b, f32s(&[2, 2]));
    let r = g.activation(Activation::Relu, a, f32s(&[2, 2]));
    g.set_named_outputs([("logits", r)]);
    g
}

/// Plain Rust: relu(x · w + b), row-major.
fn affine_relu_ref(x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; 4];
    for i in 0..2 {
        for j in 0..2 {
            let s: f32 = (0..3).map(|p| x[i * 3 + p] * w[p * 2 + j]).sum();
            out[i * 2 + j] = (s + b[j]).max(0.0);
        }
    }
    out
}

const X: [f32; 6] = [1., 2., 3., -4., -5., -6.];
const W: [f32; 6] = [0.5, -1., 0.25, 2., -0.75, 1.];
const B: [f32; 2] = [0.5, -0.5];

#[test]
fn c_demo_reads_every_form_rlx_writes() {
    // What rlx-ir 0.2.19 writes (printed with --nocapture), asserted so a
    // writer change shows up here, then compiled and run by c-demo.
    let (_dir, p) = load_build(4);
    let g = affine_relu();
    let s = text(&g);
    println!("{s}");
    for form in [
        "rlxmodel 1\nopset 1\nrlx 0.2.19\n",
        "%x = input : f32[2, 3]",
        "%w = param : f32[3, 2]",
        "%2 = Input{name: \"the bias\"} : f32[2] name \"the bias\"",
        "MatMul %x, %w : f32[2, 2]",
        "Binary(Add)",
        "Activation(Relu)",
        "return %5 as logits",
    ] {
        assert!(s.contains(form), "{form:?} not in:\n{s}");
    }
    assert!(p.compile(&s, Mode::Lazy).is_ok());

    // Constants: a scalar `const`, a large one as b64 bytes; a node name
    // that is not a label; an origin block; an output that is an input;
    // comments.
    let mut g = Graph::new("consts");
    let x = g.input("x", f32s(&[2, 150]));
    let two = g.constant(2.0, IrDType::F32);
    let y = g.mul(x, two);
    let big: Vec<f32> = (0..300).map(|i| i as f32 / 8.0).collect();
    let data = big.iter().flat_map(|v| v.to_le_bytes()).collect();
    let k = g.append_node(rlx_ir::Op::Constant { data }, vec![], f32s(&[2, 150]), None);
    let y = g.add(y, k);
    let y = g.exp(y);
    g.node_mut(y).name = Some("not a label".into());
    g.node_mut(k).origin = Some(rlx_ir::NodeOrigin {
        hir: None,
        label: Some("table".into()),
        pass: Some("test".into()),
    });
    g.set_outputs(vec![y, x]);
    let s = text(&g);
    println!("{s}");
    for form in [
        "%1 = const 2.0 : f32[]",
        "%3 = Constant{data: b64\"AAAAAAAAAD4AAIA+",
        "origin {label: \"table\", pass: \"test\"}",
        "name \"not a label\"",
        "return %5, %x",
    ] {
        assert!(s.contains(form), "{form:?} not in:\n{s}");
    }
    let commented = s.replace(
        "graph @consts {",
        "// c-demo skips comments\ngraph @consts { // here too",
    );
    let mut exe = p.compile(&commented, Mode::Eager).unwrap();
    let xs: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) / 100.0).collect();
    let out = exe.run(&[("x", &t(&[2, 150], &xs))]).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].to_f32_vec().unwrap(), xs);
    let got = out[0].to_f32_vec().unwrap();
    for i in 0..300 {
        let want = (xs[i] * 2.0 + big[i]).exp();
        assert!(
            (got[i] - want).abs() <= 1e-6 * want,
            "[{i}] {} vs {want}",
            got[i]
        );
    }
}

#[test]
fn c_demo_loads_through_discovery_and_works() {
    let logs = capture_logs(log::LevelFilter::Debug);
    let (_dir, p) = load_build(4);

    // Handshake and descriptor.
    assert_eq!(
        p.abi_version(),
        RlxAbiVersion {
            major: 1,
            minor: 4,
            patch: 0
        }
    );
    let d = p.descriptor();
    assert_eq!((d.name.as_str(), d.version.as_str()), ("c-demo", "0.1.0"));
    assert!(d.description.contains("C11"), "{}", d.description);
    assert_eq!(d.devices, ["cpu"]);
    assert_eq!(d.opsets, [1]);
    assert!(d.build_info.contains(&("language".into(), "C11".into())));
    assert!(d
        .build_info
        .contains(&("abi.claimed".into(), "1.4.0".into())));

    // Ops and the lowering table: the same rows, f32 only.
    let kinds = [
        "Input",
        "Param",
        "Constant",
        "Binary",
        "Activation",
        "MatMul",
    ];
    let ops: Vec<&str> = p
        .supported_ops()
        .iter()
        .map(|o| o.op_kind.as_str())
        .collect();
    assert_eq!(ops, kinds);
    assert!(p.supported_ops().iter().all(|o| o.dtypes == [DType::F32]));
    let table = p.lowering_table();
    let rows: Vec<(&str, Strategy, bool)> = table
        .iter()
        .map(|e| (e.op_kind.as_str(), e.strategy, e.eager))
        .collect();
    assert_eq!(
        rows,
        [
            ("Input", Strategy::Native, false),
            ("Param", Strategy::Native, false),
            ("Constant", Strategy::Native, false),
            ("Binary", Strategy::Native, true),
            ("Activation", Strategy::Native, true),
            ("MatMul", Strategy::Native, true),
        ]
    );
    assert!(table
        .iter()
        .all(|e| !e.note.is_empty() && e.dtypes == [DType::F32]));
    let binary = table.iter().find(|e| e.op_kind == "Binary").unwrap();
    assert_eq!(binary.note, "Add, Sub, Mul, Div; numpy broadcasting");

    // Eager single ops through the lowering entries.
    let mut g = Graph::new("sub");
    let a = g.input("a", f32s(&[3]));
    let b = g.input("b", f32s(&[3]));
    let s = g.binary(BinaryOp::Sub, a, b, f32s(&[3]));
    g.set_outputs(vec![s]);
    let out = p
        .execute_op(
            "Binary",
            &text(&g),
            &[t(&[3], &[5., 7., 9.]), t(&[3], &[1., 2., 3.])],
        )
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_f32_vec().unwrap(), [4., 5., 6.]);
    let mut g = Graph::new("mm");
    let a = g.input("a", f32s(&[1, 2]));
    let w = g.param("w", f32s(&[2, 2]));
    let m = g.matmul(a, w, f32s(&[1, 2]));
    g.set_outputs(vec![m]);
    let out = p
        .execute_op(
            "MatMul",
            &text(&g),
            &[t(&[1, 2], &[1., 2.]), t(&[2, 2], &[1., 2., 3., 4.])],
        )
        .unwrap();
    assert_eq!(
        (out[0].shape.clone(), out[0].to_f32_vec().unwrap()),
        (vec![1, 2], vec![7., 10.])
    );
    let e = p.execute_op("Activation", &text(&g), &[]).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(
        e.message,
        "execute Activation: the node graph must hold exactly one Activation node besides its \
         inputs (it holds 1 op nodes)"
    );
    let e = p.execute_op("Input", &text(&g), &[]).unwrap_err();
    assert_eq!(e.code, StatusCode::Unsupported);

    // A compiled graph: signature (inputs, then params, then outputs).
    let mut exe = p.compile(&text(&affine_relu()), Mode::Lazy).unwrap();
    let sig: Vec<(Role, &str, Vec<Option<usize>>)> = exe
        .signature()
        .iter()
        .map(|v| (v.role, v.name.as_str(), v.shape.clone()))
        .collect();
    assert_eq!(
        sig,
        [
            (Role::Input, "x", vec![Some(2), Some(3)]),
            (Role::Input, "the bias", vec![Some(2)]),
            (Role::Param, "w", vec![Some(3), Some(2)]),
            (Role::Output, "logits", vec![Some(2), Some(2)]),
        ]
    );
    assert!(exe.signature().iter().all(|v| v.dtype == DType::F32));
    let (x, w, b) = (t(&[2, 3], &X), t(&[3, 2], &W), t(&[2], &B));
    // Copied, then zero-copy (persistent), then copied again.
    exe.bind_param("w", &w).unwrap();
    let out = exe.run(&[("x", &x), ("the bias", &b)]).unwrap();
    assert_eq!(out[0].shape, [2, 2]);
    assert_eq!(out[0].to_f32_vec().unwrap(), affine_relu_ref(&X, &W, &B));
    exe.bind_param_shared("w", Arc::new(t(&[3, 2], &[1.; 6])))
        .unwrap();
    let out = exe.run(&[("the bias", &b), ("x", &x)]).unwrap();
    assert_eq!(
        out[0].to_f32_vec().unwrap(),
        affine_relu_ref(&X, &[1.; 6], &B)
    );
    exe.bind_param("w", &w).unwrap();
    let out = exe.run(&[("x", &x), ("the bias", &b)]).unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), affine_relu_ref(&X, &W, &B));

    // Unnamed outputs take rlx's default names.
    let mut g = Graph::new("two");
    let x = g.input("x", f32s(&[2]));
    let e = g.activation(Activation::Exp, x, f32s(&[2]));
    let n = g.activation(Activation::Neg, e, f32s(&[2]));
    g.set_outputs(vec![e, n]);
    let mut exe = p.compile(&text(&g), Mode::Eager).unwrap();
    let names: Vec<&str> = exe.values(Role::Output).map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["output0", "output1"]);
    let out = exe.run(&[("x", &t(&[2], &[0., 1.]))]).unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), [1., 1f32.exp()]);
    assert_eq!(out[1].to_f32_vec().unwrap(), [-1., -(1f32.exp())]);

    // Custom ops: the plugin's own.
    let listed = p.list_custom_ops().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].name.as_str(),
            listed[0].n_inputs,
            listed[0].n_outputs,
            listed[0].origin
        ),
        ("c_demo.scale2", 1, 1, Origin::Plugin)
    );
    let two = p
        .execute_custom_op("c_demo.scale2", &[t(&[2, 1], &[1.5, -2.])], 1)
        .unwrap();
    assert_eq!(
        (two[0].shape.clone(), two[0].to_f32_vec().unwrap()),
        (vec![2, 1], vec![3., -4.])
    );

    // Logging: the init record reaches this logger under the plugin's name,
    // and compiles log at debug.
    let records = logs();
    let ours: Vec<_> = records
        .iter()
        .filter(|r| r.target == "rlx_plugin::c-demo::c_demo")
        .collect();
    assert!(
        ours.iter().any(|r| r.level == log::Level::Info
            && r.message
                == "c-demo 0.1.0 (C11, ABI 1.4.0) registered 6 lowerings and 1 custom op(s)"),
        "{records:#?}"
    );
    assert!(ours.iter().any(|r| r.level == log::Level::Debug
        && r.message.contains("in lazy mode; rng policy 0, seed 42")));
}

/// y = exp(x · w + b), b broadcast over rows; and a second graph with a
/// constant, a scalar and every binary op.
fn session_graphs() -> Vec<Graph> {
    let mut g = Graph::new("affine_exp");
    let x = g.input("x", f32s(&[4, 8]));
    let w = g.param("w", f32s(&[8, 6]));
    let b = g.param("b", f32s(&[6]));
    let m = g.mm(x, w);
    let a = g.add(m, b);
    let y = g.exp(a);
    g.set_named_outputs([("y", y)]);
    let mut h = Graph::new("consts");
    let x = h.input("x", f32s(&[3, 4]));
    let w = h.param("w", f32s(&[4, 4]));
    let m = h.mm(x, w);
    let two = h.constant(2.0, IrDType::F32);
    let r = h.relu(m);
    let s = h.mul(r, two);
    let d = h.sub(s, x);
    let q = h.div(d, two);
    h.set_named_outputs([("q", q), ("r", r)]);
    vec![g, h]
}

#[test]
fn session_on_c_demo_matches_the_cpu_backend_in_every_mode() {
    // The only test here that registers Device::Mlx (the registry is
    // process-global).
    use rlx_host::run::{errors, execute, random_data};
    use rlx_plugin_host::backend::{
        lower_for_claims, parse_op_kinds, register_plugin_backend, with_mode,
    };
    use rlx_runtime::{Device, Session};
    let (_dir, p) = load_build(4);
    register_plugin_backend(p.clone(), Device::Mlx, Mode::Lazy);
    let claims: &'static [rlx_ir::OpKind] = Box::leak(parse_op_kinds(&p).into_boxed_slice());
    assert_eq!(claims.len(), 6, "{claims:?}");
    for (k, graph) in session_graphs().into_iter().enumerate() {
        // What the plugin is sent (visible with --nocapture).
        let lowered = lower_for_claims(Device::Mlx, graph.clone(), claims, "c-demo").unwrap();
        println!("{}", text(&lowered));
        let data = random_data(&graph, 11 + k as u64).unwrap();
        let cpu = execute(Device::Cpu, &graph, &data, 1).unwrap();
        for mode in MODES {
            let got = with_mode(mode, || execute(Device::Mlx, &graph, &data, 2))
                .unwrap_or_else(|e| panic!("{} [{}]: {e}", graph.name, mode.name()));
            assert_eq!(got.outputs.len(), cpu.outputs.len());
            for (i, (g, c)) in got.outputs.iter().zip(&cpu.outputs).enumerate() {
                let (abs, rel) = errors(g, c).unwrap();
                println!(
                    "{} [{}] output {i}: abs {abs:e} rel {rel:e}",
                    graph.name,
                    mode.name()
                );
                assert!(
                    rel <= 1e-5 || abs <= 1e-6,
                    "{} [{}] output {i}: max rel err {rel} (abs {abs})",
                    graph.name,
                    mode.name()
                );
                assert!(g.iter().any(|v| *v != 0.0), "output {i} is zeros");
            }
        }
    }
    // Session used directly, as an rlx-runtime program writes it.
    let g = &session_graphs()[0];
    let xs: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) / 16.0).collect();
    let ws: Vec<f32> = (0..48)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) / 20.0)
        .collect();
    let bs = [0.1f32, -0.1, 0.2, -0.2, 0.3, -0.3];
    let mut results = Vec::new();
    for device in [Device::Mlx, Device::Cpu] {
        let mut c = Session::new(device).compile(g.clone());
        c.set_param("w", &ws);
        c.set_param("b", &bs);
        results.push(c.run(&[("x", &xs)]));
    }
    let (abs, rel) = errors(&results[0][0], &results[1][0]).unwrap();
    assert!(rel <= 1e-5, "rel {rel} abs {abs}");
    // Plain Rust, to be sure both are right.
    for i in 0..4 {
        for j in 0..6 {
            let s: f32 = (0..8).map(|p| xs[i * 8 + p] * ws[p * 6 + j]).sum::<f32>() + bs[j];
            let got = results[0][0][i * 6 + j];
            assert!(
                (got - s.exp()).abs() <= 1e-5 * s.exp(),
                "[{i},{j}] {got} vs {}",
                s.exp()
            );
        }
    }
}

#[test]
fn every_c_build_loads_into_this_host_and_runs() {
    // The skew matrix's C half: builds claiming 1.0 ..= 1.13, this (1.13)
    // host. 1.9's entries are absent on the plugin's side below 1.9 (its
    // table ends before them) and, but for state, in the 1.9 to 1.13
    // builds too (1.10 added no root-table field; 1.11's host_memory and
    // 1.12's graph_forms are NULL in those builds, so every build is sent
    // text, and 1.13's bind_from is NULL).
    let mut g = Graph::new("mlp");
    let x = g.input("x", f32s(&[2, 3]));
    let w = g.param("w", f32s(&[3, 2]));
    let b = g.param("b", f32s(&[2]));
    let m = g.mm(x, w);
    let a = g.add(m, b);
    let y = g.relu(a);
    g.set_named_outputs([("y", y)]);
    let model = text(&g);
    for minor in 0..=NEWEST_MINOR {
        let (_dir, p) = load_build(minor);
        assert_eq!(
            p.abi_version(),
            RlxAbiVersion {
                major: 1,
                minor,
                patch: 0
            },
            "build 1.{minor}"
        );
        let claimed = format!("1.{minor}.0");
        assert!(p
            .descriptor()
            .build_info
            .contains(&("abi.claimed".into(), claimed)));
        let offers = if minor >= 9 {
            Offers {
                state: true,
                ..Offers::default()
            }
        } else {
            Offers::default()
        };
        assert_eq!(p.offers(), offers, "1.{minor}");
        assert!(p.raw_sharing().is_none() && p.raw_submits().is_none());
        assert!(p.graph_forms().is_empty(), "1.{minor}");
        assert_eq!(p.raw_state().is_some(), minor >= 9, "1.{minor}");
        for mode in MODES {
            let opts = CompileOptions {
                mode,
                rng_policy: 3,
                rng_seed: 7,
                device: None,
                memory_limit: None,
            };
            // What rlx-runtime's backend calls: text, to these builds.
            let mut exe = if minor % 2 == 0 {
                p.compile_graph(&g, &opts).unwrap()
            } else {
                p.compile_with(&model, &opts).unwrap()
            };
            exe.bind_param("w", &t(&[3, 2], &W)).unwrap();
            exe.bind_param("b", &t(&[2], &B)).unwrap();
            if minor < 9 {
                // No state table: the host library says so, calling nothing.
                let e = exe.state_bind("x", (&t(&[2, 3], &X)).into()).unwrap_err();
                assert_eq!(
                    (e.code, e.message.as_str()),
                    (
                        StatusCode::Unsupported,
                        "plugin c-demo keeps no executable state (ABI 1.9): cannot bind a state"
                    )
                );
            }
            let out = exe.run(&[("x", &t(&[2, 3], &X))]).unwrap();
            assert_eq!(out[0].shape, [2, 2]);
            assert_eq!(
                out[0].to_f32_vec().unwrap(),
                affine_relu_ref(&X, &W, &B),
                "1.{minor} [{}]",
                mode.name()
            );
            // Into a buffer the host lends: the 1.8 build writes it (its
            // run_into), older ones hand the output over and the host
            // copies. Either way the same values, and 0xAB where nothing
            // was written would show.
            assert_eq!(p.has_run_into(), minor >= 8, "1.{minor}");
            let mut y = [0xABu8; 16];
            let x = t(&[2, 3], &X);
            let got = exe
                .run_refs_into(
                    &[("x", (&x).into())],
                    &mut [Some(&mut y[..])],
                    |_| -> rlx_plugin_api::PluginResult<()> { unreachable!("no owned slot") },
                )
                .unwrap();
            assert!(got[0].is_none());
            let y: Vec<f32> = y
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(
                y,
                affine_relu_ref(&X, &W, &B),
                "1.{minor} [{}] into",
                mode.name()
            );
            // The host adapter (what Session runs) lending its output Vec:
            // written by the 1.8 build, copied into by the host below 1.8.
            use rlx_runtime::ExecutableGraph;
            let exe = p.compile_with(&model, &opts).unwrap();
            let mut g = rlx_plugin_host::backend::PluginGraph::new(exe, "c-demo".into())
                .with_lent_outputs(true);
            g.set_param("w", &W);
            g.set_param("b", &B);
            assert_eq!(
                g.run(&[("x", &X)])[0],
                affine_relu_ref(&X, &W, &B),
                "1.{minor} [{}] adapter, lent",
                mode.name()
            );
        }
        if minor == 0 {
            // 1.0 had no registry: the table stops before custom_ops.
            assert!(!p.has_custom_ops());
            let e = p.list_custom_ops().unwrap_err();
            assert_eq!(e.code, StatusCode::Unsupported);
            assert_eq!(
                e.message,
                "plugin c-demo (ABI 1.0.0) has no custom-op registry (added in ABI 1.1)"
            );
        } else {
            assert!(p.has_custom_ops(), "1.{minor}");
            let names: Vec<String> = p
                .list_custom_ops()
                .unwrap()
                .into_iter()
                .map(|i| i.name)
                .collect();
            assert_eq!(names, ["c_demo.scale2"]);
            let out = p
                .execute_custom_op("c_demo.scale2", &[t(&[3], &[1., -2., 0.5])], 1)
                .unwrap();
            assert_eq!(out[0].to_f32_vec().unwrap(), [2., -4., 1.]);
            // A record before 1.5 reads as a kernel with no rule; the 1.5
            // build says so itself.
            let info = p.lookup_custom_op("c_demo.scale2").unwrap();
            assert_eq!(
                (info.kind, info.shape_rule),
                (CustomKind::Kernel, ShapeRuleKind::None),
                "1.{minor}"
            );
            custom_ops_across_the_skew(&p, minor);
        }
    }
}

/// This (1.5) host's registry calls on the C build claiming 1.`minor`
/// (1.1 ..= 1.5): a 1.1-form kernel works on every build (a 1.5 desc for
/// the 1.5 build, a 1.1-size one for the others); what needs 1.5 is
/// refused with UNSUPPORTED, by the host for a build before 1.5 (the
/// plugin never sees the desc) and by c-demo itself from 1.5 (it takes
/// 1.1-form kernels only); c-demo's registry has no infer_shape or
/// execute_attrs in any build.
fn custom_ops_across_the_skew(p: &LoadedPlugin, minor: u32) {
    let alive = Arc::new(());
    let held = alive.clone();
    p.register_custom_op("host.neg", "-x", 1, 1, move |ins| {
        let _ = &held;
        let v: Vec<f32> = ins[0].to_f32_vec()?.iter().map(|x| -x).collect();
        Ok(vec![HostTensor::from_f32(ins[0].shape.clone(), &v)?])
    })
    .unwrap();
    let out = p
        .execute_custom_op("host.neg", &[t(&[2], &[1., -2.])], 1)
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), [-1., 2.], "1.{minor}");
    p.unregister_custom_op("host.neg").unwrap();
    assert_eq!(
        Arc::strong_count(&alive),
        1,
        "1.{minor}: the context was dropped"
    );

    let copy: CustomKernel = Arc::new(
        |ins: &[TensorView], outs: &mut [TensorViewMut], _attrs: &[u8]| {
            outs[0].data.copy_from_slice(ins[0].data);
            Ok(())
        },
    );
    let ident: OwnedKernel =
        Arc::new(|ins: &[TensorView], _attrs: &[u8]| Ok(vec![ins[0].to_host()?]));
    let needing_1_5 = [
        (
            CustomOp::new("host.copy", "", 1, Origin::Host, CustomImpl::Kernel(copy))
                .with_shape(ShapeRule::SameAsInput(0)),
            "an in-place kernel (kernel_into)",
        ),
        (
            CustomOp::new("host.ident", "", 1, Origin::Host, CustomImpl::Owned(ident))
                .with_shape(ShapeRule::SameAsInput(0)),
            "a shape rule",
        ),
    ];
    for (op, needs) in needing_1_5 {
        let name = op.info.name.clone();
        let e = p.register_op(op).unwrap_err();
        let want = if minor < 5 {
            format!(
                "plugin c-demo speaks ABI 1.{minor}.0: in-place kernels, composites and shape \
                 rules need 1.5"
            )
        } else {
            format!(
                "register_op: custom op \"{name}\" needs {needs}; c-demo takes only kernels of \
                 the 1.1 form (kernel, no shape rule)"
            )
        };
        assert_eq!(
            (e.code, e.message.as_str()),
            (StatusCode::Unsupported, want.as_str()),
            "1.{minor}"
        );
        assert_eq!(
            p.lookup_custom_op(&name).unwrap_err().code,
            StatusCode::NotFound
        );
    }
    let f32_3 = TensorType {
        dtype: DType::F32,
        shape: vec![3],
    };
    let e = p
        .infer_custom_shape("c_demo.scale2", &[f32_3], &[])
        .unwrap_err();
    assert_eq!(e.code, StatusCode::Unsupported, "1.{minor}: {}", e.message);
    assert!(e.message.contains("lacks `infer_shape`"), "{}", e.message);
    let e = p
        .execute_custom_op_with("c_demo.scale2", &[t(&[1], &[1.])], &[1, 2], 1)
        .unwrap_err();
    assert_eq!(e.code, StatusCode::Unsupported, "1.{minor}: {}", e.message);
}

#[test]
fn errors_name_the_node_the_tensor_and_the_op() {
    let (_dir, p) = load_build(4);
    let compile_err = |g: &Graph| {
        p.compile(&text(g), Mode::Lazy)
            .err()
            .expect("compile fails")
    };

    // An op c-demo does not run, named with its node.
    let mut g = Graph::new("softmax");
    let x = g.input("x", f32s(&[2, 4]));
    let y = g.sm(x, -1);
    g.set_outputs(vec![y]);
    let e = compile_err(&g);
    assert_eq!(e.code, StatusCode::Unsupported);
    assert_eq!(
        e.message,
        "rlxmodel line 7, column 8: node %1: op Softmax is not supported by c-demo (it runs \
         Input, Param, Constant, Binary, Activation, MatMul)"
    );
    // A claimed kind with a variant it does not run.
    let mut g = Graph::new("gelu");
    let x = g.input("x", f32s(&[2]));
    let y = g.gelu(x);
    g.set_outputs(vec![y]);
    let e = compile_err(&g);
    assert_eq!(e.code, StatusCode::Unsupported);
    assert_eq!(
        e.message,
        "rlxmodel line 7, column 19: node %1: op Activation(Gelu) is not supported by c-demo \
         (it runs Activation Exp, Relu, Neg, Abs, Tanh, Sigmoid, Log, Sqrt)"
    );
    let mut g = Graph::new("max");
    let x = g.input("x", f32s(&[2]));
    let y = g.binary(BinaryOp::Max, x, x, f32s(&[2]));
    g.set_outputs(vec![y]);
    let e = compile_err(&g);
    assert_eq!(e.code, StatusCode::Unsupported);
    assert!(
        e.message.ends_with(
            "node %1: op Binary(Max) is not supported by c-demo (it runs Binary Add, Sub, Mul, \
             Div)"
        ),
        "{e}"
    );
    // Another dtype.
    let mut g = Graph::new("ints");
    let x = g.input("x", Shape::new(&[2], IrDType::I64));
    g.set_outputs(vec![x]);
    let e = compile_err(&g);
    assert_eq!(e.code, StatusCode::Unsupported);
    assert_eq!(
        e.message,
        "rlxmodel line 6, column 16: value %x is i64: c-demo runs f32 only"
    );
    // Malformed text: INVALID_ARGUMENT with the line.
    let e = p
        .compile(
            "rlxmodel 1\nopset 1\ngraph @g {\n  nonsense\n}",
            Mode::Eager,
        )
        .err()
        .unwrap();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(
        e.message,
        "rlxmodel line 4, column 3: expected `%n = …`, `%name = …` or `return`, found `nonsense`"
    );
    let e = p
        .compile(
            &text(&affine_relu()).replace("f32[2, 2]\n  %4", "f32[3, 2]\n  %4"),
            Mode::Lazy,
        )
        .err()
        .unwrap();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(
        e.message,
        "rlxmodel line 9, column 1: node %3: MatMul gives f32[2, 2], but the graph says f32[3, 2]"
    );

    // Run-time errors name the tensor.
    let mut exe = p.compile(&text(&affine_relu()), Mode::Compiled).unwrap();
    let (x, b) = (t(&[2, 3], &X), t(&[2], &B));
    let e = exe.run(&[("x", &x), ("the bias", &b)]).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(
        e.message,
        "param \"w\" is not bound (bind it with executable_bind_param before running)"
    );
    exe.bind_param("w", &t(&[3, 2], &W)).unwrap();
    let e = exe.run(&[("x", &x)]).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(
        e.message,
        "the graph takes 2 inputs (\"x\", \"the bias\"), 1 given"
    );
    let x64 = HostTensor::new(
        DType::F64,
        vec![2, 3],
        X.iter().flat_map(|v| (*v as f64).to_le_bytes()).collect(),
    )
    .unwrap();
    let e = exe.run(&[("x", &x64), ("the bias", &b)]).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(e.message, "input \"x\" is f32[2, 3], got f64[2, 3]");
    let e = exe.run(&[("x", &b), ("the bias", &b)]).unwrap_err();
    assert_eq!(e.message, "input \"x\" is f32[2, 3], got f32[2]");
    let e = exe.run(&[("x", &x), ("bias", &b)]).unwrap_err();
    assert_eq!(
        e.message,
        "the graph has no input named \"bias\" (its inputs: \"x\", \"the bias\")"
    );
    let e = exe.run(&[("x", &x), ("x", &x)]).unwrap_err();
    assert_eq!(e.message, "input \"x\" is given twice");
    let e = exe.bind_param("v", &t(&[3, 2], &W)).unwrap_err();
    assert_eq!(e.code, StatusCode::NotFound);
    assert_eq!(
        e.message,
        "the graph has no param named \"v\" (its params: \"w\")"
    );
    let e = exe.bind_param("w", &t(&[2, 3], &W)).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(e.message, "param \"w\" is f32[3, 2], got f32[2, 3]");
    // Still runs with the last good binding.
    let out = exe.run(&[("x", &x), ("the bias", &b)]).unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), affine_relu_ref(&X, &W, &B));
}

#[test]
fn host_kernels_round_trip_through_the_c_registry() {
    let (_dir, p) = load_build(4);
    // The kernel holds `alive`; the plugin dropping the kernel's context
    // drops it.
    let alive = Arc::new(());
    let held = alive.clone();
    p.register_custom_op("host.add_one", "x + 1", 1, 1, move |ins| {
        let _ = &held;
        let v: Vec<f32> = ins[0].to_f32_vec()?.iter().map(|x| x + 1.0).collect();
        Ok(vec![HostTensor::from_f32(ins[0].shape.clone(), &v)?])
    })
    .unwrap();
    assert_eq!(Arc::strong_count(&alive), 2);
    let info = p.lookup_custom_op("host.add_one").unwrap();
    assert_eq!(
        (
            info.name.as_str(),
            info.description.as_str(),
            info.n_inputs,
            info.n_outputs,
            info.origin
        ),
        ("host.add_one", "x + 1", 1, 1, Origin::Host)
    );
    let out = p
        .execute_custom_op("host.add_one", &[t(&[2], &[41., -1.])], 1)
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), [42., 0.]);

    // A taken name: ALREADY_EXISTS, and the rejected kernel is dropped at
    // once.
    let again = Arc::new(());
    let held_again = again.clone();
    let e = p
        .register_custom_op("host.add_one", "again", 1, 1, move |_| {
            let _ = &held_again;
            Ok(vec![])
        })
        .unwrap_err();
    assert_eq!(e.code, StatusCode::AlreadyExists);
    assert_eq!(
        e.message,
        "a custom op named \"host.add_one\" is already registered"
    );
    assert_eq!(Arc::strong_count(&again), 1);

    // A failing host kernel's status (made with the plugin's status_new)
    // comes back as it is.
    p.register_custom_op("a.fails", "always fails", 1, 1, |_| {
        Err(rlx_plugin_api::PluginError::invalid_argument(
            "host kernel says no",
        ))
    })
    .unwrap();
    let e = p
        .execute_custom_op("a.fails", &[t(&[1], &[0.])], 1)
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (StatusCode::InvalidArgument, "host kernel says no")
    );
    let names: Vec<String> = p
        .list_custom_ops()
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["a.fails", "c_demo.scale2", "host.add_one"]);

    // Wrong counts.
    let e = p.execute_custom_op("host.add_one", &[], 1).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(e.message, "custom op host.add_one takes 1 inputs, got 0");
    let e = p
        .execute_custom_op("c_demo.scale2", &[t(&[1], &[1.])], 2)
        .unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert_eq!(
        e.message,
        "custom op c_demo.scale2 has 1 outputs, the caller gave 2 slots"
    );
    let e = p.execute_custom_op("nope", &[], 0).unwrap_err();
    assert_eq!(e.code, StatusCode::NotFound);

    // Unregister drops the kernel; a second time is NOT_FOUND.
    p.unregister_custom_op("host.add_one").unwrap();
    assert_eq!(Arc::strong_count(&alive), 1);
    p.unregister_custom_op("a.fails").unwrap();
    let e = p.unregister_custom_op("host.add_one").unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (StatusCode::NotFound, "no custom op named \"host.add_one\"")
    );
    assert_eq!(
        p.lookup_custom_op("host.add_one").unwrap_err().code,
        StatusCode::NotFound
    );

    // Concurrent use of the registry from several threads.
    std::thread::scope(|s| {
        for k in 0..4 {
            let p = &p;
            s.spawn(move || {
                for i in 0..50 {
                    let name = format!("t{k}.op{i}");
                    p.register_custom_op(&name, "", 1, 1, |ins| Ok(vec![ins[0].clone()]))
                        .unwrap();
                    let out = p
                        .execute_custom_op(&name, &[t(&[1], &[i as f32])], 1)
                        .unwrap();
                    assert_eq!(out[0].to_f32_vec().unwrap(), [i as f32]);
                    p.execute_custom_op("c_demo.scale2", &[t(&[1], &[1.])], 1)
                        .unwrap();
                    let _ = p.list_custom_ops().unwrap();
                    p.unregister_custom_op(&name).unwrap();
                }
            });
        }
    });
    assert_eq!(p.list_custom_ops().unwrap().len(), 1);
}

// ---- the C ABI by hand ----

/// One fresh instance of the 1.`minor` build (its own copy, so its own
/// first entry call), opened without the Rust host's loader.
struct Raw {
    _dir: tempfile::TempDir,
    entry: rlx_plugin_api::tables::RlxEntryFn,
}

fn raw(minor: u32) -> Raw {
    let dir = plugins_dir(&[(&c_build(minor), "librlx_c_plugin_raw.so")]);
    let lib =
        unsafe { libloading::Library::new(dir.path().join("librlx_c_plugin_raw.so")) }.unwrap();
    // Never unloaded (as the host's loader does).
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    let entry = unsafe {
        *lib.get::<rlx_plugin_api::tables::RlxEntryFn>(b"rlx_plugin_entry")
            .unwrap()
    };
    Raw { _dir: dir, entry }
}

/// Log messages the raw host received, by host table.
type Sink = Mutex<Vec<String>>;

unsafe extern "C" fn sink_log(ctx: *mut c_void, rec: *const RlxLogRecord) {
    let sink = &*(ctx as *const Sink);
    sink.lock().unwrap().push((*rec).message.to_string_lossy());
}

fn host_table(major: u32, struct_size: usize, sink: &'static Sink) -> &'static RlxHostApi {
    Box::leak(Box::new(RlxHostApi {
        struct_size,
        abi_version: RlxAbiVersion {
            major,
            minor: 4,
            patch: 0,
        },
        host_name: RlxStr::from_static("raw test host"),
        log_ctx: sink as *const Sink as *mut c_void,
        log: Some(sink_log),
        log_max_level: None,
        setting: None,
    }))
}

fn new_sink() -> &'static Sink {
    Box::leak(Box::new(Mutex::new(Vec::new())))
}

/// A status as (code, message), released.
fn status(api: &RlxPluginApi, s: *mut rlx_plugin_api::RlxStatus) -> Option<(u32, String)> {
    if s.is_null() {
        return None;
    }
    unsafe {
        let code = (api.status_code.unwrap())(s);
        let msg = (api.status_message.unwrap())(s).to_string_lossy();
        (api.status_free.unwrap())(s);
        Some((code, msg))
    }
}

#[test]
fn refused_handshakes_are_header_only_tables_naming_both_versions() {
    let header = rlx_plugin_api::tables::PLUGIN_API_HEADER_SIZE;
    let good = host_table(1, std::mem::size_of::<RlxHostApi>(), new_sink());
    let cases: [(Option<&'static RlxHostApi>, u32, &str); 3] = [
        (
            None,
            1,
            "c-demo 0.1.0 (RLX plugin ABI 1.4.0) was given no host table (RlxHostApi is NULL); \
             the host must pass one",
        ),
        (
            Some(host_table(2, std::mem::size_of::<RlxHostApi>(), new_sink())),
            3,
            "c-demo 0.1.0 speaks RLX plugin ABI 1.4.0 but the host (raw test host) speaks ABI \
             2.4.0, another major: upgrade the plugin (install a c-demo built for the host's ABI \
             major)",
        ),
        (
            Some(host_table(1, 16, new_sink())),
            1,
            "the host table's struct_size is 16 bytes, smaller than its frozen header (40 bytes): \
             c-demo 0.1.0 (ABI 1.4.0) cannot read the host's ABI version",
        ),
    ];
    for (host, code, message) in cases {
        let r = raw(4);
        let root = unsafe { (r.entry)(host.map_or(std::ptr::null(), |h| h as *const _)) };
        let api = unsafe { &*root };
        assert_eq!(api.struct_size, header);
        assert_eq!((api.abi_version.major, api.abi_version.minor), (1, 4));
        assert_eq!(api.refusal_code, code);
        assert_eq!(unsafe { api.refusal_message.to_string_lossy() }, message);
        // The first call decided: a good host now gets the same table.
        assert_eq!(unsafe { (r.entry)(good) }, root);
    }
    // A host of an older major (0) is told to upgrade itself.
    let r = raw(1);
    let api = unsafe { &*(r.entry)(host_table(0, std::mem::size_of::<RlxHostApi>(), new_sink())) };
    assert_eq!(api.refusal_code, 3);
    let msg = unsafe { api.refusal_message.to_string_lossy() };
    assert!(
        msg.contains("ABI 1.1.0")
            && msg.contains("ABI 0.4.0")
            && msg.ends_with("upgrade the host to ABI major 1"),
        "{msg}"
    );
}

/// x[2] + w[2] (w a param), one output.
const ADD_MODEL: &str = "rlxmodel 1
opset 1

graph @add {
  %x = input : f32[2]
  %w = param : f32[2]
  %2 = Binary(Add) %x, %w : f32[2]
  return %2
}
";

static DELETED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

unsafe extern "C" fn count_delete(ctx: *mut c_void) {
    DELETED.lock().unwrap().push(ctx as usize);
}

fn deletions(tag: usize) -> usize {
    DELETED
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t == tag)
        .count()
}

#[test]
fn the_c_abi_by_hand_options_ownership_and_null_pointers() {
    for minor in 0..=NEWEST_MINOR {
        let r = raw(minor);
        let sink = new_sink();
        let root = unsafe { (r.entry)(host_table(1, std::mem::size_of::<RlxHostApi>(), sink)) };
        let api = unsafe { &*root };
        assert_eq!(api.refusal_code, 0);
        // The root table as a plugin of that minor wrote it.
        let want_size = match minor {
            0 => std::mem::offset_of!(RlxPluginApi, custom_ops),
            1..=3 => std::mem::offset_of!(RlxPluginApi, executable_device),
            4..=7 => std::mem::offset_of!(RlxPluginApi, executable_run_into),
            8 => std::mem::offset_of!(RlxPluginApi, state),
            9 | 10 => std::mem::offset_of!(RlxPluginApi, host_memory),
            11 => std::mem::offset_of!(RlxPluginApi, graph_forms),
            _ => std::mem::size_of::<RlxPluginApi>(),
        };
        assert_eq!(api.struct_size, want_size, "1.{minor}");
        assert_eq!((api.abi_version.minor, api.abi_version.patch), (minor, 0));
        assert!(api.rust_layout.is_null());
        assert_eq!(api.rust_layout_tag.len, 0);
        assert_eq!(status(api, unsafe { (api.init.unwrap())() }), None);
        assert_eq!(
            status(api, unsafe { (api.init.unwrap())() }),
            None,
            "init is idempotent"
        );
        assert!(sink
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.starts_with("c-demo 0.1.0 (C11, ABI 1.")));

        let compile = |opts: Option<&RlxCompileOptions>| {
            let mut exe = std::ptr::null_mut();
            let s = unsafe {
                (api.compile.unwrap())(
                    RlxStr::from_str(ADD_MODEL),
                    opts.map_or(std::ptr::null(), |o| o as *const _),
                    &mut exe,
                )
            };
            (status(api, s), exe)
        };
        let last_log = || sink.lock().unwrap().last().cloned().unwrap_or_default();
        // The RNG group is read only from a 1.2+ build, and only when the
        // host's struct_size covers it (24): a 1.0/1.1 host's 16 bytes leave
        // garbage where rng_policy would be.
        let short = RlxCompileOptions {
            struct_size: 16,
            mode: 1,
            rng_policy: 0xdead_beef,
            rng_seed: 99,
            device_kind: 0xdead_beef,
            device_ordinal: 7,
            memory_limit_bytes: 0xdead_beef,
        };
        let full = RlxCompileOptions {
            struct_size: 24,
            mode: 2,
            rng_policy: 3,
            rng_seed: 7,
            // Beyond a 24-byte struct_size: never read.
            device_kind: 0xdead_beef,
            device_ordinal: 7,
            memory_limit_bytes: 0xdead_beef,
        };
        let (s, exe) = compile(Some(&short));
        assert_eq!(s, None);
        unsafe { (api.executable_destroy.unwrap())(exe) };
        assert!(
            last_log().ends_with(
                "in eager mode; rng policy 0, seed 42 (the graph draws no random numbers)"
            ),
            "{}",
            last_log()
        );
        let (s, exe) = compile(Some(&full));
        assert_eq!(s, None);
        unsafe { (api.executable_destroy.unwrap())(exe) };
        let want = if minor >= 2 {
            "in compiled mode; rng policy 3, seed 7"
        } else {
            "in compiled mode; rng policy 0, seed 42"
        };
        assert!(last_log().contains(want), "1.{minor}: {}", last_log());
        let (s, _) = compile(Some(&RlxCompileOptions { mode: 9, ..full }));
        assert_eq!(
            s,
            Some((
                2,
                "compile mode 9 is unknown to c-demo (it knows 0 lazy, 1 eager, 2 compiled)".into()
            ))
        );
        let (s, exe) = compile(None);
        assert_eq!(s, None);
        assert!(last_log().contains("in lazy mode"));

        // The plugin's own opset check (the Rust host checks before it).
        let mut other = std::ptr::null_mut();
        let s = unsafe {
            (api.compile.unwrap())(
                RlxStr::from_str(&ADD_MODEL.replace("opset 1", "opset 9")),
                std::ptr::null(),
                &mut other,
            )
        };
        assert_eq!(
            status(api, s),
            Some((
                2,
                "rlxmodel line 2, column 7: opset 9: c-demo reads opset 1 only (re-export the \
                 model for opset 1, or use a plugin that reads opset 9)"
                    .into()
            ))
        );
        assert!(other.is_null());

        // OWNED params: the deleter runs exactly once, on success and on
        // every failure.
        let bind = |name: &str, t: &RlxTensor| {
            status(api, unsafe {
                (api.executable_bind_param.unwrap())(exe, RlxStr::from_str(name), t)
            })
        };
        let w = t(&[2], &[10., 20.]);
        let tag = 1000 + minor as usize * 10;
        // `view` keeps the shape array the descriptors point at alive.
        let view = w.as_raw(ownership::BORROWED);
        let mut o = view.raw;
        o.ownership = ownership::OWNED;
        o.manager_ctx = tag as *mut c_void;
        o.deleter = Some(count_delete);
        assert_eq!(bind("w", &o), None);
        assert_eq!(deletions(tag), 1);
        let mut bad_shape = o;
        bad_shape.manager_ctx = (tag + 1) as *mut c_void;
        bad_shape.dl.ndim = 0;
        assert_eq!(
            bind("w", &bad_shape),
            Some((1, "param \"w\" is f32[2], got f32[]".into()))
        );
        assert_eq!(deletions(tag + 1), 1);
        let mut unknown = o;
        unknown.manager_ctx = (tag + 2) as *mut c_void;
        assert_eq!(bind("q", &unknown).map(|s| s.0), Some(6));
        assert_eq!(deletions(tag + 2), 1);
        // A descriptor of another size is refused (RlxTensor is frozen).
        let mut resized = view.raw;
        resized.struct_size = 72;
        assert_eq!(
            bind("w", &resized),
            Some((
                1,
                "param \"w\": RlxTensor.struct_size is 72, but RlxTensor is frozen at 80 bytes"
                    .into()
            ))
        );
        // Strided: w as every other element of a 4-element buffer.
        let buf = t(&[4], &[1., -1., 2., -1.]);
        let mut strided = buf.as_raw(ownership::BORROWED).raw;
        let (mut shape, mut strides) = ([2i64], [2i64]);
        strided.dl.shape = shape.as_mut_ptr();
        strided.dl.strides = strides.as_mut_ptr();
        assert_eq!(bind("w", &strided), None);

        // Run: the output count must match, and on error no slot is
        // written.
        let x = t(&[2], &[0.5, 0.25]);
        let xv = x.as_raw(ownership::BORROWED);
        let input = RlxNamedTensor {
            struct_size: std::mem::size_of::<RlxNamedTensor>(),
            name: RlxStr::from_str("x"),
            tensor: xv.raw,
        };
        let mut slots = [RlxTensor::empty(), RlxTensor::empty()];
        slots[0].struct_size = 12345;
        let run = |slots: &mut [RlxTensor], n: usize| {
            status(api, unsafe {
                (api.executable_run.unwrap())(exe, &input, 1, slots.as_mut_ptr(), n)
            })
        };
        assert_eq!(
            run(&mut slots, 2),
            Some((
                1,
                "executable_run: the graph has 1 outputs, the caller gave 2 slots".into()
            ))
        );
        assert_eq!(slots[0].struct_size, 12345, "an error writes no slot");
        assert_eq!(run(&mut slots, 1), None);
        let out = unsafe { HostTensor::take_raw(slots[0]) }.unwrap();
        assert_eq!(out.to_f32_vec().unwrap(), [1.5, 2.25]);
        // byte_offset: aligned (one f32 in), and misaligned (copied).
        for (skip, values) in [(4usize, [10f32, 20.]), (2, [30., 40.])] {
            let mut bytes = vec![0u8; skip];
            bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            let mut shape = [2i64];
            let mut d = RlxTensor::empty();
            d.dl.data = bytes.as_mut_ptr() as *mut c_void;
            d.dl.ndim = 1;
            d.dl.shape = shape.as_mut_ptr();
            d.dl.byte_offset = skip as u64;
            assert_eq!(bind("w", &d), None, "byte_offset {skip}");
            drop(bytes); // copied: BORROWED
            assert_eq!(run(&mut slots, 1), None);
            let out = unsafe { HostTensor::take_raw(slots[0]) }.unwrap();
            assert_eq!(
                out.to_f32_vec().unwrap(),
                [0.5 + values[0], 0.25 + values[1]]
            );
        }

        // Null pointers are statuses, never crashes.
        unsafe {
            let code = |s| status(api, s).map(|s| s.0);
            assert_eq!(
                code((api.compile.unwrap())(
                    RlxStr::from_str(ADD_MODEL),
                    std::ptr::null(),
                    std::ptr::null_mut()
                )),
                Some(1)
            );
            assert_eq!(
                code((api.executable_signature.unwrap())(exe, std::ptr::null())),
                Some(1)
            );
            assert_eq!(
                code((api.executable_signature.unwrap())(
                    std::ptr::null(),
                    std::ptr::null()
                )),
                Some(1)
            );
            assert_eq!(
                code((api.executable_bind_param.unwrap())(
                    exe,
                    RlxStr::from_str("w"),
                    std::ptr::null()
                )),
                Some(1)
            );
            assert_eq!(
                code((api.executable_run.unwrap())(
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    0,
                    std::ptr::null_mut(),
                    0
                )),
                Some(1)
            );
            assert_eq!(
                code((api.executable_run.unwrap())(
                    exe,
                    std::ptr::null(),
                    1,
                    slots.as_mut_ptr(),
                    1
                )),
                Some(1)
            );
            assert_eq!(
                code((api.supported_ops.unwrap())(std::ptr::null_mut())),
                Some(1)
            );
            assert_eq!(
                code((api.lowering_table.unwrap())(std::ptr::null_mut())),
                Some(1)
            );
            (api.executable_destroy.unwrap())(std::ptr::null_mut());
            (api.status_free.unwrap())(std::ptr::null_mut());
            let s = (api.status_new.unwrap())(7, RlxStr::from_str("made by the host"));
            assert_eq!(status(api, s), Some((7, "made by the host".into())));
            if minor >= 1 {
                let c = &*api.custom_ops;
                assert_eq!(code((c.register_op.unwrap())(std::ptr::null())), Some(1));
                assert_eq!(code((c.list.unwrap())(std::ptr::null())), Some(1));
                assert_eq!(
                    code((c.lookup.unwrap())(
                        RlxStr::from_str("c_demo.scale2"),
                        std::ptr::null()
                    )),
                    Some(1)
                );
                assert_eq!(
                    code((c.execute.unwrap())(
                        RlxStr::from_str("c_demo.scale2"),
                        std::ptr::null(),
                        1,
                        slots.as_mut_ptr(),
                        1
                    )),
                    Some(1)
                );
                // Every build's registry table is the 1.1 one.
                assert_eq!(c.struct_size, CUSTOM_OP_API_SIZE_1_1, "1.{minor}");
                descs_by_hand(api, c, minor);
            }
            (api.executable_destroy.unwrap())(exe);
        }
    }
}

unsafe extern "C" fn never_kernel(
    _: *mut c_void,
    _: *const RlxTensor,
    _: usize,
    _: *mut RlxTensor,
    _: usize,
) -> *mut RlxStatus {
    panic!("a kernel registered only to be unregistered was called");
}

unsafe extern "C" fn poison_into(
    _: *mut c_void,
    _: *const u8,
    _: usize,
    _: *const RlxTensor,
    _: usize,
    _: *const RlxTensor,
    _: usize,
) -> *mut RlxStatus {
    panic!("the plugin used kernel_into from beyond what it may read");
}

unsafe extern "C" fn poison_shape(
    _: *mut c_void,
    _: *const u8,
    _: usize,
    _: *const *const RlxValueInfo,
    _: usize,
    _: *mut RlxShapeOut,
) -> *mut RlxStatus {
    panic!("the plugin used shape_fn from beyond what it may read");
}

/// register_op by hand on the 1.`minor` build (1.1 ..= 1.5): a desc is
/// read only as far as its struct_size and the build know, and every
/// refusal drops the context at once, exactly once.
unsafe fn descs_by_hand(
    api: &RlxPluginApi,
    c: &rlx_plugin_api::tables::RlxCustomOpApi,
    minor: u32,
) {
    let tag = 5000 + minor as usize * 10;
    // The 1.5 fields hold what no build may act on: a kernel_into and a
    // shape_fn that panic, a composite that is no graph, an unknown rule.
    let desc = |struct_size: usize, ctx: usize, shape_rule: u32, composite: &'static str| {
        RlxCustomOpDesc {
            struct_size,
            name: RlxStr::from_static("raw.ident"),
            description: RlxStr::from_static(""),
            n_inputs: 1,
            n_outputs: 1,
            kernel: Some(never_kernel),
            kernel_ctx: ctx as *mut c_void,
            kernel_ctx_drop: Some(count_delete),
            kernel_into: if composite.is_empty() {
                None
            } else {
                Some(poison_into)
            },
            composite: RlxStr::from_static(composite),
            shape_rule,
            shape_input: 0xabab_abab,
            shape_fn: Some(poison_shape),
        }
    };
    let register = |d: &RlxCustomOpDesc| status(api, (c.register_op.unwrap())(d));
    let unregister = || {
        status(
            api,
            (c.unregister.unwrap())(RlxStr::from_static("raw.ident")),
        )
    };
    // A 1.1-size desc (what a 1.1-1.4 host writes): a 1.1 kernel in every
    // build, whatever lies beyond.
    let old = desc(CUSTOM_OP_DESC_SIZE_1_1, tag, 0xabab_abab, "not a graph");
    assert_eq!(register(&old), None, "1.{minor}");
    assert_eq!(deletions(tag), 0);
    assert_eq!(unregister(), None);
    assert_eq!(deletions(tag), 1, "1.{minor}: dropped once, at unregister");
    // A 1.5 desc: a build before 1.5 reads its 1.1 part only; the 1.5
    // build refuses an unknown rule (INVALID_ARGUMENT) and what it does
    // not implement (UNSUPPORTED).
    let full = std::mem::size_of::<RlxCustomOpDesc>();
    let unknown_rule = desc(full, tag + 1, 0xabab_abab, "not a graph");
    if minor < 5 {
        assert_eq!(register(&unknown_rule), None, "1.{minor}");
        assert_eq!(unregister(), None);
    } else {
        assert_eq!(
            register(&unknown_rule),
            Some((
                1,
                "register_op: custom op \"raw.ident\" has the unknown shape rule 2880154539".into()
            ))
        );
        let composite = desc(full, tag + 2, 0, "not a graph");
        assert_eq!(
            register(&composite),
            Some((
                2,
                "register_op: custom op \"raw.ident\" needs a composite body; c-demo takes \
                 only kernels of the 1.1 form (kernel, no shape rule)"
                    .into()
            ))
        );
        assert_eq!(deletions(tag + 2), 1, "a refusal drops the context at once");
        let plain = desc(full, tag + 3, 0, "");
        assert_eq!(register(&plain), None);
        assert_eq!(unregister(), None);
        assert_eq!(deletions(tag + 3), 1);
    }
    assert_eq!(deletions(tag + 1), 1, "1.{minor}");
}

// ---- Executable state (the 1.9 build) ----

/// `next = x + s` (output "next"), `y = next * w` (output "y"): a counter
/// whose state `s` is the running sum when `next` feeds it.
fn counter() -> Graph {
    let mut g = Graph::new("counter");
    let x = g.input("x", f32s(&[2, 3]));
    let s = g.input("s", f32s(&[2, 3]));
    let w = g.param("w", f32s(&[2, 3]));
    let next = g.add(x, s);
    let y = g.mul(next, w);
    g.set_named_outputs([("next", next), ("y", y)]);
    g
}

const CW: [f32; 6] = [1., 2., 3., 4., 5., 6.];
const CX: [f32; 6] = [1., 1., 1., 2., 2., 2.];

/// The counter's outputs `(next, y)` for input `x` and state `s`: sums and
/// products of small integers, exact in f32.
fn counter_ref(x: &[f32], s: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let next: Vec<f32> = x.iter().zip(s).map(|(a, b)| a + b).collect();
    let y = next.iter().zip(CW).map(|(a, b)| a * b).collect();
    (next, y)
}

fn counter_exe(p: &Arc<LoadedPlugin>, mode: Mode) -> PluginExecutable {
    let mut exe = p.compile(&text(&counter()), mode).unwrap();
    exe.bind_param("w", &t(&[2, 3], &CW)).unwrap();
    exe
}

fn f32_vecs(out: Vec<HostTensor>) -> Vec<Vec<f32>> {
    out.iter().map(|t| t.to_f32_vec().unwrap()).collect()
}

/// `n` elements of the state `name` from `first`.
fn read_state(
    exe: &PluginExecutable,
    name: &str,
    first: usize,
    n: usize,
) -> PluginResult<Vec<f32>> {
    let mut buf = vec![0u8; n * 4];
    exe.state_read_into(name, first, DType::F32, &mut buf)?;
    rlx_plugin_api::convert::bytes_to_f32(DType::F32, &buf)
}

/// `n` elements of output `out` of the last run from `first`.
fn read_output(
    exe: &PluginExecutable,
    out: usize,
    first: usize,
    n: usize,
) -> PluginResult<Vec<f32>> {
    let mut buf = vec![0u8; n * 4];
    exe.output_read_into(out, first, DType::F32, &mut buf)?;
    rlx_plugin_api::convert::bytes_to_f32(DType::F32, &buf)
}

/// The error of `r`, as (code, message).
fn error_of<T: std::fmt::Debug>(r: PluginResult<T>) -> (StatusCode, String) {
    let e = r.expect_err("an error");
    (e.code, e.message)
}

#[test]
fn the_1_9_build_keeps_executable_state_through_the_host_library() {
    let (_dir, p) = load_build(NEWEST_MINOR);
    // State without row feeds; nothing else is offered.
    assert_eq!(
        p.offers(),
        Offers {
            state: true,
            ..Offers::default()
        }
    );
    for mode in MODES {
        let m = mode.name();
        let mut exe = counter_exe(&p, mode);
        assert!(exe.state_list().unwrap().is_empty());
        exe.state_bind("s", (&t(&[2, 3], &[0.; 6])).into()).unwrap();
        exe.state_set_feed("s", Feed::Replace(0)).unwrap();
        let list: Vec<(Role, String, Vec<Option<usize>>, DType)> = exe
            .state_list()
            .unwrap()
            .into_iter()
            .map(|v| (v.role, v.name, v.shape, v.dtype))
            .collect();
        assert_eq!(
            list,
            [(Role::State, "s".into(), vec![Some(2), Some(3)], DType::F32)]
        );
        // Given only x, each run reads s and feeds `next` back into it.
        let x = t(&[2, 3], &CX);
        let mut s = vec![0f32; 6];
        for step in 1..=3 {
            let out = f32_vecs(exe.run(&[("x", &x)]).unwrap());
            let (next, y) = counter_ref(&CX, &s);
            assert_eq!(out, [next.clone(), y], "[{m}] step {step}");
            s = next;
            assert_eq!(read_state(&exe, "s", 0, 6).unwrap(), s, "[{m}] step {step}");
        }
        assert_eq!(s, [3., 3., 3., 6., 6., 6.]);
        // Parts of the state and of the last run's outputs.
        assert_eq!(read_state(&exe, "s", 3, 2).unwrap(), [6., 6.]);
        assert_eq!(read_output(&exe, 1, 4, 2).unwrap(), [30., 36.]);
        assert_eq!(read_output(&exe, 0, 0, 6).unwrap(), s);
        // A given input overrides the state for that run only; the feed
        // then takes that run's output.
        let ten = [10f32; 6];
        let out = f32_vecs(exe.run(&[("s", &t(&[2, 3], &ten)), ("x", &x)]).unwrap());
        let (next, y) = counter_ref(&CX, &ten);
        assert_eq!(out, [next.clone(), y], "[{m}] override");
        s = next;
        assert_eq!(read_state(&exe, "s", 0, 6).unwrap(), s, "[{m}]");
        // A run that fails applies no feed and keeps the last outputs.
        let e = exe.run(&[("x", &t(&[3, 2], &CX))]).unwrap_err();
        assert_eq!(e.message, "input \"x\" is f32[2, 3], got f32[3, 2]");
        assert_eq!(read_state(&exe, "s", 0, 6).unwrap(), s, "[{m}]");
        assert_eq!(read_output(&exe, 0, 0, 6).unwrap(), s, "[{m}]");
        // Into buffers the host lends, output 0 skipped: not written, and
        // the state fed from it still follows.
        let mut y = [0xABu8; 24];
        // SAFETY: `y` is lent for the call and aliases nothing.
        let got = unsafe {
            exe.run_refs_dest_raw(
                &[("x", (&x).into())],
                &[
                    OutputDest::Skip,
                    OutputDest::Lend(LentBuffer {
                        ptr: y.as_mut_ptr(),
                        len: y.len(),
                    }),
                ],
                |_| -> PluginResult<()> { unreachable!("nothing read") },
            )
        }
        .unwrap();
        assert!(got.iter().all(Option::is_none));
        let (next, want_y) = counter_ref(&CX, &s);
        assert_eq!(
            rlx_plugin_api::convert::bytes_to_f32(DType::F32, &y).unwrap(),
            want_y
        );
        s = next;
        assert_eq!(
            read_state(&exe, "s", 0, 6).unwrap(),
            s,
            "[{m}] after a skip"
        );
        // NONE: the state keeps its value.
        exe.state_set_feed("s", Feed::None).unwrap();
        let out = f32_vecs(exe.run(&[("x", &x)]).unwrap());
        assert_eq!(out[0], counter_ref(&CX, &s).0);
        assert_eq!(read_state(&exe, "s", 0, 6).unwrap(), s, "[{m}] fed NONE");
        // Bound again: the value replaced, the feed kept.
        exe.state_set_feed("s", Feed::Replace(0)).unwrap();
        exe.state_bind("s", (&t(&[2, 3], &[100.; 6])).into())
            .unwrap();
        exe.run(&[("x", &x)]).unwrap();
        assert_eq!(
            read_state(&exe, "s", 0, 6).unwrap(),
            counter_ref(&CX, &[100.; 6]).0,
            "[{m}] rebound"
        );
        // Two states, listed in name order (the graph's order is x, s);
        // a run given nothing reads both.
        exe.state_bind("s", (&t(&[2, 3], &[0.; 6])).into()).unwrap();
        exe.state_bind("x", (&x).into()).unwrap();
        let names: Vec<String> = exe
            .state_list()
            .unwrap()
            .into_iter()
            .map(|v| v.name)
            .collect();
        assert_eq!(names, ["s", "x"]);
        let out = f32_vecs(exe.run(&[]).unwrap());
        assert_eq!(out[0], CX, "[{m}] both inputs from state");
        // Unbound, an input is the caller's again.
        exe.state_unbind("s").unwrap();
        let e = exe.run(&[]).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                StatusCode::InvalidArgument,
                "input \"s\" is missing: it was not given and is not held as state (the graph \
                 takes 2 inputs (\"x\", \"s\"); 0 given, 1 held)"
            )
        );
        exe.state_unbind("x").unwrap();
        assert!(exe.state_list().unwrap().is_empty());
        let e = exe.run(&[("x", &x)]).unwrap_err();
        assert_eq!(
            e.message,
            "the graph takes 2 inputs (\"x\", \"s\"), 1 given"
        );
        // A state belongs to its executable alone.
        let mut other = counter_exe(&p, mode);
        assert!(other.state_list().unwrap().is_empty());
        assert!(other.run(&[("x", &x)]).is_err());
    }
}

#[test]
fn the_1_9_build_refuses_every_state_misuse_naming_it() {
    let (_dir, p) = load_build(NEWEST_MINOR);
    let mut exe = counter_exe(&p, Mode::Lazy);
    let zeros = t(&[2, 3], &[0.; 6]);
    let nf = StatusCode::NotFound;
    let ia = StatusCode::InvalidArgument;
    let un = StatusCode::Unsupported;
    let cases: Vec<(PluginResult<()>, StatusCode, &str)> = vec![
        (
            exe.state_bind("nope", (&zeros).into()),
            nf,
            "the graph has no input named \"nope\" to hold as state (its inputs: \"x\", \"s\")",
        ),
        (
            exe.state_bind("w", (&zeros).into()),
            nf,
            "the graph has no input named \"w\" to hold as state (its inputs: \"x\", \"s\")",
        ),
        (
            exe.state_bind("s", (&t(&[3, 2], &[0.; 6])).into()),
            ia,
            "state \"s\" is f32[2, 3], got f32[3, 2]",
        ),
        (
            exe.state_bind(
                "s",
                (&HostTensor::new(DType::I32, vec![2, 3], vec![0; 24]).unwrap()).into(),
            ),
            ia,
            "state \"s\" is f32[2, 3], got i32[2, 3]",
        ),
        (
            exe.state_unbind("s"),
            nf,
            "no state is called \"s\" (states: none)",
        ),
        (
            exe.state_set_feed("s", Feed::Replace(0)),
            nf,
            "no state is called \"s\" (states: none)",
        ),
        (
            read_state(&exe, "s", 0, 1).map(drop),
            nf,
            "no state is called \"s\" (states: none)",
        ),
        (
            read_output(&exe, 0, 0, 6).map(drop),
            ia,
            "output \"next\": no run has completed yet, so there is no output to read",
        ),
    ];
    for (r, code, msg) in cases {
        assert_eq!(error_of(r), (code, msg.to_string()));
    }
    exe.state_bind("s", (&zeros).into()).unwrap();
    let mut i32_buf = [0u8; 8];
    let cases: Vec<(PluginResult<()>, StatusCode, &str)> = vec![
        (
            exe.state_set_feed("s", Feed::Rows(0)),
            un,
            "state \"s\": c-demo offers no row feeds (its state table's feed_rows is NULL); \
             feed it REPLACE, or pass the input with each run",
        ),
        // The host library checks the output's position itself.
        (
            exe.state_set_feed("s", Feed::Replace(7)),
            ia,
            "output 7 does not exist: the executable has 2 outputs",
        ),
        (
            exe.state_read_into("s", 0, DType::I32, &mut i32_buf),
            ia,
            "state \"s\" is f32; the buffer lent to read it is i32",
        ),
        (
            read_state(&exe, "s", 5, 2).map(drop),
            ia,
            "elements 5..7 of state \"s\" are out of range: it has 6",
        ),
        (
            read_state(&exe, "s", usize::MAX, 1).map(drop),
            ia,
            "elements 18446744073709551615..18446744073709551615 of state \"s\" are out of \
             range: it has 6",
        ),
        // What c-demo does not offer, refused by the host library before
        // any call.
        (
            exe.state_feed_rows(None, &RowFeed::rows(3, 0, 0, 1)),
            un,
            "plugin c-demo keeps state but cannot feed rows",
        ),
        (
            exe.clone_executable().map(drop),
            un,
            "plugin c-demo shares nothing between executables (ABI 1.9): cannot clone an \
             executable",
        ),
        (
            exe.submit(&[("x", (&zeros).into())]),
            un,
            "plugin c-demo only runs synchronously (no ABI 1.9 submit and wait)",
        ),
        (
            exe.wait_discard(),
            un,
            "plugin c-demo only runs synchronously (no ABI 1.9 submit and wait)",
        ),
        (
            exe.bind_param_range("w", 0, &[0; 4]),
            un,
            "plugin c-demo cannot overwrite part of a param (ABI 1.9)",
        ),
        (
            exe.set_rng(0, 1),
            un,
            "plugin c-demo cannot change its RNG (ABI 1.9)",
        ),
        (
            exe.set_active_extent(Some((1, 2))),
            un,
            "plugin c-demo cannot narrow its runs (ABI 1.9)",
        ),
        (
            p.memory_usage().map(drop),
            un,
            "plugin c-demo gives no memory figures (ABI 1.9 memory_usage)",
        ),
    ];
    for (r, code, msg) in cases {
        assert_eq!(error_of(r), (code, msg.to_string()));
    }
    let other = counter_exe(&p, Mode::Lazy);
    assert_eq!(
        error_of(exe.share_params_from(&other)),
        (
            un,
            "plugin c-demo shares nothing between executables (ABI 1.9): cannot share params"
                .to_string()
        )
    );
    // After a run: a read past an output.
    exe.run(&[("x", &t(&[2, 3], &CX))]).unwrap();
    assert_eq!(
        error_of(read_output(&exe, 1, 6, 1)),
        (
            ia,
            "elements 6..7 of output \"y\" are out of range: it has 6".to_string()
        )
    );
    // A replace feed from an output of another shape.
    let mut aff = p.compile(&text(&affine_relu()), Mode::Lazy).unwrap();
    aff.state_bind("x", (&t(&[2, 3], &X)).into()).unwrap();
    assert_eq!(
        error_of(aff.state_set_feed("x", Feed::Replace(0))),
        (
            ia,
            "state \"x\" is f32[2, 3] but output \"logits\" is f32[2, 2]: a replace feed needs \
             an output of the state's dtype and shape"
                .to_string()
        )
    );
    // Every refusal changed nothing: s is still held, zeros, fed NONE.
    assert_eq!(read_state(&exe, "s", 0, 6).unwrap(), [0.; 6]);
}

/// A visitor context collecting (role, name) pairs.
unsafe extern "C" fn collect_names(ctx: *mut c_void, info: *const RlxValueInfo) {
    let v = &mut *(ctx as *mut Vec<(u32, String)>);
    v.push(((*info).role, (*info).name.to_string_lossy()));
}

/// Every field of a descriptor, to see whether a call wrote it (its
/// padding bytes are not compared: they were never initialised).
fn fields_of(t: &RlxTensor) -> String {
    format!("{t:?}")
}

#[test]
fn the_1_9_state_table_by_hand_null_pointers_lent_buffers_and_skipped_slots() {
    for minor in [8, NEWEST_MINOR] {
        let r = raw(minor);
        let api =
            unsafe { &*(r.entry)(host_table(1, std::mem::size_of::<RlxHostApi>(), new_sink())) };
        assert_eq!(status(api, unsafe { (api.init.unwrap())() }), None);
        let code = |s| status(api, s);
        let mut exe = std::ptr::null_mut();
        let s = unsafe {
            (api.compile.unwrap())(RlxStr::from_str(ADD_MODEL), std::ptr::null(), &mut exe)
        };
        assert_eq!(code(s), None);
        let w = t(&[2], &[10., 20.]);
        let wv = w.as_raw(ownership::BORROWED);
        assert_eq!(
            code(unsafe {
                (api.executable_bind_param.unwrap())(exe, RlxStr::from_str("w"), &wv.raw)
            }),
            None
        );
        if minor >= 9 {
            let st = unsafe { &*api.state };
            let mut buf = [0f32; 1];
            let mut one = [1i64];
            let mut l = RlxTensor::empty();
            l.dl.data = buf.as_mut_ptr() as *mut c_void;
            l.dl.ndim = 1;
            l.dl.shape = one.as_mut_ptr();
            assert_eq!(
                code(unsafe {
                    (st.read_output.unwrap())(exe, RlxStr::from_str("output0"), 0, &mut l)
                }),
                Some((
                    1,
                    "output \"output0\": no run has completed yet, so there is no output to read"
                        .into()
                ))
            );
        }
        // A skipped output slot (run_into, x passed): the 1.9 build leaves
        // it as it was; the 1.8 build, which does not know SKIP, hands an
        // OWNED tensor over in it (what the host releases unread).
        let x = t(&[2], &[1., 2.]);
        let xv = x.as_raw(ownership::BORROWED);
        let input = RlxNamedTensor {
            struct_size: std::mem::size_of::<RlxNamedTensor>(),
            name: RlxStr::from_str("x"),
            tensor: xv.raw,
        };
        let mut slot = RlxTensor::empty();
        slot.ownership = ownership::SKIP;
        slot.manager_ctx = 0xABAB as *mut c_void;
        let before = fields_of(&slot);
        let run_into = api.executable_run_into.unwrap();
        assert_eq!(
            code(unsafe { run_into(exe, &input, 1, &mut slot, 1) }),
            None
        );
        if minor < 9 {
            // The 1.8 table ends before the 1.9 fields.
            assert_eq!(api.struct_size, std::mem::offset_of!(RlxPluginApi, state));
            assert_eq!(slot.ownership, ownership::OWNED);
            let out = unsafe { HostTensor::take_raw(slot) }.unwrap();
            assert_eq!(out.to_f32_vec().unwrap(), [11., 22.]);
            unsafe { (api.executable_destroy.unwrap())(exe) };
            continue;
        }
        assert_eq!(fields_of(&slot), before, "a SKIP slot is left as it was");
        // The 1.9 table: state without row feeds, nothing else.
        assert_eq!(api.struct_size, std::mem::size_of::<RlxPluginApi>());
        assert!(api.sharing.is_null() && api.submits.is_null());
        assert!(api.executable_bind_param_range.is_none());
        assert!(api.executable_set_rng.is_none());
        assert!(api.executable_set_active_extent.is_none());
        assert!(api.memory_usage.is_none());
        assert!(!api.state.is_null());
        let st = unsafe { &*api.state };
        assert_eq!(
            st.struct_size,
            std::mem::size_of::<rlx_plugin_api::tables::RlxStateApi>()
        );
        assert!(st.feed_rows.is_none());
        assert!(
            st.bind_from.is_none(),
            "the C plugin takes no state from another executable"
        );
        let (bind, unbind, read, list, set_feed, read_output) = (
            st.bind.unwrap(),
            st.unbind.unwrap(),
            st.read.unwrap(),
            st.list.unwrap(),
            st.set_feed.unwrap(),
            st.read_output.unwrap(),
        );
        let name = RlxStr::from_str("x");
        let null_name = RlxStr {
            ptr: std::ptr::null(),
            len: 3,
        };
        let null = std::ptr::null_mut::<rlx_plugin_api::tables::RlxExecutable>();
        let msg = |s: &str| Some((1u32, s.to_string()));
        unsafe {
            // Null pointers and names: statuses, never crashes.
            assert_eq!(
                code(bind(null, name, &xv.raw)),
                msg("state bind: the executable is NULL")
            );
            assert_eq!(
                code(bind(exe, null_name, &xv.raw)),
                msg("state bind: the name is NULL with length 3")
            );
            assert_eq!(
                code(bind(exe, name, std::ptr::null())),
                msg("state bind: the value is NULL")
            );
            assert_eq!(
                code(unbind(null, name)),
                msg("state unbind: the executable is NULL")
            );
            assert_eq!(
                code(unbind(exe, null_name)),
                msg("state unbind: the name is NULL with length 3")
            );
            assert_eq!(
                code(list(exe, std::ptr::null())),
                msg("state list: the visitor (or its visit function) is NULL")
            );
            assert_eq!(
                code(read_output(
                    exe,
                    RlxStr::from_str("output0"),
                    0,
                    std::ptr::null_mut()
                )),
                msg("the buffer lent to read output \"output0\" (`into`) is NULL")
            );
            assert_eq!(
                code(read_output(exe, null_name, 0, std::ptr::null_mut())),
                msg("state read_output: the output name is NULL with length 3")
            );
            // A descriptor of another size.
            let mut resized = xv.raw;
            resized.struct_size = 72;
            assert_eq!(
                code(bind(exe, name, &resized)),
                msg(
                    "state \"x\": RlxTensor.struct_size is 72, but RlxTensor is frozen at 80 bytes"
                )
            );
            // Borrowed for the call whatever its ownership: an OWNED value is
            // copied, never released; misaligned data is copied too.
            let tag = 7000usize;
            let mut bytes = vec![0u8; 2];
            bytes.extend([3f32, 4.].iter().flat_map(|v| v.to_le_bytes()));
            let mut shape = [2i64];
            let mut owned = RlxTensor::empty();
            owned.ownership = ownership::OWNED;
            owned.dl.data = bytes.as_mut_ptr() as *mut c_void;
            owned.dl.ndim = 1;
            owned.dl.shape = shape.as_mut_ptr();
            owned.dl.byte_offset = 2;
            owned.manager_ctx = tag as *mut c_void;
            owned.deleter = Some(count_delete);
            assert_eq!(code(bind(exe, name, &owned)), None);
            assert_eq!(
                deletions(tag),
                0,
                "a state's value is borrowed, never released"
            );
            drop(bytes);
            // Feeds: an unknown kind, an unknown output, a NULL output name;
            // NONE ignores the output.
            assert_eq!(
                code(set_feed(exe, name, 9, RlxStr::EMPTY)),
                msg("state set_feed: unknown feed kind 9 (0 none, 1 replace, 2 rows)")
            );
            assert_eq!(
                code(set_feed(exe, name, 1, RlxStr::from_str("nope"))),
                Some((
                    6,
                    "the graph has no output named \"nope\" (its outputs: \"output0\")".into()
                ))
            );
            assert_eq!(
                code(set_feed(exe, name, 1, null_name)),
                msg("state set_feed: the output name is NULL with length 3")
            );
            assert_eq!(code(set_feed(exe, name, 0, null_name)), None);
            assert_eq!(
                code(set_feed(exe, name, 1, RlxStr::from_str("output0"))),
                None
            );
            // The list: one state, role STATE.
            let mut seen: Vec<(u32, String)> = Vec::new();
            let vis = rlx_plugin_api::tables::RlxValueVisitor {
                struct_size: std::mem::size_of::<rlx_plugin_api::tables::RlxValueVisitor>(),
                ctx: &mut seen as *mut _ as *mut c_void,
                visit: Some(collect_names),
            };
            assert_eq!(code(list(exe, &vis)), None);
            assert_eq!(seen, [(3, "x".to_string())]);
            assert_eq!(
                code(list(null, &vis)),
                msg("state list: the executable is NULL")
            );
            // Lent buffers: each rule broken is refused and nothing is
            // written.
            let mut buf = [-1f32; 2];
            let mut one = [2i64];
            let lent = |buf: &mut [f32; 2], one: &mut [i64; 1]| {
                let mut l = RlxTensor::empty();
                l.dl.data = buf.as_mut_ptr() as *mut c_void;
                l.dl.ndim = 1;
                l.dl.shape = one.as_mut_ptr();
                l
            };
            let good = lent(&mut buf, &mut one);
            let mut strides = [2i64];
            let broken: [(RlxTensor, &str); 6] = [
                ({ let mut l = good; l.ownership = ownership::OWNED; l },
                 "the buffer lent to read state \"x\" has ownership 2; it must be BORROWED (the caller keeps it)"),
                ({ let mut l = good; l.dl.data = std::ptr::null_mut(); l },
                 "the buffer lent to read state \"x\" has NULL data"),
                ({ let mut l = good; l.dl.device.device_type = 2; l },
                 "the buffer lent to read state \"x\" is on DLPack device type 2; it must be host memory (kDLCPU)"),
                ({ let mut l = good; l.dl.strides = strides.as_mut_ptr(); l },
                 "the buffer lent to read state \"x\" is strided; it must be compact row-major"),
                ({ let mut l = good; l.struct_size = 88; l },
                 "the buffer lent to read state \"x\": RlxTensor.struct_size is 88, but RlxTensor is frozen at 80 bytes"),
                ({ let mut l = good; l.dl.ndim = 1; l.dl.shape = std::ptr::null_mut(); l },
                 "the buffer lent to read state \"x\" has 1 dims and a NULL shape (c-demo takes 0 ..= 8, with a shape)"),
            ];
            for (mut l, want) in broken {
                assert_eq!(code(read(exe, name, 0, &mut l)), msg(want));
            }
            assert_eq!(
                code(read(exe, name, 0, std::ptr::null_mut())),
                msg("the buffer lent to read state \"x\" (`into`) is NULL")
            );
            assert_eq!(buf, [-1., -1.], "a refused read writes nothing");
            let mut l = good;
            assert_eq!(code(read(exe, name, 0, &mut l)), None);
            assert_eq!(buf, [3., 4.], "the OWNED, misaligned value was copied");
            // Runs given nothing read x from the state; x follows output0.
            for want in [[13f32, 24.], [23., 44.]] {
                let mut slot = RlxTensor::empty();
                assert_eq!(
                    code((api.executable_run.unwrap())(
                        exe,
                        std::ptr::null(),
                        0,
                        &mut slot,
                        1
                    )),
                    None
                );
                let out = HostTensor::take_raw(slot).unwrap();
                assert_eq!(out.to_f32_vec().unwrap(), want);
            }
            // A skipped slot: nothing written, the feed still applied.
            let mut slot = RlxTensor::empty();
            slot.ownership = ownership::SKIP;
            let before = fields_of(&slot);
            assert_eq!(code(run_into(exe, std::ptr::null(), 0, &mut slot, 1)), None);
            assert_eq!(fields_of(&slot), before);
            let mut l = lent(&mut buf, &mut one);
            assert_eq!(code(read(exe, name, 0, &mut l)), None);
            assert_eq!(buf, [33., 64.]);
            let mut l = lent(&mut buf, &mut one);
            assert_eq!(
                code(read_output(exe, RlxStr::from_str("output0"), 0, &mut l)),
                None
            );
            assert_eq!(buf, [33., 64.], "the skipped output is the last run's");
            // Unbound: the caller's input again.
            assert_eq!(code(unbind(exe, name)), None);
            let mut slot = RlxTensor::empty();
            assert_eq!(
                code((api.executable_run.unwrap())(
                    exe,
                    std::ptr::null(),
                    0,
                    &mut slot,
                    1
                )),
                msg("the graph takes 1 inputs (\"x\"), 0 given")
            );
            (api.executable_destroy.unwrap())(exe);
        }
    }
}

/// x + s and (x + s) * w as rlx-runtime sees them through the host adapter
/// (an `ExecutableGraph`), on the C build claiming 1.`minor`.
fn adapter(p: &Arc<LoadedPlugin>, mode: Mode) -> rlx_plugin_host::backend::PluginGraph {
    let exe = p.compile(&text(&counter()), mode).unwrap();
    let mut g = rlx_plugin_host::backend::PluginGraph::new(exe, "c-demo".into());
    use rlx_runtime::ExecutableGraph;
    g.set_param("w", &CW);
    g
}

#[test]
fn the_host_adapter_reports_what_each_c_build_offers_and_each_flag_holds() {
    use rlx_runtime::ExecutableGraph;
    for minor in 0..=NEWEST_MINOR {
        let (_dir, p) = load_build(minor);
        let state = minor >= 9;
        for mode in MODES {
            let at = format!("1.{minor} [{}]", mode.name());
            let mut g = adapter(&p, mode);
            // State (1.9) gives persistent and GPU handles; nothing gives
            // row feeds, clones, submitted runs or active extents.
            let want: &[&str] = if state {
                &["persistent_handles", "gpu_handles", "typed_io"]
            } else {
                &["typed_io"]
            };
            assert_eq!(g.capabilities().enabled_names(), want, "{at}");

            // persistent_handles: a handle is an input the executable keeps.
            let s0 = [10f32, 20., 30., 40., 50., 60.];
            assert_eq!(g.bind_handle("s", &s0), state, "{at}");
            assert_eq!(g.read_handle("s"), state.then(|| s0.to_vec()), "{at}");
            assert!(
                !g.bind_handle("nope", &s0),
                "{at}: an unknown name is refused"
            );
            if state {
                let out = g.run(&[("x", &CX)]);
                assert_eq!(out[0], counter_ref(&CX, &s0).0, "{at}: x + the handle");
            }

            // gpu_handles: bound, fed from output 0, advanced by runs that
            // read back only output 1, read whole and by rows.
            let mut g = adapter(&p, mode);
            assert!(!g.has_gpu_handle("s"));
            assert_eq!(g.bind_gpu_handle("s", &[0.; 6]), state, "{at}");
            assert_eq!(g.has_gpu_handle("s"), state, "{at}");
            assert_eq!(g.set_gpu_handle_feed("s", 0), state, "{at}");
            let mut s = vec![0f32; 6];
            for _ in 0..3 {
                let ins: &[(&str, &[f32])] = if state {
                    &[("x", &CX)]
                } else {
                    &[("x", &CX), ("s", &[0.; 6])]
                };
                let out = g.run_read_outputs(ins, Some(&[1]));
                let (next, y) = counter_ref(&CX, &s);
                assert_eq!(out, [y], "{at}");
                if state {
                    s = next;
                }
            }
            if state {
                assert_eq!(s, [3., 3., 3., 6., 6., 6.]);
                assert_eq!(g.read_gpu_handle("s"), Some(s.clone()), "{at}");
                assert_eq!(g.read_gpu_handle_row("s", 1, 3), Some(vec![6.; 3]), "{at}");
                // Row 1 of output 1 of the last run: (2x + x) * w.
                assert_eq!(
                    g.read_output_row(1, 1, 3),
                    Some(vec![6. * 4., 6. * 5., 6. * 6.]),
                    "{at}"
                );
                let got = g.run_feed_gpu_handle(&[("x", &CX)], "s", 0);
                let (next, _) = counter_ref(&CX, &s);
                assert_eq!(got, Some(next.clone()), "{at}");
                s = next;
                assert_eq!(g.read_gpu_handle("s"), Some(s.clone()), "{at}");
            } else {
                assert_eq!(g.read_gpu_handle("s"), None, "{at}");
                assert_eq!(g.read_gpu_handle_row("s", 1, 3), None, "{at}");
                assert_eq!(g.read_output_row(1, 1, 3), None, "{at}");
                assert_eq!(g.run_feed_gpu_handle(&[("x", &CX)], "s", 0), None, "{at}");
            }

            // kv_resident is not reported: row feeds are refused and leave
            // the handle as it was.
            assert!(!g.register_kv_row_feed("s", 0), "{at}");
            assert!(!g.feed_kv_row(0, 0, 3), "{at}");
            assert!(!g.feed_kv_batch_major(0, 1, 2, 3), "{at}");
            if state {
                assert_eq!(g.read_gpu_handle("s"), Some(s.clone()), "{at}");
            }

            // async_pipeline is not reported: commit_no_wait runs at once
            // (the handle it feeds has advanced before any sync), and
            // run_pipelined returns each run's outputs in order.
            let pass_s: Vec<f32> = vec![0.; 6];
            let ins: Vec<(&str, &[f32])> = if state {
                vec![("x", &CX)]
            } else {
                vec![("x", &CX), ("s", &pass_s)]
            };
            g.commit_no_wait(&ins);
            if state {
                s = counter_ref(&CX, &s).0;
                assert_eq!(g.read_gpu_handle("s"), Some(s.clone()), "{at}: run at once");
            }
            g.sync_pending();
            let sets = vec![ins.clone(), ins.clone(), ins.clone()];
            let outs = g.run_pipelined(&sets);
            assert_eq!(outs.len(), 3, "{at}");
            for (i, o) in outs.iter().enumerate() {
                let before = if state { s.clone() } else { pass_s.clone() };
                let (next, y) = counter_ref(&CX, &before);
                assert_eq!(o, &[next.clone(), y], "{at}: pipelined run {i}");
                if state {
                    s = next;
                }
            }

            // clone is not reported: clone_box refuses (rlx-runtime's
            // contract for a backend without clones is a panic; checked in
            // one mode, to print one backtrace a build), and params are
            // never shared.
            if mode == Mode::Lazy {
                let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    drop(g.clone_box());
                }));
                let why = refused.expect_err("clone_box without clones");
                let why = why.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(why.contains("cannot clone executables"), "{at}: {why}");
            }
            let other = adapter(&p, mode);
            assert!(!g.share_params_from(&other), "{at}");
            assert!(!g.copy_params_from(&other), "{at}");
            assert!(!g.param_already_set("w"), "{at}");

            // active_extent is not reported: a narrowed run computes every
            // row anyway.
            let mut h = adapter(&p, mode);
            h.set_active_extent(Some((1, 2)));
            let sv = [1f32, 2., 3., 4., 5., 6.];
            let (next, y) = counter_ref(&CX, &sv);
            assert_eq!(h.run(&[("x", &CX), ("s", &sv)]), [next, y], "{at}");
            h.set_active_extent(None);

            // No param ranges, no RNG changes: refused, and visible.
            assert!(!h.set_param_range("w", 0, &2f32.to_le_bytes()), "{at}");
            assert_eq!(h.run(&[("x", &CX), ("s", &sv)])[1], counter_ref(&CX, &sv).1);
            let rng = h.rng();
            h.set_rng(rlx_ir::RngOptions::new(7, rlx_ir::RngBackend::Zero));
            assert_eq!(h.rng(), rng, "{at}: the RNG it keeps");

            // typed_io: params and inputs of other dtypes, converted to the
            // f32 the plugin declares; outputs in its dtype.
            let w64: Vec<u8> = CW.iter().flat_map(|v| (*v as f64).to_le_bytes()).collect();
            h.set_param_typed("w", &w64, rlx_ir::DType::F64);
            let x32: Vec<u8> = CX.iter().flat_map(|v| (*v as i32).to_le_bytes()).collect();
            let s32: Vec<u8> = sv.iter().flat_map(|v| v.to_le_bytes()).collect();
            let out = h.run_typed(&[
                ("x", &x32, rlx_ir::DType::I32),
                ("s", &s32, rlx_ir::DType::F32),
            ]);
            let (next, y) = counter_ref(&CX, &sv);
            let f = |b: &[u8]| rlx_plugin_api::convert::bytes_to_f32(DType::F32, b).unwrap();
            assert_eq!(out.len(), 2, "{at}");
            assert_eq!((f(&out[0].0), out[0].1), (next, rlx_ir::DType::F32), "{at}");
            assert_eq!((f(&out[1].0), out[1].1), (y, rlx_ir::DType::F32), "{at}");
        }
    }
}

// ---- the rlx-host CLI ----

fn rlx_host_bin() -> PathBuf {
    let p = profile_dir().join(format!("rlx-host{}", std::env::consts::EXE_SUFFIX));
    assert!(
        p.exists(),
        "{} is missing: `cargo test --workspace` builds it",
        p.display()
    );
    p
}

fn rlx_host(plugins: &Path, home: &Path, args: &[&str]) -> serde_json::Value {
    let o = std::process::Command::new(rlx_host_bin())
        .args(args)
        .env("RLX_BACKEND_PLUGINS", plugins)
        .env("RLX_HOME", home)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("spawn rlx-host");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "rlx-host {args:?} failed: {}\n{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
}

#[test]
fn rlx_host_cli_lists_and_runs_c_demo() {
    let file = library_file_name("rlx_c_plugin");
    let dir = plugins_dir(&[(&c_build(4), &file)]);
    let home = tempfile::tempdir().unwrap();

    // Our directory's candidate (the binary's own plugins/ directory may
    // add others).
    let v = rlx_host(dir.path(), home.path(), &["plugins", "--json"]);
    let cands = v["candidates"].as_array().unwrap();
    let ours: Vec<&serde_json::Value> = cands
        .iter()
        .filter(|c| c["source"] == "RLX_BACKEND_PLUGINS")
        .collect();
    assert_eq!(ours.len(), 1, "{v}");
    let c = ours[0];
    assert_eq!(c["state"], "loaded", "{v}");
    assert_eq!(c["name"], "c-demo");
    assert_eq!(c["version"], "0.1.0");
    assert_eq!(c["abi_version"], "1.4.0");
    assert!(c["path"].as_str().unwrap().ends_with(&file));

    let lib = dir.path().join(&file);
    let v = rlx_host(
        dir.path(),
        home.path(),
        &["plugins", "inspect", lib.to_str().unwrap(), "--json"],
    );
    assert_eq!(v["descriptor"]["build_info"]["language"], "C11");
    assert_eq!(v["custom_ops"][0]["name"], "c_demo.scale2");
    assert_eq!(v["lowering_table"].as_array().unwrap().len(), 6);

    // x · w + b, then exp: a model c-demo runs once rlx-runtime lowered it.
    let model = home.path().join("affine_exp.rlxmodel");
    std::fs::write(&model, text(&session_graphs()[0])).unwrap();
    for mode in ["lazy", "eager", "compiled"] {
        let v = rlx_host(
            dir.path(),
            home.path(),
            &[
                "run",
                model.to_str().unwrap(),
                "--backend",
                "c-demo",
                "--mode",
                mode,
                "--compare",
                "cpu",
                "--seed",
                "3",
                "--json",
            ],
        );
        assert_eq!(v["backend"], "c-demo");
        assert_eq!(v["mode"], mode);
        let outs = v["outputs"].as_array().unwrap();
        assert_eq!(outs.len(), 1, "{v}");
        assert_eq!(outs[0]["name"], "y");
        assert_eq!(outs[0]["shape"], serde_json::json!([4, 6]));
        let rel = outs[0]["max_rel_err"].as_f64().unwrap();
        let abs = outs[0]["max_abs_err"].as_f64().unwrap();
        assert!(rel <= 1e-5 && abs <= 1e-4, "[{mode}] {v}");
    }
}

// ---- the C host (tests/hosts/c-host) on the C plugin ----

#[test]
fn the_c_host_runs_every_c_build_at_every_claim() {
    // Both halves in plain C: rlx-c-host claiming 1.0 ..= 1.13 against each
    // c-demo build (its own checks, and `ok` last).
    let host = Path::new(env!("RLX_C_ARTIFACTS")).join("rlx-c-host");
    if !host.exists() {
        eprintln!(
            "{} was not built (no tests/hosts/c-host/c_host.c): skipped",
            host.display()
        );
        return;
    }
    let run = |claim: u32, minor: u32, mode: &str| {
        let o = std::process::Command::new(&host)
            .args([
                "--claim",
                &format!("1.{claim}"),
                "--mode",
                mode,
                "--activation",
                "exp",
                "--setting",
                "RLX_C_DEMO_GREETING=hello from the C host",
            ])
            .arg(c_build(minor))
            .output()
            .expect("spawn rlx-c-host");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            o.status.success() && out.lines().last() == Some("ok"),
            "host 1.{claim} x plugin 1.{minor} [{mode}]: {}\n{out}{err}",
            o.status,
        );
        (out, err)
    };
    for claim in 0..=NEWEST_MINOR {
        for minor in 0..=NEWEST_MINOR {
            let (out, err) = run(claim, minor, "lazy");
            // 1.10: a 1.10 build asks the host for its setting at init; a
            // host claiming less has no `setting` (the build then reads its
            // process environment, which lacks it), an older build never
            // asks.
            assert_eq!(
                err.contains("c-demo setting RLX_C_DEMO_GREETING = hello from the C host"),
                claim >= 10 && minor >= 10,
                "host 1.{claim} x plugin 1.{minor}:\n{out}{err}"
            );
            let registry = out.contains("custom op c_demo.scale2 (plugin, 1 in, 1 out)");
            assert_eq!(
                registry,
                claim >= 1 && minor >= 1,
                "host 1.{claim} x plugin 1.{minor}:\n{out}"
            );
            // The 1.5 fields of a record: printed only when both sides
            // know them.
            let kind = out.contains(
                "custom op c_demo.scale2 (plugin, 1 in, 1 out) kind kernel, \
                                     shape not declared",
            );
            assert_eq!(
                kind,
                claim >= 5 && minor >= 5,
                "host 1.{claim} x plugin 1.{minor}:\n{out}"
            );
            // 1.8's run_into: used only when both sides know it.
            assert_eq!(
                out.contains("run_into: output written into the host's buffer"),
                claim >= 8 && minor >= 8,
                "host 1.{claim} x plugin 1.{minor}:\n{out}"
            );
            // 1.9: a 1.9 host uses the 1.9 build's state (the misuse each
            // with its code, or the host would have failed), and finds every
            // other 1.9 entry absent: NULL in the 1.9 build, beyond the
            // table of an older one.
            let cell = format!("host 1.{claim} x plugin 1.{minor}:\n{out}");
            if claim < 9 {
                assert!(
                    out.contains(&format!(
                        "1.9 entries: not used (an ABI 1.{claim} host has none)"
                    )),
                    "{cell}"
                );
                continue;
            }
            let used = [
                "state bind: s f32[2, 3] held",
                "state REPLACE feed: 3 runs given only x; s = [3 3 3; 6 6 6] (3x), read back",
                "state read: s[3..5] = [6 6]; read_output: y[4..6] = [30 36]",
                "state override: s given for one run (10) -> output 0 = [11 ...], fed into s",
                "run_into: a SKIP slot was left as it was; the state it feeds still advanced",
                "state unbind: s is the caller's again",
                "error path: state bind of an unknown name -> NOT_FOUND (6): the graph has no \
                 input named \"nope\" to hold as state",
                "error path: state bind of s with shape [3, 2] -> INVALID_ARGUMENT (1): state \
                 \"s\" is f32[2, 3], got f32[3, 2]",
                "error path: state read of elements 5..7 of 6 -> INVALID_ARGUMENT (1)",
                "error path: state read_output before any run -> INVALID_ARGUMENT (1)",
            ];
            for line in used {
                assert_eq!(out.contains(line), minor >= 9, "{line}\n{cell}");
            }
            let fields = [
                "sharing",
                "submits",
                "executable_bind_param_range",
                "executable_set_rng",
                "executable_set_active_extent",
                "memory_usage",
            ];
            for field in fields {
                let absent = if minor >= 9 {
                    format!("{field}: not offered (NULL)")
                } else {
                    format!("{field}: not offered (plugin ABI 1.{minor}: its table of ")
                };
                assert!(out.contains(&absent), "{absent}\n{cell}");
            }
            if minor >= 9 {
                assert!(
                    out.contains("state feed_rows: not offered (NULL): no row feeds"),
                    "{cell}"
                );
            } else {
                assert!(
                    out.contains(&format!(
                        "state: not offered (plugin ABI 1.{minor}: its table of "
                    )),
                    "{cell}"
                );
            }
            for never in ["clone:", "share_params:", "wait ", "submits: 3", "set_rng:"] {
                assert!(
                    !out.lines().any(|l| l.starts_with(never)),
                    "{never}\n{cell}"
                );
            }
        }
    }
    for mode in ["eager", "compiled"] {
        run(4, 4, mode);
        run(5, 5, mode);
        run(6, 6, mode);
        run(8, 8, mode);
        run(9, 9, mode);
        run(10, 10, mode);
    }
}

// ---- Settings asked of this host (the 1.10 build) ----

#[test]
fn the_1_10_build_asks_this_host_for_its_settings() {
    // Debug, as c_demo_loads_through_discovery_and_works asks: the level
    // is process-wide.
    let logs = capture_logs(log::LevelFilter::Debug);
    // This host answers `setting` with rlx_ir::env, so an in-process
    // override reaches the C plugin; scoped to this thread (init runs on
    // it), so no other test's load sees it.
    let value = "hello from rlx_ir on this thread";
    let line = format!("c-demo setting RLX_C_DEMO_GREETING = {value}");
    let said = || logs().iter().filter(|r| r.message == line).count();
    let _scope = rlx_ir::env::scoped("RLX_C_DEMO_GREETING", value);
    let (_d, _p) = load_build(NEWEST_MINOR);
    assert_eq!(said(), 1, "the 1.10 build asked and logged it at init");
    // A 1.9 build never asks.
    let (_d9, _p9) = load_build(9);
    assert_eq!(said(), 1);
}
