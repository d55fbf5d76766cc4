//! The bad-input matrix (issue #14): each malformed graph, tensor or call
//! is refused with its exact message (or, for values the ops define, such
//! as NaN or an empty dimension, computed through), in every mode, and the
//! plugin goes on working after each.
//!
//! References: NaN/Inf results are IEEE-754's (f64 in the test); the
//! out-of-range index rules are the documented ones of
//! `plugin-mlx/src/lower/index.rs` and the lowering table (rlx-cpu's), each
//! checked against values written out here.

use rlx_plugin_api::{DType, HostTensor, Mode, PluginError, RlxTensor, StatusCode};
use rlx_plugin_tests::parity::{mlx, MODES};

fn text(body: &str) -> String {
    format!("rlxmodel 1\nopset 1\n\ngraph @bad {{\n{body}\n}}\n")
}

fn compile_err(body: &str, mode: Mode) -> PluginError {
    mlx()
        .compile(&text(body), mode)
        .err()
        .unwrap_or_else(|| panic!("[{}] compiled:\n{body}", mode.name()))
}

/// Refused at compile in every mode with `code` and a message holding
/// every part of `parts`; then a sound graph still compiles and runs.
fn refused(body: &str, code: StatusCode, parts: &[&str]) {
    for mode in MODES {
        let e = compile_err(body, mode);
        assert_eq!(e.code, code, "[{}] {e}", mode.name());
        for p in parts {
            assert!(e.message.contains(p), "[{}] {p:?} not in: {e}", mode.name());
        }
    }
    still_works();
}

fn still_works() {
    let mut exe = mlx()
        .compile(
            &text("  %x = input : f32[2]\n  %1 = Activation(Exp) %x : f32[2]\n  return %1"),
            Mode::Lazy,
        )
        .unwrap();
    let x = f32s(&[2], &[0.0, 1.0]);
    let out = exe.run(&[("x", &x)]).unwrap()[0].to_f32_vec().unwrap();
    assert_eq!(out, vec![1.0, 1f32.exp()]);
}

fn f32s(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).unwrap()
}

const ADD: &str = "  %x = input : f32[2, 3]\n  %w = param : f32[2, 3]\n  \
%2 = Binary(Add) %x, %w : f32[2, 3]\n  return %2";

// ---- graph text ----

#[test]
fn a_forward_reference_is_refused() {
    refused(
        "  %x = input : f32[2]\n  %1 = Binary(Add) %x, %2 : f32[2]\n  \
         %2 = Activation(Exp) %x : f32[2]\n  return %1",
        StatusCode::InvalidArgument,
        &["cannot read the graph: rlxmodel: 6:24: %2 is not a value defined above"],
    );
}

/// The text names only values defined above, so a cycle is always caught
/// as a forward reference, at its first edge.
#[test]
fn a_cycle_is_refused() {
    refused(
        "  %x = input : f32[2]\n  %1 = Binary(Add) %x, %2 : f32[2]\n  \
         %2 = Binary(Add) %1, %x : f32[2]\n  return %2",
        StatusCode::InvalidArgument,
        &["cannot read the graph: rlxmodel: 6:24: %2 is not a value defined above"],
    );
}

#[test]
fn a_return_of_an_unknown_value_is_refused() {
    refused(
        "  %x = input : f32[2]\n  %1 = Activation(Exp) %x : f32[2]\n  return %7",
        StatusCode::InvalidArgument,
        &["cannot read the graph: rlxmodel: 7:10: %7 is not a value defined above"],
    );
}

#[test]
fn a_declared_shape_that_contradicts_the_op_is_refused() {
    refused(
        "  %x = input : f32[2, 3]\n  %w = input : f32[4, 5]\n  \
         %2 = MatMul %x, %w : f32[2, 5]\n  return %2",
        StatusCode::InvalidArgument,
        &[
            "node %2 (MatMul f32[2, 3], f32[4, 5] -> f32[2, 5]): rlx-ir's shape rule rejects it: \
             matmul K mismatch: 3 vs 4",
        ],
    );
}

// ---- axes, ranks, slices ----

#[test]
fn an_out_of_range_reduce_axis_is_refused() {
    refused(
        "  %x = input : f32[2, 3]\n  %1 = Reduce{op: Sum, axes: [5], keep_dim: false} %x : f32[2]\n  return %1",
        StatusCode::InvalidArgument,
        &["node %1 (Reduce f32[2, 3] -> f32[2]): Reduce axis 5 is out of range for rank 2"],
    );
}

#[test]
fn an_out_of_range_softmax_axis_is_refused() {
    refused(
        "  %x = input : f32[2, 3]\n  %1 = Softmax{axis: 9} %x : f32[2, 3]\n  return %1",
        StatusCode::InvalidArgument,
        &["node %1 (Softmax f32[2, 3] -> f32[2, 3]): axis 9 is out of range for rank 2"],
    );
}

#[test]
fn a_narrow_past_the_end_is_refused() {
    refused(
        "  %x = input : f32[4, 3]\n  %1 = Narrow{axis: 0, start: 3, len: 2} %x : f32[2, 3]\n  return %1",
        StatusCode::InvalidArgument,
        &["node %1 (Narrow f32[4, 3] -> f32[2, 3]): Narrow window [3, 5) exceeds axis 0 of extent 4"],
    );
}

#[test]
fn a_narrow_on_a_missing_axis_is_refused() {
    refused(
        "  %x = input : f32[4, 3]\n  %1 = Narrow{axis: 2, start: 0, len: 1} %x : f32[4, 3]\n  return %1",
        StatusCode::InvalidArgument,
        &["node %1 (Narrow f32[4, 3] -> f32[4, 3]): rlx-ir's shape rule rejects it: axis 2 >= rank 2"],
    );
}

#[test]
fn a_gather_on_a_missing_axis_is_refused() {
    refused(
        "  %t = input : f32[4, 3]\n  %i = input : i32[2]\n  \
         %2 = Gather{axis: 3} %t, %i : f32[2, 3]\n  return %2",
        StatusCode::InvalidArgument,
        &[
            "node %2 (Gather f32[4, 3], i32[2] -> f32[2, 3]): rlx-ir's shape rule rejects it: \
          gather: axis 3 >= rank 2",
        ],
    );
}

#[test]
fn a_rank_beyond_the_limit_is_refused() {
    let dims = vec!["1"; 65].join(", ");
    refused(
        &format!(
            "  %x = input : f32[{dims}]\n  %1 = Activation(Exp) %x : f32[{dims}]\n  return %1"
        ),
        StatusCode::InvalidArgument,
        &[
            "node %0",
            "rank 65 is more than the 64 dimensions a tensor may have",
        ],
    );
}

// ---- sizes past what MLX takes (plugin-mlx/src/bounds.rs) ----

#[test]
fn attributes_past_int32_are_refused_naming_the_attribute() {
    // 2^32 + 1 would wrap to 1 (and pass the element-count check).
    refused(
        "  %x = input : f32[1]\n  %1 = Reshape{new_shape: [4294967297]} %x : f32[1]\n  return %1",
        StatusCode::InvalidArgument,
        &[
            "node %1 (Reshape",
            "new_shape[0] = 4294967297 is outside [-2147483648, 2147483647]",
        ],
    );
    refused(
        "  %x = input : f32[1]\n  %1 = Expand{target_shape: [2147483648]} %x : f32[1]\n  return %1",
        StatusCode::InvalidArgument,
        &["node %1 (Expand", "target_shape[0] = 2147483648 is outside"],
    );
    refused(
        "  %x = input : f32[4, 3]\n  %1 = Narrow{axis: 18446744073709551615, start: 0, len: 1} %x : f32[1, 3]\n  return %1",
        StatusCode::InvalidArgument,
        &["node %1 (Narrow", "axis = 18446744073709551615 is outside"],
    );
}

/// rlx-ir's shape rule indexes a transpose's permutation unchecked: an
/// axis past the rank panics there, and the plugin refuses the node with
/// that panic's message (`bounds::check_declared`), in range of int32 as
/// the axis is.
#[test]
fn a_node_rlx_irs_shape_rule_panics_on_is_refused_with_its_message() {
    refused(
        "  %x = input : f32[2, 3]\n  %1 = Transpose{perm: [0, 2]} %x : f32[3, 2]\n  return %1",
        StatusCode::InvalidArgument,
        &[
            "node %1 (Transpose",
            "rlx-ir's shape rule fails on its attributes",
            "index out of bounds",
        ],
    );
}

/// Geometry derived from in-range attributes may pass int32: Im2Col's
/// padded extent, 2 + 2 * 2^30 here, with a stride that keeps the output
/// at 2 x 2 patches (the shape rlx-ir gives). The lowering computes it
/// wide, and the extent past int32 is refused (by the lowering's checked
/// conversion or by MLX's pad, which takes shapes as int32); in 32 bits
/// it wrapped (a debug build panicked).
#[test]
fn geometry_past_int32_from_in_range_attributes_is_refused() {
    let body = "  %x = input : f32[1, 1, 2, 2]\n  \
                %1 = Im2Col{kernel_size: [1, 1], stride: [2147483647, 2147483647], \
                padding: [1073741824, 1073741824], dilation: [1, 1]} %x : f32[4, 1]\n  return %1";
    let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    for mode in MODES {
        let e = match mlx().compile(&text(body), mode) {
            Err(e) => e,
            Ok(mut exe) => exe
                .run(&[("x", &x)])
                .expect_err("a padded extent past int32 ran"),
        };
        assert_ne!(e.code, StatusCode::Panic, "[{}] {e}", mode.name());
        assert!(
            e.message.contains("int32") || e.message.contains("32-bit"),
            "[{}] {e}",
            mode.name()
        );
    }
    still_works();
}

#[test]
fn shapes_past_the_bounds_are_refused() {
    refused(
        "  %x = input : f32[2147483648, 0]\n  %1 = Activation(Exp) %x : f32[2147483648, 0]\n  return %1",
        StatusCode::InvalidArgument,
        &[
            "node %0",
            "dimension 0 of its shape is 2147483648, more than the 2147483647",
        ],
    );
    // Past any device's memory first: reported as that.
    refused(
        "  %x = input : f32[1073741824, 1073741824, 1073741824]\n  \
         %1 = Activation(Exp) %x : f32[1073741824, 1073741824, 1073741824]\n  return %1",
        StatusCode::ResourceExhausted,
        &["node %0", "more than 2^64 bytes"],
    );
    refused(
        "  %x = input : f32[1]\n  %1 = Reshape{new_shape: [1073741824, 1073741824, 1073741824]} %x : f32[1]\n  return %1",
        StatusCode::InvalidArgument,
        &["new_shape multiplies to more than"],
    );
}

#[test]
fn a_minus_one_in_a_new_shape_is_in_bounds() {
    for mode in MODES {
        let mut exe = mlx()
            .compile(
                &text("  %x = input : f32[2, 3]\n  %1 = Reshape{new_shape: [-1]} %x : f32[6]\n  return %1"),
                mode,
            )
            .unwrap();
        let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let out = exe.run(&[("x", &x)]).unwrap()[0].to_f32_vec().unwrap();
        assert_eq!(out, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }
}

// ---- tensors against the graph ----

fn add_exe(mode: Mode) -> rlx_plugin_loader::PluginExecutable {
    mlx().compile(&text(ADD), mode).unwrap()
}

#[test]
fn shape_and_dtype_mismatches_name_the_tensor() {
    for mode in MODES {
        let mut exe = add_exe(mode);
        let e = exe.bind_param("w", &f32s(&[3, 2], &[0.0; 6])).unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument);
        assert!(
            e.message
                .contains("param \"w\" is f32[2, 3], got f32[3, 2]"),
            "{e}"
        );
        let h = HostTensor::new(DType::F16, vec![2, 3], vec![0u8; 12]).unwrap();
        let e = exe.bind_param("w", &h).unwrap_err();
        assert!(
            e.message
                .contains("param \"w\" is f32[2, 3], got f16[2, 3]"),
            "{e}"
        );
        exe.bind_param("w", &f32s(&[2, 3], &[1.0; 6])).unwrap();
        let e = exe.run(&[("x", &f32s(&[6], &[0.0; 6]))]).unwrap_err();
        assert!(
            e.message.contains("input \"x\" is f32[2, 3], got f32[6]"),
            "{e}"
        );
        let h = HostTensor::new(DType::I32, vec![2, 3], vec![0u8; 24]).unwrap();
        let e = exe.run(&[("x", &h)]).unwrap_err();
        assert!(
            e.message
                .contains("input \"x\" is f32[2, 3], got i32[2, 3]"),
            "{e}"
        );
        let e = exe
            .bind_param("nope", &f32s(&[2, 3], &[1.0; 6]))
            .unwrap_err();
        assert!(e.message.contains("nope"), "{e}");
        // And the executable still runs.
        let out = exe.run(&[("x", &f32s(&[2, 3], &[1.0; 6]))]).unwrap();
        assert_eq!(out[0].to_f32_vec().unwrap(), vec![2.0; 6]);
    }
}

#[test]
fn inputs_given_twice_missing_or_unknown_and_params_never_bound() {
    for mode in MODES {
        let mut exe = add_exe(mode);
        let x = f32s(&[2, 3], &[1.0; 6]);
        let e = exe.run(&[("x", &x)]).unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument);
        assert!(e.message.contains("param \"w\" is not bound"), "{e}");
        exe.bind_param("w", &f32s(&[2, 3], &[1.0; 6])).unwrap();
        // A param bound again replaces the first binding.
        exe.bind_param("w", &f32s(&[2, 3], &[5.0; 6])).unwrap();
        let e = exe.run(&[("x", &x), ("x", &x)]).unwrap_err();
        assert!(e.message.contains("input \"x\" is given twice"), "{e}");
        let e = exe.run(&[]).unwrap_err();
        assert!(e.message.contains("missing input \"x\""), "{e}");
        let e = exe.run(&[("x", &x), ("y", &x)]).unwrap_err();
        assert!(
            e.message.contains("the graph has no input named \"y\""),
            "{e}"
        );
        let out = exe.run(&[("x", &x)]).unwrap();
        assert_eq!(out[0].to_f32_vec().unwrap(), vec![6.0; 6]);
    }
}

#[test]
fn a_wrong_output_count_is_refused_and_no_slot_is_filled() {
    let exe = add_exe(Mode::Lazy);
    let mut exe = exe;
    exe.bind_param("w", &f32s(&[2, 3], &[1.0; 6])).unwrap();
    let x = f32s(&[2, 3], &[1.0; 6]);
    let borrowed = rlx_plugin_api::tensor::borrow_named(&[("x", &x)]);
    let plugin = mlx();
    for n in [0usize, 2] {
        let mut slots = vec![RlxTensor::empty(); n.max(1)];
        // SAFETY: the handle is live; inputs and slots outlive the call.
        let e = unsafe {
            plugin.take_status((plugin.raw_api().executable_run.unwrap())(
                exe.raw_handle(),
                borrowed.named.as_ptr(),
                borrowed.named.len(),
                slots.as_mut_ptr(),
                n,
            ))
        }
        .unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument);
        assert!(
            e.message.contains(&format!(
                "the executable has 1 outputs but the caller passed {n} slots"
            )),
            "{e}"
        );
        assert!(
            slots.iter().all(|s| s.dl.data.is_null()),
            "a slot was filled on error"
        );
    }
    assert_eq!(
        exe.run(&[("x", &x)]).unwrap()[0].to_f32_vec().unwrap(),
        vec![2.0; 6]
    );
}

// ---- values the ops define ----

/// NaN and infinities go through exp, a product and a sum. The reference
/// is rlx's `Exp`, which clamps its argument to [-87.3, 88.7] first (so
/// exp(inf) = 3.3e38 and exp(-inf) = 1.2e-38, never inf or 0; rlx-cpu's
/// `exp_poly`), computed in f64 and rounded to f32, then IEEE-754 f32
/// products (3.3e38 * 2 overflows to inf, 1 * inf is inf, NaN stays NaN)
/// and a sum that is NaN.
#[test]
fn nan_and_inf_are_computed_through() {
    let body = "  %x = input : f32[6]\n  %y = input : f32[6]\n  \
                %2 = Activation(Exp) %x : f32[6]\n  %3 = Binary(Mul) %2, %y : f32[6]\n  \
                %4 = Reduce{op: Sum, axes: [0], keep_dim: false} %3 : f32[]\n  return %2, %3, %4";
    let x = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        1.0,
        f32::INFINITY,
    ];
    let y = [1.0, 2.0, 3.0, f32::INFINITY, f32::NAN, 0.0];
    let exp: Vec<f32> = x
        .iter()
        .map(|a| (*a as f64).clamp(-87.3, 88.7).exp() as f32)
        .collect();
    let prod: Vec<f32> = exp.iter().zip(&y).map(|(e, b)| e * b).collect();
    assert!(exp[1].is_finite() && prod[1].is_infinite() && prod[3].is_infinite());
    assert!(prod[0].is_nan() && prod[4].is_nan() && prod[5] == 0.0);
    let close = |g: f32, w: f32| {
        // 1e-5 relative: MLX exp and the (e^(x/2))^2 form at the top of the range.
        (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-5 * w.abs()
    };
    for mode in MODES {
        let mut exe = mlx().compile(&text(body), mode).unwrap();
        let out = exe
            .run(&[("x", &f32s(&[6], &x)), ("y", &f32s(&[6], &y))])
            .unwrap();
        for (k, want) in [&exp, &prod].into_iter().enumerate() {
            let got = out[k].to_f32_vec().unwrap();
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    close(*g, *w),
                    "[{}] output {k} [{i}]: {g} vs {w}",
                    mode.name()
                );
            }
        }
        let s = out[2].to_f32_vec().unwrap()[0];
        assert!(s.is_nan(), "[{}] sum {s}, want NaN", mode.name());
    }
}

#[test]
fn zero_size_dims_are_computed_through() {
    let body = "  %e = input : f32[0, 3]\n  %x = input : f32[2, 3]\n  \
                %2 = Activation(Exp) %e : f32[0, 3]\n  %3 = Concat{axis: 0} %2, %x : f32[2, 3]\n  \
                return %2, %3";
    let x = [0.5, -1.0, 2.0, 3.0, -4.0, 0.25];
    for mode in MODES {
        let mut exe = mlx().compile(&text(body), mode).unwrap();
        let out = exe
            .run(&[("e", &f32s(&[0, 3], &[])), ("x", &f32s(&[2, 3], &x))])
            .unwrap();
        assert_eq!(out[0].shape, vec![0, 3], "[{}]", mode.name());
        assert!(out[0].to_f32_vec().unwrap().is_empty());
        assert_eq!(
            out[1].to_f32_vec().unwrap(),
            x.to_vec(),
            "[{}]",
            mode.name()
        );
    }
}

#[test]
fn out_of_range_indices_follow_the_documented_rules() {
    // GatherElements: an index wraps once when negative, then clamps.
    let body = "  %d = input : f32[4]\n  %i = input : i32[5]\n  \
                %2 = GatherElements{axis: 0} %d, %i : f32[5]\n  return %2";
    let d = [10.0, 20.0, 30.0, 40.0];
    let idx: Vec<u8> = [0i32, 3, 9, -1, -9]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let i = HostTensor::new(DType::I32, vec![5], idx).unwrap();
    for mode in MODES {
        let mut exe = mlx().compile(&text(body), mode).unwrap();
        let out = exe.run(&[("d", &f32s(&[4], &d)), ("i", &i)]).unwrap();
        // 0, 3, 9 -> 3, -1 -> 3, -9 -> -5 -> 0.
        assert_eq!(
            out[0].to_f32_vec().unwrap(),
            vec![10.0, 40.0, 40.0, 40.0, 10.0],
            "[{}]",
            mode.name()
        );
    }
    // ScatterAdd: an index past the output's extent fails the run.
    let body = "  %u = input : f32[2, 3]\n  %i = input : i32[2]\n  \
                %2 = ScatterAdd{axis: 0} %u, %i : f32[4, 3]\n  return %2";
    let u = f32s(&[2, 3], &[1.0; 6]);
    let bad: Vec<u8> = [1i32, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
    let bad = HostTensor::new(DType::I32, vec![2], bad).unwrap();
    for mode in MODES {
        let mut exe = mlx().compile(&text(body), mode).unwrap();
        let e = exe.run(&[("u", &u), ("i", &bad)]).unwrap_err();
        assert!(
            e.message.contains(
                "an index of ScatterAdd %2 is past its output's extent along the scatter axis \
                 (rlx-cpu asserts on it) (MLX reported: "
            ),
            "[{}] {e}",
            mode.name()
        );
    }
    still_works();
}
