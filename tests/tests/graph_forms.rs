//! Graph forms: a host sends a graph in the fastest form the plugin reads
//! (`LoadedPlugin::compile_graph`), which for the MLX plugin is this rlx-ir
//! release's own serialisation, and `.rlxmodel` text to a plugin that reads no
//! other form. Reference: the same graph sent as text, run on the same plugin;
//! the outputs must be the same bits and the signatures the same values.

use rlx_ir::infer::GraphExt;
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType as IrDType, Graph, Op, Shape};
use rlx_plugin_api::graph_forms::{encode, this_rlx_ir_bincode};
use rlx_plugin_api::{CompileOptions, HostTensor, StatusCode};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_plugin_tests::{fixture_plugin, FIXTURE_GRAPH};

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, IrDType::F32)
}

/// Constants text must spell out (-0, -inf, NaN), a Scan whose body is a
/// graph of its own, and named outputs.
fn graph() -> Graph {
    let n = 6;
    let mut body = Graph::new("step");
    let c = body.input("carry", f32s(&[n]));
    let xt = body.input("x_t", f32s(&[n]));
    let cx = body.mul(c, xt);
    let y = body.tanh(cx);
    body.set_outputs(vec![y]);
    let mut g = Graph::new("forms");
    let x = g.input("x", f32s(&[n]));
    let xs = g.input("xs", f32s(&[4, n]));
    let data = [1.5f32, -0.0, f32::NEG_INFINITY, 2.0, 3.0, f32::NAN]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let k = g.add_node(Op::Constant { data }, vec![], f32s(&[n]));
    let sum = g.binary(BinaryOp::Add, x, k, f32s(&[n]));
    let scanned = g.add_node(
        Op::Scan {
            body: Box::new(body),
            length: 4,
            save_trajectory: false,
            num_bcast: 0,
            num_xs: 1,
            num_checkpoints: 0,
        },
        vec![x, xs],
        f32s(&[n]),
    );
    g.set_named_outputs([("sum", sum), ("scanned", scanned)]);
    g
}

fn inputs() -> (HostTensor, HostTensor) {
    let x: Vec<f32> = (0..6).map(|i| i as f32 * 0.25 - 0.5).collect();
    let xs: Vec<f32> = (0..24).map(|i| (i % 7) as f32 * 0.125 - 0.3).collect();
    (
        HostTensor::from_f32(vec![6], &x).unwrap(),
        HostTensor::from_f32(vec![4, 6], &xs).unwrap(),
    )
}

#[test]
fn the_mlx_plugin_reads_this_rlx_ir_release_s_form() {
    assert_eq!(mlx().graph_forms(), [this_rlx_ir_bincode()]);
}

#[test]
fn a_graph_sent_in_the_form_runs_as_its_text_does() {
    let plugin = mlx();
    let g = graph();
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let (x, xs) = inputs();
    for mode in MODES {
        let options = CompileOptions::mode(mode);
        let mut sent_text = plugin.compile_with(&text, &options).unwrap();
        let mut sent_form = plugin.compile_graph(&g, &options).unwrap();
        assert_eq!(sent_form.signature(), sent_text.signature(), "{mode:?}");
        let want = sent_text.run(&[("x", &x), ("xs", &xs)]).unwrap();
        let got = sent_form.run(&[("x", &x), ("xs", &xs)]).unwrap();
        assert_eq!(got.len(), 2);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((&g.shape, &g.data), (&w.shape, &w.data), "{mode:?}");
        }
        // The inputs reached the outputs: not a graph of zeros.
        let sum = got[0].to_f32_vec().unwrap();
        assert_eq!(sum[0], 1.0);
        assert!(sum[2].is_infinite() && sum[5].is_nan());
    }
}

/// The plugin's own checks, called through the raw table as any host
/// could: a form it does not list, and bytes that are no graph.
#[test]
fn the_plugin_refuses_other_forms_and_bytes_that_are_no_graph() {
    let plugin = mlx();
    let table = plugin.raw_api().graph_forms;
    assert!(!table.is_null());
    // SAFETY: the plugin's static table, as the loader read it.
    let compile = unsafe { (*table).compile }.unwrap();
    let bytes = encode(&graph()).unwrap();
    let options = CompileOptions::mode(rlx_plugin_api::Mode::Lazy).to_raw();
    let call = |form: &str, bytes: &[u8]| {
        let mut exe = std::ptr::null_mut();
        // SAFETY: every argument is borrowed for the call; `exe` is
        // writable; the status is this plugin's, taken once.
        let r = unsafe {
            plugin.take_status(compile(
                rlx_plugin_api::RlxStr::from_str(form),
                bytes.as_ptr().cast(),
                bytes.len(),
                &options,
                &mut exe,
            ))
        };
        (r, exe)
    };
    let (r, exe) = call("rlx-ir 0.0.1 bincode v1", &bytes);
    assert_eq!(r.unwrap_err().code, StatusCode::Unsupported);
    assert!(exe.is_null());
    let form = this_rlx_ir_bincode();
    for bad in [
        &bytes[..bytes.len() / 2],
        &b"rlxmodel 1\nopset 1\n"[..],
        &[][..],
    ] {
        let (r, exe) = call(&form, bad);
        let e = r.unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument, "{e}");
        assert!(e.message.contains("cannot read the graph"), "{e}");
        assert!(exe.is_null());
    }
    // Through the host library: the plugin's refusal.
    let e = plugin
        .compile_form("another form", &bytes, &CompileOptions::default())
        .err()
        .unwrap();
    assert_eq!(e.code, StatusCode::Unsupported);
    assert!(e.message.contains("reads no graph form"), "{e}");
}

/// A host built from other rlx-ir sources under the same version (a
/// `[patch]`, a fork) names the form with another layout fingerprint: the
/// plugin refuses it saying what differs, and such a host sends text.
#[test]
fn a_form_in_another_layout_is_refused_saying_what_differs() {
    let plugin = mlx();
    let ours = this_rlx_ir_bincode();
    let fp = rlx_plugin_api::graph_forms::layout_fingerprint();
    assert!(ours.ends_with(fp), "{ours}");
    let other = rlx_plugin_api::graph_forms::rlx_ir_bincode(
        rlx_ir::rlxmodel::RLX_VERSION,
        "0123456789abcdef",
    );
    assert_ne!(other, ours);
    let bytes = encode(&graph()).unwrap();
    let e = plugin
        .compile_form(&other, &bytes, &CompileOptions::default())
        .err()
        .unwrap();
    assert_eq!(e.code, StatusCode::Unsupported);
    assert!(e.message.contains("0123456789abcdef"), "{e}");
    assert!(e.message.contains(&format!("it reads {ours:?}")), "{e}");
    assert!(e.message.contains("laid out otherwise"), "{e}");
}

/// A plugin that reads no form but text (the fixture plugin publishes no
/// table) gets text from `compile_graph`.
#[test]
fn a_plugin_without_forms_is_sent_text() {
    let plugin = fixture_plugin();
    assert!(plugin.graph_forms().is_empty());
    assert!(plugin.raw_api().graph_forms.is_null());
    let g = rlx_ir::rlxmodel::from_text(FIXTURE_GRAPH).unwrap();
    let mut exe = plugin
        .compile_graph(&g, &CompileOptions::default())
        .unwrap();
    let x = HostTensor::from_f32(vec![3], &[1.0, -2.0, 0.5]).unwrap();
    let y = exe.run(&[("x", &x)]).unwrap();
    assert_eq!(y[0].to_f32_vec().unwrap(), [2.0, -4.0, 1.0]);
}
