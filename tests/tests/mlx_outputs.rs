//! Outputs handed over through the ABI stay valid and unchanged until the
//! host releases them: after later runs of the same executable and after
//! the executable is destroyed. On the CPU the plugin lends MLX's own
//! buffers (no copy), so this is what keeps that honest; views it cannot
//! lend (a transpose) are copied out. Reference: `relu(x · w + b)` in f64
//! (tests/src/relu_affine.rs), exact to f32 rounding.

use rlx_plugin_api::{HostTensor, RlxTensor};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_plugin_tests::relu_affine::{reference, values};

const GRAPH: &str = "rlxmodel 1\nopset 1\n\ngraph @g {\n  %x = input : f32[4, 8]\n  \
%w = param : f32[8, 3]\n  %2 = MatMul %x, %w : f32[4, 3]\n  %b = input : f32[4, 3]\n  \
%4 = Binary(Add) %2, %b : f32[4, 3]\n  %5 = Activation(Relu) %4 : f32[4, 3]\n  \
%6 = Transpose{perm: [1, 0]} %5 : f32[3, 4]\n  return %5, %6, %x\n}\n";

fn transposed(y: &[f32]) -> Vec<f32> {
    (0..12).map(|k| y[(k % 4) * 3 + k / 4]).collect()
}

/// The param every test binds (f32[8, 3]).
fn w() -> Vec<f32> {
    values(24, 1, 2)
}

/// `GRAPH` compiled in `mode` with `w` bound.
fn compiled(
    plugin: &std::sync::Arc<rlx_plugin_loader::LoadedPlugin>,
    mode: rlx_plugin_api::Mode,
) -> rlx_plugin_loader::PluginExecutable {
    let mut exe = plugin.compile(GRAPH, mode).expect("compile");
    exe.bind_param("w", &HostTensor::from_f32(vec![8, 3], &w()).unwrap())
        .unwrap();
    exe
}

#[test]
fn outputs_outlive_later_runs_and_the_executable() {
    let plugin = mlx();
    let api = plugin.raw_api();
    for mode in MODES {
        let exe = compiled(&plugin, mode);
        let w = w();
        let mut kept: Vec<(Vec<f32>, Vec<f32>, [RlxTensor; 3])> = Vec::new();
        for i in 0..3 {
            let x = values(32, 3, i);
            let b = values(12, 4, i);
            let xt = HostTensor::from_f32(vec![4, 8], &x).unwrap();
            let bt = HostTensor::from_f32(vec![4, 3], &b).unwrap();
            let borrowed = rlx_plugin_api::tensor::borrow_named(&[("x", &xt), ("b", &bt)]);
            let mut slots = [RlxTensor::empty(); 3];
            // SAFETY: the executable is live and used by this thread only;
            // the inputs and the slots outlive the call.
            unsafe {
                plugin.take_status((api.executable_run.unwrap())(
                    exe.raw_handle(),
                    borrowed.named.as_ptr(),
                    borrowed.named.len(),
                    slots.as_mut_ptr(),
                    3,
                ))
            }
            .unwrap_or_else(|e| panic!("{mode:?} run {i}: {e}"));
            kept.push((x, b, slots));
        }
        drop(exe);
        for (i, (x, b, slots)) in kept.into_iter().enumerate() {
            let want = reference(&x, &w, &b);
            let [y, yt, xo] = slots.map(|s| {
                // SAFETY: each slot is an owned output of a successful run,
                // read and released once here.
                let t = unsafe { HostTensor::take_raw(s) }.expect("a readable output");
                t.to_f32_vec().unwrap()
            });
            assert_eq!(y, want, "{mode:?} run {i}: relu(x·w + b)");
            assert_eq!(yt, transposed(&want), "{mode:?} run {i}: its transpose");
            assert_eq!(xo, x, "{mode:?} run {i}: the input returned as it came");
        }
    }
}

/// One raw `executable_run_into` call with `x`, `b` and the given slots;
/// the status as a result.
fn run_into_raw(
    plugin: &rlx_plugin_loader::LoadedPlugin,
    exe: &mut rlx_plugin_loader::PluginExecutable,
    x: &HostTensor,
    b: &HostTensor,
    slots: &mut [RlxTensor; 3],
) -> rlx_plugin_api::PluginResult<()> {
    let api = plugin.raw_api();
    let borrowed = rlx_plugin_api::tensor::borrow_named(&[("x", x), ("b", b)]);
    // SAFETY: the executable is live and used by this thread only; the
    // inputs, the slots and the memory they lend outlive the call.
    unsafe {
        plugin.take_status((api.executable_run_into.expect("a 1.8 plugin"))(
            exe.raw_handle(),
            borrowed.named.as_ptr(),
            borrowed.named.len(),
            slots.as_mut_ptr(),
            3,
        ))
    }
}

/// A lent, compact f32 slot over `buf` with shape `dims`.
fn lent(buf: &mut [f32], dims: &mut [i64]) -> RlxTensor {
    RlxTensor::compact(
        rlx_plugin_api::DType::F32,
        buf.as_mut_ptr().cast(),
        dims.as_mut_ptr(),
        dims.len(),
        rlx_plugin_api::tensor::ownership::BORROWED,
    )
}

/// Outputs written into memory the caller lends, in every mode, beside a slot
/// left to receive an owned output; the lent slots are left as they were.
/// Reference as above (exact).
#[test]
fn run_into_writes_lent_buffers_and_hands_over_the_rest() {
    let plugin = mlx();
    assert!(plugin.has_run_into());
    for mode in MODES {
        let mut exe = compiled(&plugin, mode);
        let w = w();
        for i in 0..3 {
            let x = values(32, 3, i);
            let b = values(12, 4, i);
            let xt = HostTensor::from_f32(vec![4, 8], &x).unwrap();
            let bt = HostTensor::from_f32(vec![4, 3], &b).unwrap();
            // NaN-filled: an element the plugin did not write shows.
            let (mut y, mut xo) = (vec![f32::NAN; 12], vec![f32::NAN; 32]);
            let (mut dy, mut dx) = ([4i64, 3], [4i64, 8]);
            let mut slots = [
                lent(&mut y, &mut dy),
                RlxTensor::empty(),
                lent(&mut xo, &mut dx),
            ];
            run_into_raw(&plugin, &mut exe, &xt, &bt, &mut slots)
                .unwrap_or_else(|e| panic!("{mode:?} run {i}: {e}"));
            assert_eq!(slots[0].dl.data, y.as_mut_ptr().cast());
            assert_eq!(
                slots[0].ownership,
                rlx_plugin_api::tensor::ownership::BORROWED
            );
            // SAFETY: slot 1 is an owned output of a successful run, read
            // and released once here.
            let yt = unsafe { HostTensor::take_raw(slots[1]) }.expect("an owned output");
            let want = reference(&x, &w, &b);
            assert_eq!(y, want, "{mode:?} run {i}: relu(x·w + b), written in place");
            assert_eq!(
                yt.to_f32_vec().unwrap(),
                transposed(&want),
                "{mode:?} run {i}"
            );
            assert_eq!(xo, x, "{mode:?} run {i}: the input, written in place");
        }
    }
}

/// Lent slots the plugin must not write are refused with INVALID_ARGUMENT
/// before anything runs, and a failed call leaves no owned tensor.
#[test]
fn run_into_refuses_bad_lent_buffers() {
    use rlx_plugin_api::StatusCode;
    let plugin = mlx();
    let mut exe = compiled(&plugin, rlx_plugin_api::Mode::Lazy);
    let x = values(32, 3, 0);
    let xt = HostTensor::from_f32(vec![4, 8], &x).unwrap();
    let bt = HostTensor::from_f32(vec![4, 3], &values(12, 4, 0)).unwrap();
    let mut big = vec![0f32; 64];
    let (mut d43, mut d34, mut d48, mut d12) = ([4i64, 3], [3i64, 4], [4i64, 8], [12i64, 1]);
    let mut expect = |what: &str, mut slots: [RlxTensor; 3], needle: &str| {
        let e = run_into_raw(&plugin, &mut exe, &xt, &bt, &mut slots).unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument, "{what}: {e}");
        assert!(e.message.contains(needle), "{what}: {e}");
        assert!(
            slots[1].dl.data.is_null(),
            "{what}: an owned output was left behind"
        );
    };
    let (a, rest) = big.split_at_mut(12);
    // The output is f32[4, 3]: a buffer of another shape is refused.
    expect(
        "wrong shape",
        [lent(a, &mut d12), RlxTensor::empty(), RlxTensor::empty()],
        "but the caller's buffer for it is f32[12, 1]",
    );
    // A lent buffer is the caller's: OWNED is not a loan.
    let mut owned = lent(a, &mut d43);
    owned.ownership = rlx_plugin_api::tensor::ownership::OWNED;
    expect(
        "owned",
        [owned, RlxTensor::empty(), RlxTensor::empty()],
        "BORROWED",
    );
    // Strided (column-major) memory is refused.
    let mut strides = [1i64, 4];
    let mut strided = lent(a, &mut d43);
    strided.dl.strides = strides.as_mut_ptr();
    expect(
        "strided",
        [strided, RlxTensor::empty(), RlxTensor::empty()],
        "strided",
    );
    // Two slots over the same memory, and a slot over an input.
    let (b, _) = rest.split_at_mut(12);
    let over = lent(b, &mut d34);
    expect(
        "overlap",
        [lent(b, &mut d43), RlxTensor::empty(), over],
        "lend overlapping memory",
    );
    let input = RlxTensor::compact(
        rlx_plugin_api::DType::F32,
        xt.data.as_ptr() as *mut _,
        d48.as_mut_ptr(),
        2,
        rlx_plugin_api::tensor::ownership::BORROWED,
    );
    expect(
        "over an input",
        [RlxTensor::empty(), RlxTensor::empty(), input],
        "that input \"x\" is read from",
    );
}

/// Through the host library: a buffer whose size does not match the
/// signature is refused before the plugin is called.
#[test]
fn run_refs_into_checks_buffer_sizes_against_the_signature() {
    let plugin = mlx();
    let mut exe = compiled(&plugin, rlx_plugin_api::Mode::Lazy);
    let xt = HostTensor::from_f32(vec![4, 8], &values(32, 3, 0)).unwrap();
    let bt = HostTensor::from_f32(vec![4, 3], &values(12, 4, 0)).unwrap();
    let mut short = [0u8; 44];
    let e = exe
        .run_refs_into(
            &[("x", (&xt).into()), ("b", (&bt).into())],
            &mut [Some(&mut short[..]), None, None],
            |t| t.to_compact_bytes(),
        )
        .unwrap_err();
    assert_eq!(e.code, rlx_plugin_api::StatusCode::InvalidArgument);
    assert!(
        e.message.contains("has 44 bytes; f32[4, 3] needs 48"),
        "{e}"
    );
}

/// A lent output over the memory of a strided input (here `x` given
/// transposed, column-major in its buffer) is refused too: the overlap test
/// covers every byte an input may be read from, not only compact ones.
#[test]
fn run_into_refuses_a_loan_over_a_strided_input() {
    use rlx_plugin_api::tensor::{ownership, RlxNamedTensor};
    let plugin = mlx();
    let exe = compiled(&plugin, rlx_plugin_api::Mode::Lazy);
    // x[4, 8] stored column-major: element (r, c) at c * 4 + r.
    let mut xt = values(32, 3, 0);
    let mut b = values(12, 4, 0);
    let (mut dx, mut sx, mut db) = ([4i64, 8], [1i64, 4], [4i64, 3]);
    let mut x_desc = RlxTensor::compact(
        rlx_plugin_api::DType::F32,
        xt.as_mut_ptr().cast(),
        dx.as_mut_ptr(),
        2,
        ownership::BORROWED,
    );
    x_desc.dl.strides = sx.as_mut_ptr();
    let b_desc = RlxTensor::compact(
        rlx_plugin_api::DType::F32,
        b.as_mut_ptr().cast(),
        db.as_mut_ptr(),
        2,
        ownership::BORROWED,
    );
    let named = [("x", x_desc), ("b", b_desc)].map(|(n, t)| RlxNamedTensor {
        struct_size: std::mem::size_of::<RlxNamedTensor>(),
        name: rlx_plugin_api::RlxStr::from_str(n),
        tensor: t,
    });
    // Output 2 (x, f32[4, 8]) lent over x's own buffer.
    let mut d48 = [4i64, 8];
    let over = RlxTensor::compact(
        rlx_plugin_api::DType::F32,
        xt.as_mut_ptr().cast(),
        d48.as_mut_ptr(),
        2,
        ownership::BORROWED,
    );
    let mut slots = [RlxTensor::empty(), RlxTensor::empty(), over];
    let api = plugin.raw_api();
    // SAFETY: the executable is live and used by this thread only; the
    // descriptors and their memory outlive the call.
    let e = unsafe {
        plugin.take_status((api.executable_run_into.unwrap())(
            exe.raw_handle(),
            named.as_ptr(),
            2,
            slots.as_mut_ptr(),
            3,
        ))
    }
    .unwrap_err();
    assert_eq!(e.code, rlx_plugin_api::StatusCode::InvalidArgument, "{e}");
    assert!(e.message.contains("that input \"x\" is read from"), "{e}");
    assert!(slots[0].dl.data.is_null() && slots[1].dl.data.is_null());
}

/// The host adapter (`PluginGraph`, what `Session` runs) with output
/// buffers lent and not: f32 `run` and typed `run_typed` give the same
/// values, and those of the f64 reference. The default lends only off
/// the CPU, so this is what runs the lending path on a machine without a
/// GPU, through the MLX plugin's `executable_run_into` (tests/c_plugin.rs
/// runs it against C builds without one, where the host copies into the
/// lent buffer).
#[test]
fn the_host_adapter_gives_the_same_outputs_with_and_without_lent_buffers() {
    use rlx_plugin_host::backend::PluginGraph;
    use rlx_runtime::ExecutableGraph;
    let w = w();
    let x = values(32, 3, 0);
    let b = values(12, 4, 0);
    let want = reference(&x, &w, &b);
    for mode in MODES {
        let plugin = mlx();
        for lend in [false, true] {
            let exe = plugin.compile(GRAPH, mode).expect("compile");
            let mut g = PluginGraph::new(exe, "mlx".into()).with_lent_outputs(lend);
            g.set_param("w", &w);
            let out = g.run(&[("x", &x), ("b", &b)]);
            assert_eq!(out[0], want, "{mode:?} lend {lend}: relu(x·w + b)");
            assert_eq!(out[1], transposed(&want), "{mode:?} lend {lend}");
            assert_eq!(out[2], x, "{mode:?} lend {lend}");
            let xb = rlx_plugin_api::convert::f32_to_le(&x);
            let bb = rlx_plugin_api::convert::f32_to_le(&b);
            let typed = g.run_typed(&[
                ("x", &xb[..], rlx_ir::DType::F32),
                ("b", &bb[..], rlx_ir::DType::F32),
            ]);
            assert_eq!(typed.len(), 3);
            assert_eq!(typed[0].1, rlx_ir::DType::F32);
            assert_eq!(
                rlx_plugin_api::convert::f32_from_le(&typed[0].0),
                want,
                "{mode:?} lend {lend}: run_typed"
            );
            assert_eq!(rlx_plugin_api::convert::f32_from_le(&typed[2].0), x);
        }
    }
}
