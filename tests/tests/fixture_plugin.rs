//! The working fixture plugin, loaded through discovery from a temp
//! plugins directory: handshake, descriptor, ops, lowering table, eager
//! single-op execution, compiled graphs, custom ops and logging.

use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_api::{DType, HostTensor, Mode, Origin, Role, StatusCode, Strategy};
use rlx_plugin_loader::{CandidateState, PluginSet};
use rlx_plugin_tests::{capture_logs, only_dir, plugins_dir, test_plugin};
use std::sync::Arc;

fn f32s(shape: &[usize]) -> Shape {
    Shape::new(shape, IrDType::F32)
}

/// x[2,3] · w[3,2] → relu → + bias(scalar input)
fn mlp_text() -> String {
    let mut g = Graph::new("mlp");
    let x = g.input("x", f32s(&[2, 3]));
    let w = g.param("w", f32s(&[3, 2]));
    let b = g.input("b", f32s(&[1]));
    let m = g.matmul(x, w, f32s(&[2, 2]));
    let r = g.activation(Activation::Relu, m, f32s(&[2, 2]));
    let o = g.binary(BinaryOp::Add, r, b, f32s(&[2, 2]));
    g.set_outputs(vec![o]);
    rlx_ir::rlxmodel::to_text(&g).unwrap()
}

#[test]
fn fixture_loads_through_discovery_and_works() {
    let logs = capture_logs(log::LevelFilter::Debug);
    let dir = plugins_dir(&[(&test_plugin("fixture"), "librlx_test_fixture.so")]);
    let set = PluginSet::load(&only_dir(dir.path()));
    assert_eq!(set.candidates.len(), 1);
    assert!(
        matches!(set.candidates[0].state, CandidateState::Loaded(_)),
        "{}",
        set.candidates[0].reason()
    );
    let p = set.get("fixture").expect("fixture loaded");

    // Handshake and descriptor.
    assert_eq!(p.abi_version(), rlx_plugin_api::ABI_VERSION);
    let d = p.descriptor();
    assert_eq!((d.name.as_str(), d.version.as_str()), ("fixture", "0.1.0"));
    assert_eq!(d.devices, vec!["cpu".to_string()]);
    assert_eq!(d.opsets, vec![1]);
    assert!(d
        .build_info
        .iter()
        .any(|(k, v)| k == "backend" && v == "fixture interpreter"));

    // Ops and lowering table (the op list is derived from the table).
    let ops: Vec<&str> = p
        .supported_ops()
        .iter()
        .map(|o| o.op_kind.as_str())
        .collect();
    assert_eq!(
        ops,
        [
            "Input",
            "Param",
            "Constant",
            "Binary",
            "Activation",
            "MatMul"
        ]
    );
    assert!(p
        .supported_ops()
        .iter()
        .all(|o| o.dtypes == vec![DType::F32]));
    let table = p.lowering_table();
    let mm = table.iter().find(|e| e.op_kind == "MatMul").unwrap();
    assert_eq!(
        (mm.strategy, mm.eager, mm.note.as_str()),
        (Strategy::Native, true, "2-D")
    );
    assert!(!table.iter().find(|e| e.op_kind == "Input").unwrap().eager);

    // Eager single op: Sub of two inputs.
    let mut g = Graph::new("sub");
    let a = g.input("a", f32s(&[3]));
    let b = g.input("b", f32s(&[3]));
    let s = g.binary(BinaryOp::Sub, a, b, f32s(&[3]));
    g.set_outputs(vec![s]);
    let node = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let out = p
        .execute_op(
            "Binary",
            &node,
            &[
                HostTensor::from_f32(vec![3], &[5., 7., 9.]).unwrap(),
                HostTensor::from_f32(vec![3], &[1., 2., 3.]).unwrap(),
            ],
        )
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), vec![4., 5., 6.]);
    let e = p.execute_op("Input", &node, &[]).unwrap_err();
    assert_eq!(e.code, StatusCode::Unsupported);

    // A compiled graph: signature, params (copied and zero-copy), runs.
    let mut exe = p.compile(&mlp_text(), Mode::Lazy).unwrap();
    let sig: Vec<(Role, &str)> = exe
        .signature()
        .iter()
        .map(|v| (v.role, v.name.as_str()))
        .collect();
    assert_eq!(
        sig,
        [
            (Role::Input, "x"),
            (Role::Input, "b"),
            (Role::Param, "w"),
            (Role::Output, "output0")
        ]
    );
    let x = HostTensor::from_f32(vec![2, 3], &[1., 2., 3., -4., -5., -6.]).unwrap();
    let w = HostTensor::from_f32(vec![3, 2], &[1., 0., 0., 1., 1., 1.]).unwrap();
    let bias = HostTensor::from_f32(vec![1], &[0.5]).unwrap();
    // Missing param: a clear error, not a crash.
    let e = exe.run(&[("x", &x), ("b", &bias)]).unwrap_err();
    assert!(e.message.contains("param \"w\" is not bound"), "{e}");
    exe.bind_param_shared("w", Arc::new(w.clone())).unwrap();
    // x·w = [[4,5],[-10,-11]] → relu → [[4,5],[0,0]] → +0.5
    let out = exe.run(&[("x", &x), ("b", &bias)]).unwrap();
    assert_eq!(out[0].shape, vec![2, 2]);
    assert_eq!(out[0].to_f32_vec().unwrap(), vec![4.5, 5.5, 0.5, 0.5]);
    exe.bind_param(
        "w",
        &HostTensor::from_f32(vec![3, 2], &[0., 0., 0., 0., 0., 0.]).unwrap(),
    )
    .unwrap();
    assert_eq!(
        exe.run(&[("x", &x), ("b", &bias)]).unwrap()[0]
            .to_f32_vec()
            .unwrap(),
        vec![0.5; 4]
    );
    let e = exe
        .bind_param("w", &HostTensor::from_f32(vec![2, 3], &[0.; 6]).unwrap())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    let e = exe.run(&[("x", &bias), ("b", &bias)]).unwrap_err();
    assert!(e.message.contains("input \"x\" is f32[2, 3]"), "{e}");
    let e = p
        .compile("rlxmodel 1\nopset 1\ngraph @g { nonsense }", Mode::Eager)
        .err()
        .unwrap();
    assert_eq!(e.code, StatusCode::InvalidArgument);
    let e = p
        .compile(&mlp_text().replacen("opset 1", "opset 9", 1), Mode::Lazy)
        .err()
        .unwrap();
    assert_eq!(e.code, StatusCode::Unsupported);
    assert!(
        e.message.contains("opset 9") && e.message.contains("upgrade the plugin"),
        "{e}"
    );

    // Custom ops: the plugin's own, then one the host registers.
    let listed = p.list_custom_ops().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].name.as_str(), listed[0].origin),
        ("fixture.scale2", Origin::Plugin)
    );
    let two = p
        .execute_custom_op(
            "fixture.scale2",
            &[HostTensor::from_f32(vec![2], &[1.5, -2.]).unwrap()],
            1,
        )
        .unwrap();
    assert_eq!(two[0].to_f32_vec().unwrap(), vec![3., -4.]);
    p.register_custom_op("host.add_one", "x + 1", 1, 1, |ins| {
        let v: Vec<f32> = ins[0].to_f32_vec()?.iter().map(|x| x + 1.0).collect();
        Ok(vec![HostTensor::from_f32(ins[0].shape.clone(), &v)?])
    })
    .unwrap();
    let info = p.lookup_custom_op("host.add_one").unwrap();
    assert_eq!(
        (info.n_inputs, info.n_outputs, info.origin),
        (1, 1, Origin::Host)
    );
    let names: Vec<String> = p
        .list_custom_ops()
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["fixture.scale2", "host.add_one"]);
    let out = p
        .execute_custom_op(
            "host.add_one",
            &[HostTensor::from_f32(vec![1], &[41.]).unwrap()],
            1,
        )
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), vec![42.]);
    let e = p
        .register_custom_op("host.add_one", "again", 1, 1, |_| Ok(vec![]))
        .unwrap_err();
    assert_eq!(e.code, StatusCode::AlreadyExists);
    p.register_custom_op("host.fails", "always fails", 1, 1, |_| {
        Err(rlx_plugin_api::PluginError::invalid_argument(
            "host kernel says no",
        ))
    })
    .unwrap();
    let e = p
        .execute_custom_op(
            "host.fails",
            &[HostTensor::from_f32(vec![1], &[0.]).unwrap()],
            1,
        )
        .unwrap_err();
    assert!(e.message.contains("host kernel says no"), "{e}");
    let e = p.execute_custom_op("host.add_one", &[], 1).unwrap_err();
    assert!(e.message.contains("takes 1 inputs, got 0"), "{e}");
    p.unregister_custom_op("host.add_one").unwrap();
    p.unregister_custom_op("host.fails").unwrap();
    assert_eq!(
        p.lookup_custom_op("host.add_one").unwrap_err().code,
        StatusCode::NotFound
    );
    assert_eq!(
        p.unregister_custom_op("host.add_one").unwrap_err().code,
        StatusCode::NotFound
    );

    // Logging: plugin records reach this logger, tagged with the plugin's
    // name, and the host's max level (Debug) holds back the trace record.
    let records = logs();
    let from_plugin: Vec<_> = records
        .iter()
        .filter(|r| r.target.starts_with("rlx_plugin::fixture"))
        .collect();
    assert!(
        from_plugin
            .iter()
            .any(|r| r.level == log::Level::Info && r.message == "fixture registered 6 lowerings"),
        "{records:#?}"
    );
    assert!(from_plugin
        .iter()
        .any(|r| r.level == log::Level::Debug
            && r.message.contains("compiling a graph in lazy mode")));
    assert!(from_plugin.iter().all(|r| r
        .target
        .starts_with("rlx_plugin::fixture::rlx_fixture_core")));
    assert!(
        !records
            .iter()
            .any(|r| r.message.contains("fixture trace record")),
        "trace leaked: {records:#?}"
    );
}

/// The plugin asks this host for its settings: an in-process `rlx_ir::env`
/// override of the host (here scoped to this thread, which compiles) reaches
/// the fixture, whose own rlx-ir never sees it.
#[test]
fn the_fixture_reads_its_setting_from_this_host() {
    // Debug, as the other tests here ask: the level is process-wide.
    let logs = capture_logs(log::LevelFilter::Debug);
    let p = rlx_plugin_tests::fixture_plugin();
    let value = "set in the host's rlx_ir, on this thread";
    let line = format!("fixture setting RLX_FIXTURE_SETTING = {value:?}");
    let said = || logs().iter().any(|r| r.message == line);
    {
        let _scope = rlx_ir::env::scoped("RLX_FIXTURE_SETTING", value);
        p.compile(rlx_plugin_tests::FIXTURE_GRAPH, Mode::Lazy)
            .unwrap();
    }
    assert!(said(), "{:?}", logs());
    assert!(std::env::var_os("RLX_FIXTURE_SETTING").is_none());
}
