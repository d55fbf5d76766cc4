//! Resources are errors, not aborts (issue #14's first part): a tensor too
//! large for the memory available fails with RESOURCE_EXHAUSTED naming the
//! node, its shape and its bytes, in every mode, before MLX or the host
//! allocates anything; `RLX_MLX_MEMORY_LIMIT` lowers the limit;
//! `rlx-host run` refuses random data that cannot fit instead of aborting.
//! Before this, the 16 TB Expand below aborted the host in lazy and eager mode
//! ("memory allocation of 16000000000000 bytes failed") and killed it with
//! SIGSEGV in compiled mode.

use rlx_ir::op::Activation;
use rlx_ir::{DType, Graph, Op, Shape};
use rlx_plugin_api::{Mode, StatusCode};
use rlx_plugin_tests::parity::{mlx, mlx_plugin_dir, MODES};
use rlx_plugin_tests::profile_dir;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

fn f32s(d: &[usize]) -> Shape {
    Shape::new(d, DType::F32)
}

/// `exp(expand(x [1, 1, 100] -> [200000, 200000, 100]))`: 16 TB of f32
/// from 400 bytes of input.
fn huge_expand() -> Graph {
    let mut g = Graph::new("huge_expand");
    let x = g.input("x", f32s(&[1, 1, 100]));
    let big = [200000usize, 200000, 100];
    let e = g.add_node(
        Op::Expand {
            target_shape: big.iter().map(|d| *d as i64).collect(),
        },
        vec![x],
        f32s(&big),
    );
    let y = g.add_node(Op::Activation(Activation::Exp), vec![e], f32s(&big));
    g.set_outputs(vec![y]);
    g
}

/// A graph with a 4 MiB intermediate: `exp(x [1024, 1024])`.
fn four_mib() -> Graph {
    let mut g = Graph::new("four_mib");
    let x = g.input("x", f32s(&[1024, 1024]));
    let y = g.add_node(
        Op::Activation(Activation::Exp),
        vec![x],
        f32s(&[1024, 1024]),
    );
    g.set_outputs(vec![y]);
    g
}

#[test]
fn a_16_tb_intermediate_is_resource_exhausted_in_every_mode() {
    let text = rlx_ir::rlxmodel::to_text(&huge_expand()).unwrap();
    for mode in MODES {
        let e = mlx()
            .compile(&text, mode)
            .err()
            .unwrap_or_else(|| panic!("[{}] compiled", mode.name()));
        assert_eq!(
            e.code,
            StatusCode::ResourceExhausted,
            "[{}] {e}",
            mode.name()
        );
        for part in [
            "Expand",
            "[200000, 200000, 100]",
            "16000000000000 bytes",
            "14.6 TiB",
        ] {
            assert!(
                e.message.contains(part),
                "[{}] {part:?} not in {e}",
                mode.name()
            );
        }
    }
    // A shape whose bytes overflow u64: refused too, not wrapped around.
    // Written by hand: rlx-ir's own writer overflows on it (a debug-build
    // panic in `to_text`).
    let text = "rlxmodel 1\nopset 1\n\ngraph @overflow {\n  %x = input : f32[1, 1]\n  \
                %1 = Expand{target_shape: [1099511627776, 1099511627776]} %x : \
                f32[1099511627776, 1099511627776]\n  return %1\n}\n";
    let e = mlx().compile(text, Mode::Lazy).err().expect("refused");
    assert_eq!(e.code, StatusCode::ResourceExhausted, "{e}");
    assert!(e.message.contains("more than 2^64 bytes"), "{e}");
    // The plugin is still usable after the refusals.
    let ok = rlx_ir::rlxmodel::to_text(&four_mib()).unwrap();
    let mut exe = mlx().compile(&ok, Mode::Lazy).unwrap();
    let x =
        rlx_plugin_api::HostTensor::from_f32(vec![1024, 1024], &vec![0.5; 1024 * 1024]).unwrap();
    let out = exe.run(&[("x", &x)]).unwrap();
    let v = out[0].to_f32_vec().unwrap();
    assert!((v[12345] - 0.5f32.exp()).abs() < 1e-6);
}

/// rlx-host with the build tree's MLX plugin directory only.
fn rlx_host(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(profile_dir().join("rlx-host"));
    c.args(args)
        .env("RLX_BACKEND_PLUGINS", mlx_plugin_dir())
        .env("RLX_HOME", home)
        .env("HOME", home)
        .env_remove("RLX_MLX_MEMORY_LIMIT")
        .env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("spawn rlx-host")
}

fn write_model(dir: &Path, g: &Graph) -> String {
    let p = dir.join(format!("{}.rlxmodel", g.name));
    std::fs::write(&p, rlx_ir::rlxmodel::to_text(g).unwrap()).unwrap();
    p.to_str().unwrap().to_string()
}

/// A clean failure: exit code 1 (no signal), the error on stderr.
fn assert_clean_failure(o: &Output, parts: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.signal(), None, "killed by a signal: {err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    for p in parts {
        assert!(err.contains(p), "{p:?} not in: {err}");
    }
}

#[test]
fn rlx_host_run_reports_the_16_tb_intermediate_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path(), &huge_expand());
    for mode in ["lazy", "eager", "compiled"] {
        let o = rlx_host(
            dir.path(),
            &["run", &model, "--backend", "mlx", "--mode", mode],
            &[],
        );
        assert_clean_failure(
            &o,
            &["resource exhausted", "Expand", "16000000000000 bytes"],
        );
    }
    // rlx-runtime's CPU backend has no such check: rlx-host refuses to run
    // the graph there rather than let it abort.
    let o = rlx_host(dir.path(), &["run", &model, "--backend", "cpu"], &[]);
    assert_clean_failure(&o, &["resource exhausted", "16000000000000 bytes"]);
}

#[test]
fn rlx_host_run_refuses_random_data_beyond_memory() {
    let dir = tempfile::tempdir().unwrap();
    // A 40 TB input.
    let mut g = Graph::new("huge_input");
    let x = g.input("x", f32s(&[10_000_000, 1_000_000]));
    let y = g.add_node(
        Op::Activation(Activation::Exp),
        vec![x],
        f32s(&[10_000_000, 1_000_000]),
    );
    g.set_outputs(vec![y]);
    let model = write_model(dir.path(), &g);
    for backend in ["mlx", "cpu"] {
        let o = rlx_host(dir.path(), &["run", &model, "--backend", backend], &[]);
        assert_clean_failure(
            &o,
            &[
                "\"x\" [10000000, 1000000]",
                "40000000000000 bytes",
                "resource exhausted",
            ],
        );
    }
}

#[test]
fn the_memory_limit_can_be_lowered() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path(), &four_mib());
    let run = |limit: &str| {
        rlx_host(
            dir.path(),
            &["run", &model, "--backend", "mlx", "--compare", "cpu"],
            &[("RLX_MLX_MEMORY_LIMIT", limit)],
        )
    };
    // 4 MiB tensors under a 1 MiB limit (also as bytes and with a suffix
    // in another form).
    for limit in ["1048576", "1M", "1MiB", "1024k"] {
        let o = run(limit);
        assert_clean_failure(&o, &["resource exhausted", "4194304 bytes (4.0 MiB)"]);
    }
    assert_clean_failure(
        &run("1M"),
        &[
            "resource exhausted",
            "4194304 bytes (4.0 MiB)",
            "RLX_MLX_MEMORY_LIMIT=1M",
        ],
    );
    // Under 8 MiB they fit.
    let o = run("8M");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A limit that is not a size is an error naming the variable.
    assert_clean_failure(
        &run("lots"),
        &["RLX_MLX_MEMORY_LIMIT=\"lots\" is not a size"],
    );
}

/// A While whose condition never turns false (found by the `compile_run`
/// fuzzer: a cond returning a non-zero constant) fails the run once it has
/// iterated `RLX_MLX_WHILE_LIMIT` times, instead of hanging the host; with
/// a `max_iterations` under the limit it ends as it should.
#[test]
fn a_while_that_never_ends_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let model = |max: Option<usize>| {
        let field = max.map_or(String::new(), |m| format!(", max_iterations: {m}"));
        let text = format!(
            "rlxmodel 1\nopset 1\n\ngraph @forever {{\n  %x = input : f32[3]\n  \
             %1 = While{{cond: graph @cond {{\n    %x = input : f32[3]\n    \
             %1 = const [5.0] : f32[1]\n    return %1\n  }}, body: graph @body {{\n    \
             %x = input : f32[3]\n    %1 = const [1.0] : f32[1]\n    \
             %2 = Binary(Add) %x, %1 : f32[3]\n    return %2\n  }}{field}}} \
             %x : f32[3]\n  return %1\n}}\n"
        );
        let p = dir
            .path()
            .join(format!("forever-{}.rlxmodel", max.unwrap_or(0)));
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let endless = model(None);
    for mode in ["lazy", "eager", "compiled"] {
        let o = rlx_host(
            dir.path(),
            &["run", &endless, "--backend", "mlx", "--mode", mode],
            &[("RLX_MLX_WHILE_LIMIT", "100")],
        );
        assert_clean_failure(
            &o,
            &[
                "While ran 100 iterations and its condition is still true",
                "RLX_MLX_WHILE_LIMIT",
            ],
        );
    }
    // 50 iterations, under the limit: x + 50.
    let bounded = model(Some(50));
    let o = rlx_host(
        dir.path(),
        &["run", &bounded, "--backend", "mlx", "--json"],
        &[("RLX_MLX_WHILE_LIMIT", "100")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A limit that is not a number is an error naming the variable.
    let o = rlx_host(
        dir.path(),
        &["run", &endless, "--backend", "mlx"],
        &[("RLX_MLX_WHILE_LIMIT", "many")],
    );
    assert_clean_failure(&o, &["RLX_MLX_WHILE_LIMIT=\"many\" is not a number"]);
}

/// Text nested thousands of brackets deep (found by the `compile_run`
/// fuzzer) overflowed the stack of rlx-ir's recursive reader and aborted
/// the host; the plugin and rlx-host now refuse it before reading.
#[test]
fn deeply_nested_text_is_refused_not_a_stack_overflow() {
    let n = 20_000;
    let text = format!(
        "rlxmodel 1\nopset 1\n\ngraph @g {{\n  %x = input : f32[2]\n  \
         %1 = Reshape{{new_shape: {}{}}} %x : f32[2]\n  return %1\n}}\n",
        "[".repeat(n),
        "]".repeat(n)
    );
    for mode in MODES {
        let e = mlx().compile(&text, mode).err().expect("refused");
        assert_eq!(e.code, StatusCode::InvalidArgument, "{e}");
        assert!(e.message.contains("nested more than 256 deep"), "{e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("deep.rlxmodel");
    std::fs::write(&p, &text).unwrap();
    let o = rlx_host(
        dir.path(),
        &["run", p.to_str().unwrap(), "--backend", "mlx"],
        &[],
    );
    assert_clean_failure(&o, &["brackets nested more than 256 deep"]);
}

/// The host sets the limit through the ABI (`memory_limit_bytes` in the compile
/// options): under 1 MiB the 4 MiB graph is refused in every mode, naming the
/// host's limit; the plugin's own limit (the machine's memory) lets it compile,
/// and a host limit above the plugin's own does not raise it.
#[test]
fn the_host_sets_a_limit_through_the_compile_options() {
    let text = rlx_ir::rlxmodel::to_text(&four_mib()).unwrap();
    for mode in MODES {
        let opts = |limit| rlx_plugin_api::CompileOptions {
            mode,
            memory_limit: limit,
            ..Default::default()
        };
        let e = mlx()
            .compile_with(&text, &opts(Some(1 << 20)))
            .err()
            .expect("refused under the host's 1 MiB");
        assert_eq!(e.code, StatusCode::ResourceExhausted, "{e}");
        for part in [
            "4194304 bytes (4.0 MiB)",
            "more than 1048576 bytes (1.0 MiB) (the host's limit (compile options)) allows",
        ] {
            assert!(
                e.message.contains(part),
                "[{}] {part:?} not in {e}",
                mode.name()
            );
        }
        mlx().compile_with(&text, &opts(Some(8 << 20))).unwrap();
        mlx().compile_with(&text, &opts(None)).unwrap();
    }
    // Above the machine's memory, the host's limit does not raise it.
    let huge = rlx_ir::rlxmodel::to_text(&huge_expand()).unwrap();
    let e = mlx()
        .compile_with(
            &huge,
            &rlx_plugin_api::CompileOptions {
                memory_limit: Some(u64::MAX),
                ..Default::default()
            },
        )
        .err()
        .expect("16 TB stays refused");
    assert_eq!(e.code, StatusCode::ResourceExhausted, "{e}");
    assert!(e.message.contains("physical memory"), "{e}");
}
