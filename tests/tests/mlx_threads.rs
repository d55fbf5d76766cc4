//! Concurrency (issue #14): eight threads each run their own executable a
//! thousand times while other threads compile and destroy executables and
//! register, look up, use and unregister custom ops; every result is
//! bit-identical to the one computed single-threaded beforehand (and that
//! one matches an f64 reference). And two calls that overlap on one
//! executable, which the ABI forbids (docs/ABI.md §14), give the second a
//! clear error instead of a data race.
//!
//! The graph is `relu(x · w + b)`: f32 `x [4, 8]`, param `w [8, 3]`, input
//! `b [4, 3]`; the reference is that formula in f64, at 1e-5 abs + 1e-5 rel.

use rlx_plugin_api::{
    CustomImpl, CustomKernel, CustomOp, HostTensor, Mode, Origin, RlxTensor, ShapeRule, StatusCode,
};
use rlx_plugin_tests::parity::{mlx, MODES};
use rlx_plugin_tests::relu_affine::{reference, values, GRAPH};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const RUNNERS: usize = 8;

/// Runs per runner thread: 1,000, or `RLX_TEST_THREAD_RUNS` (fewer make
/// the test fit under Helgrind or memcheck; docs/RELIABILITY.md).
fn runs() -> usize {
    std::env::var("RLX_TEST_THREAD_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Inputs repeat with this period, so the single-threaded results are few.
const PERIOD: usize = 17;

/// Runner `t`'s executable: its mode, its own `w`.
fn runner_exe(t: usize) -> (rlx_plugin_loader::PluginExecutable, Vec<f32>) {
    let mut exe = mlx().compile(GRAPH, MODES[t % 3]).expect("compile");
    let w = values(24, t, 99);
    exe.bind_param("w", &HostTensor::from_f32(vec![8, 3], &w).unwrap())
        .unwrap();
    (exe, w)
}

fn run_once(
    exe: &mut rlx_plugin_loader::PluginExecutable,
    t: usize,
    i: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let x = values(32, t + 1, i % PERIOD);
    let b = values(12, t + 2, i % PERIOD);
    let xt = HostTensor::from_f32(vec![4, 8], &x).unwrap();
    let bt = HostTensor::from_f32(vec![4, 3], &b).unwrap();
    let out = exe.run(&[("x", &xt), ("b", &bt)]).expect("run");
    (out[0].to_f32_vec().unwrap(), x, b)
}

/// Adds `add` to every element; registered under many names at once.
fn adder(add: f32) -> CustomKernel {
    Arc::new(move |ins, outs, _| {
        for (o, i) in outs[0]
            .data
            .chunks_exact_mut(4)
            .zip(ins[0].data.chunks_exact(4))
        {
            let v = f32::from_le_bytes(i.try_into().unwrap()) + add;
            o.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    })
}

fn custom_graph(name: &str) -> String {
    rlx_ir::rlxmodel::to_text(&rlx_plugin_tests::one_custom_op(name)).unwrap()
}

#[test]
fn eight_threads_run_a_thousand_times_each_while_others_compile_and_register() {
    let _ = mlx();
    // Single-threaded first: each runner's results for one period.
    let expected: Vec<Vec<Vec<f32>>> = (0..RUNNERS)
        .map(|t| {
            let (mut exe, w) = runner_exe(t);
            (0..PERIOD)
                .map(|i| {
                    let (got, x, b) = run_once(&mut exe, t, i);
                    for (k, (g, r)) in got.iter().zip(reference(&x, &w, &b)).enumerate() {
                        assert!(
                            (g - r).abs() <= 1e-5 + 1e-5 * r.abs(),
                            "single-threaded runner {t} run {i} [{k}]: {g} vs {r}"
                        );
                    }
                    got
                })
                .collect()
        })
        .collect();
    let expected = Arc::new(expected);
    let stop = Arc::new(AtomicBool::new(false));
    let churned = Arc::new(AtomicUsize::new(0));

    // Two threads compile and destroy executables (and fail to compile).
    let compilers: Vec<_> = (0..2)
        .map(|c| {
            let (stop, churned) = (stop.clone(), churned.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let exe = mlx().compile(GRAPH, MODES[(c + i) % 3]).expect("compile");
                    drop(exe);
                    let e = mlx()
                        .compile("rlxmodel 1\nopset 1\ngraph @bad {", Mode::Lazy)
                        .err()
                        .expect("bad text refused");
                    assert_eq!(e.code, StatusCode::InvalidArgument, "{e}");
                    churned.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    // Two threads register, look up, use and unregister custom ops.
    let registrars: Vec<_> = (0..2)
        .map(|r| {
            let (stop, churned) = (stop.clone(), churned.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("test.threads{r}_{i}");
                    let add = (r * 1000 + i % 1000) as f32;
                    mlx()
                        .register_op(
                            CustomOp::new(
                                &name,
                                "",
                                1,
                                Origin::Host,
                                CustomImpl::Kernel(adder(add)),
                            )
                            .with_shape(ShapeRule::SameAsInput(0)),
                        )
                        .unwrap();
                    assert_eq!(mlx().lookup_custom_op(&name).unwrap().name, name);
                    let mut exe = mlx().compile(&custom_graph(&name), MODES[i % 3]).unwrap();
                    let x = HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
                    let out = exe.run(&[("x", &x)]).unwrap();
                    assert_eq!(
                        out[0].to_f32_vec().unwrap(),
                        vec![1.0 + add, 2.0 + add, 3.0 + add]
                    );
                    mlx().unregister_custom_op(&name).unwrap();
                    assert_eq!(
                        mlx().lookup_custom_op(&name).err().map(|e| e.code),
                        Some(StatusCode::NotFound)
                    );
                    // The executable outlives its op's registration.
                    let out = exe.run(&[("x", &x)]).unwrap();
                    assert_eq!(out[0].to_f32_vec().unwrap()[0], 1.0 + add);
                    churned.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    let runners: Vec<_> = (0..RUNNERS)
        .map(|t| {
            let expected = expected.clone();
            std::thread::spawn(move || {
                let (mut exe, _) = runner_exe(t);
                for i in 0..runs() {
                    let (got, _, _) = run_once(&mut exe, t, i);
                    let want = &expected[t][i % PERIOD];
                    assert!(
                        got.iter()
                            .map(|v| v.to_bits())
                            .eq(want.iter().map(|v| v.to_bits())),
                        "runner {t} [{}] run {i}: {got:?}, single-threaded {want:?}",
                        MODES[t % 3].name()
                    );
                }
            })
        })
        .collect();
    let mut failed = Vec::new();
    for (t, h) in runners.into_iter().enumerate() {
        if h.join().is_err() {
            failed.push(format!("runner {t}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for (i, h) in compilers.into_iter().chain(registrars).enumerate() {
        if h.join().is_err() {
            failed.push(format!("churn thread {i}"));
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
    eprintln!(
        "{RUNNERS} threads x {} runs; {} compile/register cycles beside them",
        runs(),
        churned.load(Ordering::Relaxed)
    );
    assert!(
        churned.load(Ordering::Relaxed) > 0,
        "the churn threads never ran"
    );
}

/// A host kernel that says when it is entered and then waits to be let
/// go: while it waits, a run of its executable is inside the plugin.
fn blocking_kernel(entered: mpsc::Sender<()>, release: mpsc::Receiver<()>) -> CustomKernel {
    let entered = Mutex::new(entered);
    let release = Mutex::new(release);
    Arc::new(move |ins, outs, _| {
        entered.lock().unwrap().send(()).unwrap();
        release
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30))
            .expect("released");
        outs[0].data.copy_from_slice(ins[0].data);
        Ok(())
    })
}

#[test]
fn a_call_that_overlaps_another_on_one_executable_is_refused() {
    let name = "test.threads_blocking";
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    mlx()
        .register_op(
            CustomOp::new(
                name,
                "",
                1,
                Origin::Host,
                CustomImpl::Kernel(blocking_kernel(entered_tx, release_rx)),
            )
            .with_shape(ShapeRule::SameAsInput(0)),
        )
        .unwrap();
    for mode in MODES {
        let mut exe = mlx().compile(&custom_graph(name), mode).unwrap();
        let raw = exe.raw_handle() as usize;
        let x = HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
        let first = std::thread::spawn(move || {
            let x = HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
            let out = exe.run(&[("x", &x)]).map(|o| o[0].to_f32_vec().unwrap());
            (exe, out)
        });
        entered_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the first run reached its kernel");
        // The first run is inside the plugin now: a second call overlaps.
        let plugin = mlx();
        let api = plugin.raw_api();
        let borrowed = rlx_plugin_api::tensor::borrow_named(&[("x", &x)]);
        let mut slot = [RlxTensor::empty()];
        // SAFETY: the handle is live (the first thread holds the
        // executable); the inputs and the slot outlive the call. The
        // overlap is the point: the plugin must refuse it.
        let e = unsafe {
            plugin.take_status((api.executable_run.unwrap())(
                raw as *mut _,
                borrowed.named.as_ptr(),
                borrowed.named.len(),
                slot.as_mut_ptr(),
                1,
            ))
        }
        .expect_err("an overlapping run is refused");
        assert_eq!(e.code, StatusCode::InvalidArgument, "{e}");
        assert!(
            e.message.contains(
                "executable_run: the executable is in use by another call; calls on one \
                 executable must not overlap"
            ),
            "{e}"
        );
        release_tx.send(()).unwrap();
        let (mut exe, out) = first.join().expect("the first run's thread");
        assert_eq!(out.expect("the first run succeeds"), vec![1.0, 2.0, 3.0]);
        // Released again: the next call goes through (let go in advance).
        release_tx.send(()).unwrap();
        let out = exe.run(&[("x", &x)]).map(|o| o[0].to_f32_vec().unwrap());
        entered_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(out.unwrap(), vec![1.0, 2.0, 3.0]);
    }
    mlx().unregister_custom_op(name).unwrap();
}

/// Compiled mode builds its kernels on a background thread by calling the
/// graph on zeros; a graph with a host kernel is left out of that, so the
/// kernel runs once per run asked for and never on data no caller gave it
/// (before, the build called it once more, on another thread: a blocking
/// kernel like the one above then took the caller's release).
#[test]
fn a_host_kernel_runs_once_per_run_and_never_in_the_background() {
    let name = "test.threads_counting";
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let kernel: CustomKernel = Arc::new(move |ins, outs, _| {
        seen.fetch_add(1, Ordering::SeqCst);
        outs[0].data.copy_from_slice(ins[0].data);
        Ok(())
    });
    mlx()
        .register_op(
            CustomOp::new(name, "", 1, Origin::Host, CustomImpl::Kernel(kernel))
                .with_shape(ShapeRule::SameAsInput(0)),
        )
        .unwrap();
    let mut exe = mlx()
        .compile(&custom_graph(name), rlx_plugin_api::Mode::Compiled)
        .unwrap();
    let x = HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap();
    for runs in [3, 6] {
        while calls.load(Ordering::SeqCst) < runs {
            let out = exe.run(&[("x", &x)]).unwrap();
            assert_eq!(out[0].to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0]);
        }
        // Time for a background build to call the kernel, had one started.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            runs,
            "kernel calls for {runs} runs"
        );
    }
    drop(exe);
    mlx().unregister_custom_op(name).unwrap();
}
