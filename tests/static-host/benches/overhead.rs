//! What one run costs at each layer between a host program and MLX, in
//! one process, for the same graph (`exp` of an f32 vector):
//!
//! - `mlx`: MLX alone through the shim, no ABI: write the host bytes into
//!   the input array (kept from the last run, as the plugin keeps it),
//!   build the MLX ops the plugin's lowering makes of the graph (or call
//!   them `mx::compile`d), evaluate, copy the result out. The least any run
//!   of this graph through host memory costs.
//! - `abi`: the plugin's C ABI (`executable_run`), through the host-side
//!   loader's `PluginExecutable::run_refs`: the plugin's run (input checks,
//!   graph build or compiled call, output handed over) and the glue.
//! - `abi-into`: the same through `executable_run_into`, the output written
//!   into a buffer lent for each run, as `session` does.
//! - `abi-mapped`: `abi-into` with the input read from, and the output written
//!   into, host memory mapped for transfers (`dma_map`): on a GPU, page-locked
//!   memory the copy engine reads and writes directly. Its input and output
//!   buffers are the same every run.
//! - `session`: `Session::run` on `Device::Mlx`: rlx-runtime and the
//!   adapter on top of `abi-into`.
//!
//! The plugin is linked in (`install_static`), so no `dlopen` sits between
//! the layers; a loaded plugin's calls are the same calls. Run it with
//!
//! ```sh
//! cargo bench -p rlx-static-host --bench overhead [-- --runs N --len N]
//! ```
//!
//! `--only "abi compiled,session compiled"` times only the rows named
//! (layer and mode), for a profiler.
//!
//! and read `docs/PERFORMANCE.md` ("Where a tiny run's time goes").

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use rlx_mlx::executable::{evaluate, Env};
use rlx_mlx::lower::param_writes::ParamWrites;
use rlx_mlx::lower::Eval;
use rlx_mlx::lower::A;
use rlx_mlx_shim::{array, Array, ArrayList};
use rlx_plugin_api::{HostTensorRef, Mode};
use rlx_runtime::{Device, Session};
use std::time::Instant;

fn graph(len: usize) -> Graph {
    let mut g = Graph::new("exp");
    let x = g.input("x", Shape::new(&[len], DType::F32));
    let y = g.exp(x);
    g.set_named_outputs([("y", y)]);
    g
}

/// Median and min, in microseconds, of `runs` calls of `f` after
/// `runs / 10 + 3` untimed ones.
fn time(runs: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..runs / 10 + 3 {
        f();
    }
    let mut us: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    (us[us.len() / 2], us[0])
}

/// The value after the flag `name`, if given.
fn flag(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != name);
    args.next().and(args.next())
}

fn arg(name: &str, default: usize) -> usize {
    flag(name)
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

/// Whether `--only` (comma-separated "LAYER MODE" rows) leaves the row in.
fn wanted(layer: &str, mode: &str) -> bool {
    flag("--only").is_none_or(|only| {
        only.split(',')
            .any(|r| r.trim() == format!("{layer} {mode}"))
    })
}

fn main() {
    let runs = arg("--runs", 2000).max(1);
    let len = arg("--len", 4).max(1);
    let x: Vec<f32> = (0..len).map(|i| (i % 17) as f32 * 0.1 - 0.8).collect();
    let x_bytes = rlx_plugin_api::convert::f32_to_le(&x);
    let dims = [len as i32];

    let opts = rlx_plugin_host::Options::default();
    // SAFETY: rlx_mlx::rlx_plugin_entry is the MLX plugin's entry, linked into this program.
    let plugin =
        unsafe { rlx_plugin_host::install_static(rlx_mlx::rlx_plugin_entry, "mlx", &opts) }
            .unwrap_or_else(|e| panic!("{e}"));
    let d = plugin.descriptor();
    let device = d
        .device_infos
        .first()
        .map(|i| i.label())
        .unwrap_or_else(|| "cpu:0".into());
    println!(
        "exp of f32[{len}], {runs} runs per row, plugin {} {} on {device}, MLX {}",
        d.name,
        d.version,
        rlx_mlx_shim::mlx_version()
    );
    // Build MLX's arrays on the device the plugin compiles for.
    let dev = rlx_mlx::devices::resolve(None).expect("a default device");
    let _on = rlx_mlx::executable::on_device(dev).expect("the default device");

    println!(
        "{:<10} {:<9} {:>10} {:>10}",
        "LAYER", "MODE", "MEDIAN US", "MIN US"
    );
    // Times `f` and prints its row, unless `--only` leaves the row out.
    let row = |layer: &str, mode: &str, f: &mut dyn FnMut()| {
        if wanted(layer, mode) {
            let (med, min) = time(runs, f);
            println!("{layer:<10} {mode:<9} {med:>10.2} {min:>10.2}");
        }
    };

    // One element is read back, as the `session` row does: converting the
    // whole output would add a copy of it to the rows that check bytes.
    let check = |out: &[u8]| {
        assert_eq!(out.len(), 4 * len);
        let y1 = f32::from_le_bytes(out[4..8].try_into().unwrap());
        assert!(
            (y1 - x[1].exp()).abs() <= 1e-6 * x[1].exp().abs().max(1.0),
            "{y1}"
        );
    };

    // MLX alone: the MLX ops the plugin's lowering builds for the graph
    // (rlx's saturating `exp`: a clip, two exps and a select, not MLX's bare
    // `exp`), built anew (lazy) or through the `mx::compile`d function,
    // then evaluated as MLX's eval does (spin 0) or polling (the plugin's
    // way).
    let g = std::sync::Arc::new(graph(len));
    let custom = std::sync::Arc::new(rlx_mlx::custom::resolve::resolve(&g).unwrap());
    let lower = move |a: &Array| -> Result<A, String> {
        let writes = ParamWrites::default();
        let env = Env {
            rng: Default::default(),
            custom: &custom,
            how: Eval::Lazy,
            writes: &writes,
            observe: None,
            // One op: no region to fuse.
            fusion: None,
        };
        let mut outs = evaluate(&g, &env, &|_| Ok(a.clone_handle())).map_err(|e| e.message)?;
        Ok(outs.remove(0))
    };
    let lower_in_compile = lower.clone();
    let compiled = rlx_mlx_shim::compile(move |args: &ArrayList| {
        let a = args.get(0).map_err(|e| e.to_string())?;
        let y = lower_in_compile(&a)?;
        Ok(ArrayList::from_arrays([&*y]))
    })
    .unwrap();
    // The input array is kept from run to run and written in place, as the
    // plugin does (`array_overwrite`), or made anew when MLX still holds it.
    let kept = std::cell::RefCell::new(None::<rlx_mlx_shim::UniquePtr<Array>>);
    let input = || {
        let mut k = kept.borrow_mut();
        match k.take() {
            Some(a) if array::array_overwrite(&a, &x_bytes).unwrap() => a,
            _ => array::array_from_bytes(&x_bytes, &dims, rlx_mlx_shim::DType::F32).unwrap(),
        }
    };
    let keep = |a| *kept.borrow_mut() = Some(a);
    // `lap(k)` marks the end of phase k (inputs, build, eval, outputs).
    let mlx_run = |use_compiled: bool, spin: u32, lap: &mut dyn FnMut(usize)| {
        let a = input();
        lap(0);
        let outs = if use_compiled {
            compiled.call_arrays(&[&*a]).unwrap()
        } else {
            vec![lower(&a).unwrap()]
        };
        lap(1);
        let list = ArrayList::from_arrays(outs.iter().map(|o| &**o as &Array));
        array::eval_list_spinning(&list, spin).unwrap();
        lap(2);
        check(&outs[0].to_bytes().unwrap());
        lap(3);
        drop((list, outs));
        keep(a);
    };
    let spin = arg("--spin-us", 50) as u32;
    for (mode, use_compiled, spin) in [
        ("lazy", false, 0),
        ("compiled", true, 0),
        ("lazy+spin", false, spin),
        ("comp+spin", true, spin),
    ] {
        row("mlx", mode, &mut || {
            mlx_run(use_compiled, spin, &mut |_| {})
        });
    }
    // The compiled MLX-alone run by phase, named as the plugin's
    // `RLX_MLX_TRACE_RUNS` names them, to set beside a traced plugin run.
    let mut phases: [Vec<f64>; 4] = Default::default();
    let phase_runs = if wanted("mlx", "comp+spin") { runs } else { 0 };
    for i in 0..phase_runs + phase_runs / 10 + 3 {
        let mut t = Instant::now();
        let mut lap = |k: usize| {
            if i >= runs / 10 + 3 {
                phases[k].push(t.elapsed().as_secs_f64() * 1e6);
            }
            t = Instant::now();
        };
        mlx_run(true, spin, &mut lap);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    if phase_runs > 0 {
        println!(
            "mlx comp+spin by phase, median us: inputs {:.2} build {:.2} eval {:.2} outputs {:.2}",
            median(&mut phases[0]),
            median(&mut phases[1]),
            median(&mut phases[2]),
            median(&mut phases[3])
        );
    }
    drop(_on);

    let text = rlx_ir::rlxmodel::to_text(&graph(len)).unwrap();
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe = plugin.compile(&text, mode).unwrap();
        let shape = [len];
        row("abi", mode.name(), &mut || {
            let t = HostTensorRef::new(rlx_plugin_api::DType::F32, &shape, &x_bytes).unwrap();
            let out = exe.run_refs(&[("x", t)]).unwrap();
            check(&out[0].data);
        });
    }
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe = plugin.compile(&text, mode).unwrap();
        let shape = [len];
        row("abi-into", mode.name(), &mut || {
            let t = HostTensorRef::new(rlx_plugin_api::DType::F32, &shape, &x_bytes).unwrap();
            // A fresh buffer a run, as the host adapter lends the Vec it
            // returns.
            let mut y = vec![0u8; x_bytes.len()];
            exe.run_refs_into(&[("x", t)], &mut [Some(&mut y[..])], |t| {
                t.to_compact_bytes()
            })
            .unwrap();
            check(&y);
        });
    }
    let (mut x_mapped, mut y_mapped) = (x_bytes.clone(), vec![0u8; x_bytes.len()]);
    let x_mapped = plugin.dma_map(&mut x_mapped).unwrap();
    let mut y_mapped = plugin.dma_map(&mut y_mapped).unwrap();
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe = plugin.compile(&text, mode).unwrap();
        let shape = [len];
        row("abi-mapped", mode.name(), &mut || {
            let t = HostTensorRef::new(rlx_plugin_api::DType::F32, &shape, &x_mapped).unwrap();
            exe.run_refs_into(&[("x", t)], &mut [Some(&mut y_mapped[..])], |t| {
                t.to_compact_bytes()
            })
            .unwrap();
            check(&y_mapped);
        });
    }
    drop((x_mapped, y_mapped));
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe =
            rlx_plugin_host::with_mode(mode, || Session::new(Device::Mlx).compile(graph(len)));
        row("session", mode.name(), &mut || {
            let out = exe.run(&[("x", &x[..])]);
            assert!((out[0][1] - x[1].exp()).abs() <= 1e-6 * x[1].exp().abs().max(1.0));
        });
    }
    let mib = arg("--bind-mib", 0);
    if mib > 0 {
        bind_ladder(&plugin, mib, arg("--bind-runs", 5).max(1));
    }
    let mut cpu = Session::new(Device::Cpu).compile(graph(len));
    row("cpu", "-", &mut || {
        cpu.run(&[("x", &x[..])]);
    });
}

/// Binding a param of `mib` MiB (f32), at each layer: MLX's own copy of
/// the bytes into an array (the one copy a bound param needs, as MLX cannot
/// adopt host memory), the ABI's `executable_bind_param` with the tensor
/// lent for the call, and `set_param` through `Session`. Milliseconds.
fn bind_ladder(plugin: &std::sync::Arc<rlx_plugin_loader::LoadedPlugin>, mib: usize, runs: usize) {
    let n = mib * (1 << 20) / 4;
    let w: Vec<f32> = (0..n).map(|i| (i % 251) as f32 * 0.01).collect();
    let bytes = rlx_plugin_api::convert::f32_le_bytes(&w);
    let mut g = Graph::new("bind");
    let x = g.input("x", Shape::new(&[n], DType::F32));
    let p = g.param("w", Shape::new(&[n], DType::F32));
    let y = g.add(x, p);
    g.set_named_outputs([("y", y)]);
    let ms = |(med, min): (f64, f64)| (med / 1e3, min / 1e3);
    println!("binding a {mib} MiB f32 param, {runs} times per row");
    println!(
        "{:<10} {:<9} {:>10} {:>10}",
        "LAYER", "WHAT", "MEDIAN MS", "MIN MS"
    );
    let dev = rlx_mlx::devices::resolve(None).expect("a default device");
    {
        let _on = rlx_mlx::executable::on_device(dev).expect("the default device");
        let (med, min) = ms(time(runs, || {
            let a = array::array_from_bytes(&bytes, &[n as i32], rlx_mlx_shim::DType::F32).unwrap();
            drop(a);
        }));
        println!("{:<10} {:<9} {med:>10.2} {min:>10.2}", "mlx", "copy");
    }
    let text = rlx_ir::rlxmodel::to_text(&g).unwrap();
    let mut exe = plugin.compile(&text, Mode::Lazy).unwrap();
    let shape = [n];
    let (med, min) = ms(time(runs, || {
        let t = HostTensorRef::new(rlx_plugin_api::DType::F32, &shape, &bytes).unwrap();
        exe.bind_param_ref("w", t).unwrap();
    }));
    println!("{:<10} {:<9} {med:>10.2} {min:>10.2}", "abi", "bind");
    drop(exe);
    let mut s = Session::new(Device::Mlx).compile(g);
    let (med, min) = ms(time(runs, || s.set_param("w", &w)));
    println!(
        "{:<10} {:<9} {med:>10.2} {min:>10.2}",
        "session", "set_param"
    );
}
