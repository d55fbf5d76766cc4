//! The MLX plugin's core: loading, descriptor, errors, binding, modes, and
//! parity of the first ops against the CPU backend.

use rlx_ir::op::BinaryOp;
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_api::{HostTensor, Mode, StatusCode};
use rlx_plugin_tests::parity::{check_parity, mlx, run_mlx, Feed, Tol};

fn s(dims: &[usize], d: IrDType) -> Shape {
    Shape::new(dims, d)
}

#[test]
fn descriptor_names_mlx_and_its_blas() {
    let p = mlx();
    let d = p.descriptor();
    // "mlx-cuda" when the suite runs on the CUDA directory
    // (RLX_TEST_MLX_DIR): its devices then start with a GPU.
    match d.name.as_str() {
        "mlx" => {}
        "mlx-cuda" => assert_eq!(
            d.device_infos.first().map(|i| i.kind),
            Some(rlx_plugin_api::DeviceKind::Gpu)
        ),
        other => panic!("unexpected plugin name {other:?}"),
    }
    let info: std::collections::HashMap<_, _> = d.build_info.iter().cloned().collect();
    assert_eq!(info["mlx.version"], "0.32.4");
    assert!(!info["blas"].is_empty());
    // The supported-op list is the lowering table's op kinds.
    let ops: Vec<_> = p
        .supported_ops()
        .iter()
        .map(|o| o.op_kind.clone())
        .collect();
    let rows: Vec<_> = p
        .lowering_table()
        .iter()
        .map(|l| l.op_kind.clone())
        .collect();
    assert_eq!(ops, rows);
}

#[test]
fn matmul_and_binary_parity_all_dtypes() {
    for dt in [IrDType::F32, IrDType::F16, IrDType::BF16] {
        let mut g = Graph::new("mm");
        let x = g.input("x", s(&[3, 5], dt));
        let w = g.param("w", s(&[5, 7], dt));
        let b = g.input("b", s(&[7], dt));
        let m = g.matmul(x, w, s(&[3, 7], dt));
        let o = g.binary(BinaryOp::Add, m, b, s(&[3, 7], dt));
        g.set_outputs(vec![o]);
        let tol = match dt {
            IrDType::F32 => Tol {
                abs: 1e-5,
                rel: 1e-5,
            },
            // a K=5 dot product rounded once more to the dtype
            IrDType::F16 => Tol {
                abs: 4e-3,
                rel: 4e-3,
            },
            _ => Tol {
                abs: 3e-2,
                rel: 3e-2,
            },
        };
        check_parity(&format!("matmul+bias {dt:?}"), &g, 11, tol);
    }
}

#[test]
fn errors_name_the_node_and_never_crash() {
    let p = mlx();
    // Unsupported op.
    let mut g = Graph::new("bad");
    let x = g.input("x", s(&[4], IrDType::U8));
    let y = g.binary(BinaryOp::BitAnd, x, x, s(&[4], IrDType::U8));
    g.set_outputs(vec![y]);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let e = p
        .compile(&text, Mode::Lazy)
        .err()
        .expect("Binary on u8 is not lowered");
    assert!(
        e.message.contains("node %1") && e.message.contains("Binary"),
        "{e}"
    );

    // Shape mismatch declared in the graph: caught at compile, naming the node.
    let mut g = Graph::new("mismatch");
    let a = g.input("a", s(&[2, 3], IrDType::F32));
    let b = g.input("b", s(&[4, 5], IrDType::F32));
    let m = g.matmul(a, b, s(&[2, 5], IrDType::F32));
    g.set_outputs(vec![m]);
    let e = p
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("inner dims differ");
    assert!(
        e.message.contains("MatMul") && e.message.contains("f32[2, 3], f32[4, 5]"),
        "{e}"
    );

    // Wrong input size, missing input, missing param, unknown param.
    let mut g = Graph::new("ok");
    let x = g.input("x", s(&[2, 2], IrDType::F32));
    let w = g.param("w", s(&[2, 2], IrDType::F32));
    let m = g.matmul(x, w, s(&[2, 2], IrDType::F32));
    g.set_outputs(vec![m]);
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe = p
            .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), mode)
            .unwrap();
        let good = HostTensor::from_f32(vec![2, 2], &[1., 2., 3., 4.]).unwrap();
        let e = exe.run(&[("x", &good)]).unwrap_err();
        assert_eq!(e.message, "param \"w\" is not bound");
        let e = exe.bind_param("nope", &good).unwrap_err();
        assert_eq!(e.code, StatusCode::NotFound);
        let e = exe
            .bind_param("w", &HostTensor::from_f32(vec![4], &[0.; 4]).unwrap())
            .unwrap_err();
        assert!(
            e.message.contains("param \"w\" is f32[2, 2], got f32[4]"),
            "{e}"
        );
        exe.bind_param("w", &good).unwrap();
        let e = exe.run(&[]).unwrap_err();
        assert_eq!(e.message, "missing input \"x\"");
        let e = exe
            .run(&[("x", &HostTensor::from_f32(vec![3], &[0.; 3]).unwrap())])
            .unwrap_err();
        assert!(
            e.message.contains("input \"x\" is f32[2, 2], got f32[3]"),
            "{e}"
        );
        // And it still works after the errors.
        let out = exe.run(&[("x", &good)]).unwrap();
        assert_eq!(out[0].to_f32_vec().unwrap(), vec![7., 10., 15., 22.]);
    }
    // Unreadable text.
    let e = p
        .compile("rlxmodel 1\nopset 1\ngraph @g {", Mode::Lazy)
        .err()
        .unwrap();
    assert_eq!(e.code, StatusCode::InvalidArgument);
}

#[test]
fn eager_single_op_entry() {
    let mut g = Graph::new("mul");
    let a = g.input("a", s(&[3], IrDType::F32));
    let b = g.input("b", s(&[1], IrDType::F32));
    let m = g.binary(BinaryOp::Mul, a, b, s(&[3], IrDType::F32));
    g.set_outputs(vec![m]);
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let out = mlx()
        .execute_op(
            "Binary",
            &text,
            &[
                HostTensor::from_f32(vec![3], &[1., 2., 3.]).unwrap(),
                HostTensor::from_f32(vec![1], &[-2.]).unwrap(),
            ],
        )
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), vec![-2., -4., -6.]);
    let e = mlx().execute_op("MatMul", &text, &[]).unwrap_err();
    assert!(e.message.contains("exactly one MatMul node"), "{e}");
}

#[test]
fn rebinding_a_param_takes_effect_in_every_mode() {
    let mut g = Graph::new("scale");
    let x = g.input("x", s(&[2], IrDType::F32));
    let w = g.param("w", s(&[2], IrDType::F32));
    let m = g.binary(BinaryOp::Mul, x, w, s(&[2], IrDType::F32));
    g.set_outputs(vec![m]);
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let feeds = [
            Feed {
                name: "x".into(),
                values: vec![1., 2.],
            },
            Feed {
                name: "w".into(),
                values: vec![3., 4.],
            },
        ];
        let out = run_mlx(&g, &feeds, mode).unwrap();
        assert_eq!(out[0].to_f32_vec().unwrap(), vec![3., 8.]);
    }
}
