//! The MLX plugin's executable state (docs/ABI.md §20-§22) through the host
//! library: states bound, read, fed and listed; clones and shared params;
//! submitted runs; and every misuse the ABI names, each a status saying what
//! was wrong. References are the values the tests write in, computed on the
//! host (additions and products of small integers, exact in f32).

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_api::{DType, Feed, HostTensor, HostTensorRef, Role, RowFeed, StatusCode};
use rlx_plugin_loader::{LoadedPlugin, OutputDest, PluginExecutable};
use rlx_plugin_tests::parity::{mlx, MODES};
use std::sync::Arc;

fn text(g: &Graph) -> String {
    rlx_ir::rlxmodel::to_text(g).expect("graph text")
}

/// `next = x + s` (output 0, fed back into `s`) and `y = next * w`
/// (output 1): a counter whose state is the running sum.
fn counter() -> String {
    let s = Shape::new(&[2, 3], IrDType::F32);
    let mut g = Graph::new("counter");
    let x = g.input("x", s.clone());
    let st = g.input("s", s.clone());
    let w = g.param("w", s);
    let next = g.add(x, st);
    let y = g.mul(next, w);
    g.set_outputs(vec![next, y]);
    text(&g)
}

/// A cache `k` of 4 rows of 2 that a step reads (output 1: the sum of
/// its rows) and extends by one row (output 0: `2 t`, fed `ROWS`).
fn kv_step() -> String {
    let mut g = Graph::new("kv");
    let k = g.input("k", Shape::new(&[1, 4, 2], IrDType::F32));
    let t = g.input("t", Shape::new(&[1, 1, 2], IrDType::F32));
    let two = g.constant(2.0, IrDType::F32);
    let row = g.mul(t, two);
    let total = g.sum(k, vec![1], false);
    g.set_outputs(vec![row, total]);
    text(&g)
}

fn f32s(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).unwrap()
}

fn run(exe: &mut PluginExecutable, inputs: &[(&str, &HostTensor)]) -> Vec<Vec<f32>> {
    exe.run(inputs)
        .unwrap()
        .iter()
        .map(|t| t.to_f32_vec().unwrap())
        .collect()
}

fn read_state(exe: &PluginExecutable, name: &str, first: usize, n: usize) -> Vec<f32> {
    let mut buf = vec![0u8; n * 4];
    exe.state_read_into(name, first, DType::F32, &mut buf)
        .unwrap();
    rlx_plugin_api::convert::bytes_to_f32(DType::F32, &buf).unwrap()
}

/// The error's code and a piece of its message.
fn fails<T: std::fmt::Debug>(r: rlx_plugin_api::PluginResult<T>, code: StatusCode, has: &str) {
    let e = r.expect_err("an error");
    assert_eq!(e.code, code, "{e}");
    assert!(
        e.message.contains(has),
        "{:?} does not say {has:?}",
        e.message
    );
}

fn counter_exe(plugin: &Arc<LoadedPlugin>, mode: rlx_plugin_api::Mode) -> PluginExecutable {
    let mut exe = plugin.compile(&counter(), mode).unwrap();
    exe.bind_param("w", &f32s(&[2, 3], &[1., 2., 3., 4., 5., 6.]))
        .unwrap();
    exe
}

#[test]
fn a_replace_fed_state_is_the_running_sum_and_never_crosses_back() {
    let plugin = mlx();
    assert!(plugin.offers().state && plugin.offers().row_feeds);
    for mode in MODES {
        let mut exe = counter_exe(&plugin, mode);
        let zero = f32s(&[2, 3], &[0.0; 6]);
        exe.state_bind("s", HostTensorRef::from(&zero)).unwrap();
        exe.state_set_feed("s", Feed::Replace(0)).unwrap();
        let list = exe.state_list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].role, list[0].name.as_str()), (Role::State, "s"));
        assert_eq!(list[0].shape, vec![Some(2), Some(3)]);
        let x = f32s(&[2, 3], &[1., 1., 1., 2., 2., 2.]);
        for step in 1..=4 {
            let out = run(&mut exe, &[("x", &x)]);
            let want: Vec<f32> = [1., 1., 1., 2., 2., 2.]
                .iter()
                .map(|v| v * step as f32)
                .collect();
            assert_eq!(out[0], want, "{mode:?} step {step}");
            assert_eq!(
                read_state(&exe, "s", 0, 6),
                want,
                "{mode:?} step {step}: state"
            );
        }
        // A given input overrides the state for that run; the feed then
        // replaces the state with that run's output.
        let ten = f32s(&[2, 3], &[10.0; 6]);
        let out = run(&mut exe, &[("x", &x), ("s", &ten)]);
        assert_eq!(
            out[0],
            vec![11., 11., 11., 12., 12., 12.],
            "{mode:?} override"
        );
        // A part of the state, and the last run's output 1 by element range.
        assert_eq!(read_state(&exe, "s", 3, 2), vec![12., 12.], "{mode:?}");
        let mut buf = vec![0u8; 8];
        exe.output_read_into(1, 4, DType::F32, &mut buf).unwrap();
        assert_eq!(
            rlx_plugin_api::convert::bytes_to_f32(DType::F32, &buf).unwrap(),
            vec![12.0 * 5.0, 12.0 * 6.0],
            "{mode:?} output 1 elements 4..6"
        );
        // Unbound, the input is the caller's again.
        exe.state_unbind("s").unwrap();
        fails(
            exe.run(&[("x", &x)]),
            StatusCode::InvalidArgument,
            "missing input \"s\"",
        );
        assert!(exe.state_list().unwrap().is_empty());
    }
}

#[test]
fn row_feeds_grow_a_cache_on_the_device() {
    let plugin = mlx();
    for mode in MODES {
        let mut exe = plugin.compile(&kv_step(), mode).unwrap();
        exe.state_bind("k", HostTensorRef::from(&f32s(&[1, 4, 2], &[0.0; 8])))
            .unwrap();
        exe.state_set_feed("k", Feed::Rows(0)).unwrap();
        let mut want = vec![0.0f32; 8];
        for p in 0..4 {
            let t = [p as f32 + 1.0, -(p as f32)];
            let out = run(&mut exe, &[("t", &f32s(&[1, 1, 2], &t))]);
            // The step read the cache as it was before its row.
            let sums = [
                want.iter().step_by(2).sum::<f32>(),
                want.iter().skip(1).step_by(2).sum::<f32>(),
            ];
            assert_eq!(out[1], sums, "{mode:?} step {p}: the sum of the cache");
            exe.state_feed_rows(None, &RowFeed::rows(2, 0, p, 1))
                .unwrap();
            want[p * 2] = 2.0 * t[0];
            want[p * 2 + 1] = 2.0 * t[1];
            assert_eq!(read_state(&exe, "k", 0, 8), want, "{mode:?} step {p}");
        }
        // Row 4 is past the cache: refused, and nothing is written.
        fails(
            exe.state_feed_rows(None, &RowFeed::rows(2, 0, 4, 1)),
            StatusCode::InvalidArgument,
            "state rows 4..5",
        );
        fails(
            exe.state_feed_rows(None, &RowFeed::rows(2, 1, 0, 1)),
            StatusCode::InvalidArgument,
            "output rows 1..2",
        );
        assert_eq!(read_state(&exe, "k", 0, 8), want, "{mode:?} after refusals");
    }
}

#[test]
fn batch_major_and_ragged_row_feeds() {
    // new [3, 1, 2] into past [3, 4, 2]: every batch at row 1, then each
    // at its own row.
    let mut g = Graph::new("batched");
    let k = g.input("k", Shape::new(&[3, 4, 2], IrDType::F32));
    let t = g.input("t", Shape::new(&[3, 1, 2], IrDType::F32));
    let total = g.sum(k, vec![1], false);
    g.set_outputs(vec![t, total]);
    let plugin = mlx();
    let mut exe = plugin
        .compile(&text(&g), rlx_plugin_api::Mode::Lazy)
        .unwrap();
    exe.state_bind("k", HostTensorRef::from(&f32s(&[3, 4, 2], &[0.0; 24])))
        .unwrap();
    exe.state_set_feed("k", Feed::Rows(0)).unwrap();
    let new: Vec<f32> = (1..=6).map(|v| v as f32).collect();
    run(&mut exe, &[("t", &f32s(&[3, 1, 2], &new))]);
    let batch_major = RowFeed {
        batch: 3,
        src_batch_rows: 1,
        dst_batch_rows: 4,
        ..RowFeed::rows(2, 0, 1, 1)
    };
    exe.state_feed_rows(Some("k"), &batch_major).unwrap();
    let mut want = vec![0.0f32; 24];
    for b in 0..3 {
        want[b * 8 + 2..b * 8 + 4].copy_from_slice(&new[b * 2..b * 2 + 2]);
    }
    assert_eq!(read_state(&exe, "k", 0, 24), want);
    let ragged = RowFeed {
        dst_rows: Some(vec![0, 3, 2]),
        ..batch_major
    };
    exe.state_feed_rows(None, &ragged).unwrap();
    for (b, r) in [0usize, 3, 2].iter().enumerate() {
        want[b * 8 + r * 2..b * 8 + r * 2 + 2].copy_from_slice(&new[b * 2..b * 2 + 2]);
    }
    assert_eq!(read_state(&exe, "k", 0, 24), want);
}

#[test]
fn every_misuse_is_a_status_naming_what_was_wrong() {
    let plugin = mlx();
    let mut exe = counter_exe(&plugin, rlx_plugin_api::Mode::Lazy);
    let ok = f32s(&[2, 3], &[0.0; 6]);
    fails(
        exe.state_bind("nope", HostTensorRef::from(&ok)),
        StatusCode::NotFound,
        "no input named \"nope\"",
    );
    fails(
        exe.state_bind("s", HostTensorRef::from(&f32s(&[3, 2], &[0.0; 6]))),
        StatusCode::InvalidArgument,
        "state \"s\" is f32[2, 3]",
    );
    let as_i32 = HostTensor::new(DType::I32, vec![2, 3], vec![0; 24]).unwrap();
    fails(
        exe.state_bind("s", HostTensorRef::from(&as_i32)),
        StatusCode::InvalidArgument,
        "got i32",
    );
    fails(
        exe.state_unbind("s"),
        StatusCode::NotFound,
        "no state is called \"s\"",
    );
    fails(
        exe.state_set_feed("s", Feed::Replace(0)),
        StatusCode::NotFound,
        "states: none",
    );
    exe.state_bind("s", HostTensorRef::from(&ok)).unwrap();
    fails(
        exe.state_set_feed("s", Feed::Replace(7)),
        StatusCode::InvalidArgument,
        "output 7",
    );
    // Reads before any run, and of the wrong dtype.
    let mut buf = vec![0u8; 8];
    fails(
        exe.output_read_into(0, 0, DType::F32, &mut buf),
        StatusCode::InvalidArgument,
        "no run has completed",
    );
    fails(
        exe.state_read_into("s", 0, DType::I32, &mut buf),
        StatusCode::InvalidArgument,
        "state \"s\" is f32",
    );
    fails(
        exe.state_read_into("s", 5, DType::F32, &mut buf),
        StatusCode::InvalidArgument,
        "elements 5..7 are out of range",
    );
    fails(
        exe.state_feed_rows(None, &RowFeed::rows(3, 0, 0, 1)),
        StatusCode::InvalidArgument,
        "no state is fed rows",
    );
    // A feed from an output of another shape.
    let mut kv = plugin
        .compile(&kv_step(), rlx_plugin_api::Mode::Lazy)
        .unwrap();
    kv.state_bind("k", HostTensorRef::from(&f32s(&[1, 4, 2], &[0.0; 8])))
        .unwrap();
    fails(
        kv.state_set_feed("k", Feed::Replace(0)),
        StatusCode::InvalidArgument,
        "a replace feed needs an output of the state's dtype and shape",
    );
    kv.state_set_feed("k", Feed::Rows(0)).unwrap();
    fails(
        kv.state_feed_rows(None, &RowFeed::rows(2, 0, 0, 1)),
        StatusCode::InvalidArgument,
        "no run has completed yet",
    );
    // A wait with nothing submitted.
    fails(
        exe.wait_discard(),
        StatusCode::InvalidArgument,
        "no run is submitted",
    );
    // Active extents between 1 and the upper extent, or none.
    fails(
        exe.set_active_extent(Some((5, 4))),
        StatusCode::InvalidArgument,
        "active extent 5 of 4",
    );
    fails(
        exe.set_active_extent(Some((0, 4))),
        StatusCode::InvalidArgument,
        "active extent 0 of 4",
    );
    exe.set_active_extent(None).unwrap();
    // Param ranges: whole elements inside a bound param.
    fails(
        exe.bind_param_range("w", 2, &[0; 4]),
        StatusCode::InvalidArgument,
        "not whole 4-byte elements",
    );
    fails(
        exe.bind_param_range("w", 20, &[0; 8]),
        StatusCode::InvalidArgument,
        "bytes 20..28 are past its end",
    );
    fails(
        exe.bind_param_range("nope", 0, &[0; 4]),
        StatusCode::NotFound,
        "no param",
    );
    fails(
        exe.set_rng(99, 1),
        StatusCode::Unsupported,
        "unknown RNG policy 99",
    );
    // Shared params need the same layout; across plugins, the host refuses.
    let mut other = plugin
        .compile(&kv_step(), rlx_plugin_api::Mode::Lazy)
        .unwrap();
    fails(
        exe.share_params_from(&other),
        StatusCode::InvalidArgument,
        "src has no param \"w\"",
    );
    let unbound = plugin
        .compile(&counter(), rlx_plugin_api::Mode::Lazy)
        .unwrap();
    fails(
        exe.share_params_from(&unbound),
        StatusCode::InvalidArgument,
        "param \"w\" is not bound in src",
    );
    // A graph without params shares none, successfully.
    assert_eq!(other.share_params_from(&exe).unwrap(), 0);
}

#[test]
fn a_destroyed_or_foreign_executable_is_refused_not_dereferenced() {
    let plugin = mlx();
    let api = plugin.raw_api();
    let sharing = plugin.raw_sharing().expect("sharing table");
    let state = plugin.raw_state().expect("state table");
    let exe = counter_exe(&plugin, rlx_plugin_api::Mode::Lazy);
    let handle = exe.raw_handle();
    drop(exe);
    let mut out = std::ptr::null_mut();
    // SAFETY: the ABI promises these are refused, whatever the pointer.
    let st = unsafe { (sharing.clone.unwrap())(handle, &mut out) };
    let e = unsafe { plugin.take_status(st) }.expect_err("a destroyed executable");
    assert_eq!(e.code, StatusCode::InvalidArgument);
    assert!(e.message.contains("not a live executable"), "{e}");
    assert!(out.is_null());
    // Another plugin's executable (the fixture's) and a made-up pointer.
    let fixture = rlx_plugin_tests::fixture_plugin();
    let foreign = fixture
        .compile(rlx_plugin_tests::FIXTURE_GRAPH, rlx_plugin_api::Mode::Lazy)
        .unwrap();
    let mut mine = counter_exe(&plugin, rlx_plugin_api::Mode::Lazy);
    for (what, p) in [
        ("another plugin's", foreign.raw_handle()),
        ("a made-up", 0x1000 as *mut _),
    ] {
        let mut n = 0usize;
        // SAFETY: as above.
        let st = unsafe { (sharing.share_params.unwrap())(mine.raw_handle(), p, &mut n) };
        let e = unsafe { plugin.take_status(st) }.expect_err(what);
        assert!(e.message.contains("not a live executable"), "{what}: {e}");
        // SAFETY: as above.
        let st = unsafe { (state.unbind.unwrap())(p, rlx_plugin_api::RlxStr::from_str("s")) };
        assert!(unsafe { plugin.take_status(st) }.is_err(), "{what}");
    }
    // The host library refuses sharing across plugins before any call.
    fails(
        mine.share_params_from(&foreign).map(|_| ()),
        StatusCode::InvalidArgument,
        "two plugins",
    );
    // A second destroy of a destroyed handle is logged, not a crash.
    // SAFETY: as above.
    unsafe { (api.executable_destroy.unwrap())(handle) };
    drop(mine.state_list());
}

#[test]
fn a_param_range_overwrites_only_its_elements() {
    let plugin = mlx();
    let mut exe = counter_exe(&plugin, rlx_plugin_api::Mode::Compiled);
    exe.state_bind("s", HostTensorRef::from(&f32s(&[2, 3], &[0.0; 6])))
        .unwrap();
    let x = f32s(&[2, 3], &[1.0; 6]);
    let bytes: Vec<u8> = [10.0f32, 20.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    exe.bind_param_range("w", 8, &bytes).unwrap();
    assert_eq!(
        run(&mut exe, &[("x", &x)])[1],
        vec![1., 2., 10., 20., 5., 6.]
    );
}

#[test]
fn clones_keep_their_own_state_and_share_params() {
    let plugin = mlx();
    for mode in MODES {
        let mut a = counter_exe(&plugin, mode);
        a.state_bind("s", HostTensorRef::from(&f32s(&[2, 3], &[1.0; 6])))
            .unwrap();
        a.state_set_feed("s", Feed::Replace(0)).unwrap();
        let mut b = a.clone_executable().unwrap();
        drop(a.state_list());
        let x = f32s(&[2, 3], &[1.0; 6]);
        run(&mut a, &[("x", &x)]);
        run(&mut a, &[("x", &x)]);
        // The clone started from a's state and feed, and a's runs did not
        // touch it.
        assert_eq!(read_state(&b, "s", 0, 6), vec![1.0; 6], "{mode:?}");
        let out = run(&mut b, &[("x", &x)]);
        assert_eq!(out[0], vec![2.0; 6], "{mode:?} clone's own run");
        assert_eq!(out[1], vec![2., 4., 6., 8., 10., 12.], "{mode:?} shared w");
        assert_eq!(read_state(&a, "s", 0, 6), vec![3.0; 6], "{mode:?}");
        // A param bound on one afterwards is its own.
        b.bind_param("w", &f32s(&[2, 3], &[0.0; 6])).unwrap();
        assert_eq!(
            run(&mut a, &[("x", &x)])[1],
            vec![4., 8., 12., 16., 20., 24.]
        );
        // The clone outlives the original.
        drop(a);
        assert_eq!(run(&mut b, &[("x", &x)])[1], vec![0.0; 6], "{mode:?}");
    }
}

#[test]
fn eight_clones_on_eight_threads_match_one_executable_bit_for_bit() {
    let plugin = mlx();
    for mode in MODES {
        let mut one = counter_exe(&plugin, mode);
        let inputs: Vec<HostTensor> = (0..8)
            .map(|i| f32s(&[2, 3], &[0.1 * i as f32, 0.3, -1.7, 2.5, 1e-3, 3.25]))
            .collect();
        let state = f32s(&[2, 3], &[0.5, -0.25, 1.125, 3.0, -2.0, 0.0625]);
        one.state_bind("s", HostTensorRef::from(&state)).unwrap();
        let want: Vec<Vec<Vec<f32>>> = inputs.iter().map(|x| run(&mut one, &[("x", x)])).collect();
        let clones: Vec<PluginExecutable> =
            (0..8).map(|_| one.clone_executable().unwrap()).collect();
        let got: Vec<Vec<Vec<Vec<f32>>>> = std::thread::scope(|s| {
            let handles: Vec<_> = clones
                .into_iter()
                .map(|mut c| {
                    let inputs = &inputs;
                    s.spawn(move || {
                        (0..3)
                            .flat_map(|_| inputs.iter())
                            .map(|x| run(&mut c, &[("x", x)]))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (t, runs) in got.iter().enumerate() {
            for (i, r) in runs.iter().enumerate() {
                let w = &want[i % 8];
                for (a, b) in r.iter().zip(w) {
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(a), bits(b), "{mode:?} thread {t} run {i}");
                }
            }
        }
    }
}

#[test]
fn shared_params_exist_once_in_the_plugins_memory() {
    let plugin = mlx();
    // 16 MiB of weights: far above anything else the test allocates.
    let n = 2048 * 2048;
    let mut g = Graph::new("big");
    let x = g.input("x", Shape::new(&[1, 2048], IrDType::F32));
    let w = g.param("w", Shape::new(&[2048, 2048], IrDType::F32));
    let y = g.mm(x, w);
    g.set_outputs(vec![y]);
    let t = text(&g);
    let wt = f32s(&[2048, 2048], &vec![0.5; n]);
    let bytes = (n * 4) as i64;
    let active = || plugin.memory_usage().unwrap().active_bytes as i64;
    let mut a = plugin.compile(&t, rlx_plugin_api::Mode::Lazy).unwrap();
    let before = active();
    a.bind_param("w", &wt).unwrap();
    let after_a = active();
    assert!(
        (after_a - before - bytes).abs() < bytes / 8,
        "binding 16 MiB grew the plugin by {} bytes",
        after_a - before
    );
    let mut b = plugin.compile(&t, rlx_plugin_api::Mode::Lazy).unwrap();
    assert_eq!(b.share_params_from(&a).unwrap(), 1);
    let after_b = active();
    assert!(
        (after_b - after_a).abs() < bytes / 8,
        "sharing grew the plugin by {} bytes (a copy is {bytes})",
        after_b - after_a
    );
    let x1 = f32s(&[1, 2048], &vec![1.0; 2048]);
    assert_eq!(run(&mut b, &[("x", &x1)])[0], vec![1024.0; 2048]);
    drop(a);
    // b still holds the weights.
    assert_eq!(run(&mut b, &[("x", &x1)])[0], vec![1024.0; 2048]);
    // A third, bound on its own, is a second copy: the figures see it.
    let mut c = plugin.compile(&t, rlx_plugin_api::Mode::Lazy).unwrap();
    let before_c = active();
    c.bind_param("w", &wt).unwrap();
    assert!(active() - before_c > bytes / 2, "an own copy is counted");
}

#[test]
fn submitted_runs_chain_through_state_and_match_synchronous_runs() {
    let plugin = mlx();
    assert!(plugin.offers().submit);
    for mode in MODES {
        let mut sync = counter_exe(&plugin, mode);
        let mut subm = counter_exe(&plugin, mode);
        for e in [&mut sync, &mut subm] {
            e.state_bind("s", HostTensorRef::from(&f32s(&[2, 3], &[0.0; 6])))
                .unwrap();
            e.state_set_feed("s", Feed::Replace(0)).unwrap();
        }
        let xs: Vec<HostTensor> = (0..5)
            .map(|i| f32s(&[2, 3], &[i as f32, 1.0, 2.0, -1.0, 0.5, i as f32 * 0.25]))
            .collect();
        let want: Vec<Vec<Vec<f32>>> = xs.iter().map(|x| run(&mut sync, &[("x", x)])).collect();
        // All five in flight, each reading the state the one before made.
        for x in &xs {
            subm.submit(&[("x", HostTensorRef::from(x))]).unwrap();
        }
        for (i, w) in want.iter().enumerate() {
            // SAFETY: nothing is lent.
            let got = unsafe {
                subm.wait_dest_raw(&[OutputDest::Read, OutputDest::Skip], |t| {
                    rlx_plugin_api::convert::bytes_to_f32(t.dtype, &t.compact_cow()?)
                })
            }
            .unwrap();
            assert_eq!(got[0].as_ref().unwrap(), &w[0], "{mode:?} run {i}");
            assert!(got[1].is_none(), "a skipped output is not handed over");
        }
        fails(
            subm.wait_discard(),
            StatusCode::InvalidArgument,
            "no run is submitted",
        );
        assert_eq!(read_state(&subm, "s", 0, 6), read_state(&sync, "s", 0, 6));
    }
}

#[test]
fn a_state_is_taken_from_another_executables_output_or_state_on_the_device() {
    let plugin = mlx();
    assert!(plugin.offers().state_from);
    for mode in MODES {
        let x = f32s(&[2, 3], &[1.0; 6]);
        // a's output 0 of its last run (named "output0": the counter's
        // outputs are unnamed) becomes b's state.
        let mut a = counter_exe(&plugin, mode);
        run(&mut a, &[("x", &x), ("s", &f32s(&[2, 3], &[5.0; 6]))]);
        let mut b = counter_exe(&plugin, mode);
        b.state_bind_from("s", Some(&a), "output0").unwrap();
        assert_eq!(read_state(&b, "s", 0, 6), vec![6.0; 6], "{mode:?}");
        b.state_set_feed("s", Feed::Replace(0)).unwrap();
        assert_eq!(run(&mut b, &[("x", &x)])[0], vec![7.0; 6], "{mode:?}");
        // From a state; then each replaces its own value as it runs.
        let mut c = counter_exe(&plugin, mode);
        c.state_bind_from("s", Some(&b), "s").unwrap();
        run(&mut b, &[("x", &x)]);
        assert_eq!(read_state(&c, "s", 0, 6), vec![7.0; 6], "{mode:?}");
        assert_eq!(read_state(&b, "s", 0, 6), vec![8.0; 6], "{mode:?}");
        // Every state with its feed, in one call.
        let mut d = counter_exe(&plugin, mode);
        d.state_bind_from("", Some(&b), "").unwrap();
        assert_eq!(run(&mut d, &[("x", &x)])[0], vec![9.0; 6], "{mode:?}");
        assert_eq!(read_state(&d, "s", 0, 6), vec![9.0; 6], "{mode:?}: fed");
        assert_eq!(read_state(&b, "s", 0, 6), vec![8.0; 6], "{mode:?}: b's own");
        // Its own output.
        d.state_bind_from("s", None, "output1").unwrap();
        assert_eq!(
            read_state(&d, "s", 0, 6),
            vec![9., 18., 27., 36., 45., 54.],
            "{mode:?}"
        );
        // Misuse: no such value, a value of another shape, no such input,
        // an output before any run, an executable of another graph.
        fails(
            d.state_bind_from("s", Some(&a), "nope"),
            StatusCode::NotFound,
            "no state or output called \"nope\"",
        );
        fails(
            d.state_bind_from("nope", Some(&a), "output0"),
            StatusCode::NotFound,
            "no input named \"nope\"",
        );
        let fresh = counter_exe(&plugin, mode);
        fails(
            d.state_bind_from("s", Some(&fresh), "output0"),
            StatusCode::InvalidArgument,
            "has not run",
        );
        let mut other = plugin.compile(&kv_step(), mode).unwrap();
        let k = f32s(&[1, 4, 2], &[0.0; 8]);
        other
            .run(&[("k", &k), ("t", &f32s(&[1, 1, 2], &[1.0, 2.0]))])
            .unwrap();
        fails(
            d.state_bind_from("s", Some(&other), "output1"),
            StatusCode::InvalidArgument,
            "state \"s\" is f32[2, 3] but \"output1\" is f32[1, 2]",
        );
        other.state_bind("k", HostTensorRef::from(&k)).unwrap();
        fails(
            d.state_bind_from("", Some(&other), ""),
            StatusCode::NotFound,
            "no input named \"k\"",
        );
        // Nothing changed by the calls that failed.
        assert_eq!(
            read_state(&d, "s", 0, 6),
            vec![9., 18., 27., 36., 45., 54.],
            "{mode:?}"
        );
    }
}
