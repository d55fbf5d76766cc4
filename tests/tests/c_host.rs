//! The host half of the version-skew matrix: `rlx-c-host`, a host written
//! in plain C11 against `plugin-api/include/rlx_plugin.h` alone
//! (tests/hosts/c-host/c_host.c, built by build.rs), claims each ABI minor
//! 1.0 ..= 1.10 and drives a real plugin through the whole table: handshake,
//! descriptor, init, op list, lowering table (one eager op), compile in
//! every mode, signature, bind, run (compact and strided inputs), error
//! paths, from 1.1 the custom-op registry with a kernel written in C, from
//! 1.8 outputs written into memory it lends, and at 1.9 every new entry:
//! executable state (bind, list, REPLACE and ROWS feeds, reads, overrides,
//! unbind), skipped output slots, clones and shared params, submitted runs
//! waited for into lent, OWNED and skipped slots, param ranges, the RNG,
//! active extents and the memory figures, each misuse with its status code.
//! A host claiming less never uses them, and a plugin whose table lacks them
//! (the fixture's 1.9 table, whose fields are NULL) is seen to lack them.
//! At 1.10 the host table grows `setting`, which the fixture asks (a
//! `--setting` of the C host reaches it); a host claiming less writes the
//! 1.0 table size, and the fixture reads its process environment instead.
//!
//! Each minor's host writes its structs at that minor's size with every
//! padding byte 0xAB, so a plugin that reads a field an older host never
//! wrote fails here (a 1.0/1.1 host's RlxCompileOptions is 16 bytes whose
//! last 4 are garbage where 1.2 put rng_policy). The C host checks every
//! value against its own double-precision reference and prints `ok` last.

use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_tests::parity::{mlx, mlx_plugin_dir};
use rlx_plugin_tests::test_plugin;
use std::path::{Path, PathBuf};
use std::process::Command;

const MODES: [&str; 3] = ["lazy", "eager", "compiled"];

/// The minor of a claim `1.N`.
fn minor(claim: &str) -> u32 {
    claim
        .strip_prefix("1.")
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("claim {claim:?} is not 1.N"))
}

fn c_host() -> PathBuf {
    let p = Path::new(env!("RLX_C_ARTIFACTS")).join("rlx-c-host");
    assert!(
        p.exists(),
        "{} is missing: tests/build.rs builds it",
        p.display()
    );
    p
}

fn mlx_library() -> PathBuf {
    let file = rlx_plugin_loader::library_file_name("rlx_mlx");
    mlx_plugin_dir().join(file)
}

/// One run of the C host.
struct Run {
    args: Vec<String>,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn transcript(&self) -> String {
        format!(
            "rlx-c-host {}\nexit: {:?}\n--- stdout\n{}--- stderr\n{}",
            self.args.join(" "),
            self.code,
            self.stdout,
            self.stderr
        )
    }

    fn said(&self, s: &str) -> bool {
        self.stdout.contains(s) || self.stderr.contains(s)
    }
}

fn run_c_host<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    // No LD_LIBRARY_PATH: the MLX plugin finds its libraries via $ORIGIN.
    let out = Command::new(c_host())
        .args(args)
        .output()
        .expect("spawn rlx-c-host");
    Run {
        args: args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The run passed every check: exit 0 and `ok` as the last line.
fn assert_ok(run: &Run, claim: &str) {
    // 2880154539 is 0xABABABAB, the C host's garbage (a 1.9 host's own
    // set_rng error path names policy 99).
    if run.said("unknown RNG policy 2880154539") {
        panic!(
            "the plugin read rng_policy from the 0xAB tail padding of a {claim} host's \
             16-byte RlxCompileOptions (a reader must take rng_policy only when \
             struct_size >= 24):\n{}",
            run.transcript()
        );
    }
    assert_eq!(run.code, Some(0), "{}", run.transcript());
    assert_eq!(
        run.stdout.lines().last(),
        Some("ok"),
        "{}",
        run.transcript()
    );
    // The cell really was the claimed minor's host.
    let size = match claim {
        "1.0" | "1.1" => 16,
        "1.2" | "1.3" => 24,
        "1.4" | "1.5" | "1.6" => 32,
        _ => 40,
    };
    assert!(
        run.stdout.contains(&format!("options struct_size {size})")),
        "{}",
        run.transcript()
    );
    // Its host table: 1.10 added `setting`.
    let host_size = if minor(claim) >= 10 { 72 } else { 64 };
    assert!(
        run.stdout
            .contains(&format!("(host table struct_size {host_size})")),
        "{}",
        run.transcript()
    );
    let custom = if claim == "1.0" {
        "custom ops: not used"
    } else {
        "custom op c_host.add1 unregistered: kernel_ctx_drop ran once"
    };
    assert!(run.stdout.contains(custom), "{}", run.transcript());
    // Error paths ran and were reported with their codes.
    for line in [
        "error path: supported_ops(NULL) -> INVALID_ARGUMENT",
        "error path: compile of bad text -> INVALID_ARGUMENT",
        "error path: run without input b ->",
        "error path: compile in unknown mode 7 -> UNSUPPORTED",
    ] {
        assert!(run.stdout.contains(line), "{line}\n{}", run.transcript());
    }
    // 1.8's run_into, used only when both sides know it (every plugin
    // these cells load is 1.8 or later).
    let run_into = if minor(claim) >= 8 {
        "run_into: output written into the host's buffer"
    } else {
        "run_into: not offered"
    };
    assert!(run.stdout.contains(run_into), "{}", run.transcript());
    if minor(claim) >= 8 {
        for line in [
            "run_into: a NULL-data slot received an OWNED output",
            "error path: run_into with a lent f32[4, 1] for an f32[2, 2] output -> \
             INVALID_ARGUMENT",
        ] {
            assert!(run.stdout.contains(line), "{line}\n{}", run.transcript());
        }
    }
    // 1.9's entries: never looked at by an older host.
    if minor(claim) < 9 {
        assert!(
            run.stdout.contains(&format!(
                "1.9 entries: not used (an ABI {claim} host has none)"
            )),
            "{}",
            run.transcript()
        );
        for entry in [
            "state:",
            "sharing:",
            "submits:",
            "memory_usage:",
            "clone:",
            "wait ",
        ] {
            assert!(
                !run.stdout.lines().any(|l| l.starts_with(entry)),
                "{entry}\n{}",
                run.transcript()
            );
        }
    }
}

/// What a 1.9 C host prints when it uses each 1.9 entry (the checks behind
/// each line passed, or it would have exited 1 before `ok`).
const USED_1_9: [&str; 25] = [
    // State: bind, list, REPLACE feeds, reads, overrides, skipped slots,
    // unbind.
    "state bind: s f32[2, 3] held (host buffer scribbled over after the call); list: s, role \
     STATE",
    "state REPLACE feed: 3 runs given only x; s = [3 3 3; 6 6 6] (3x), read back",
    "state read: s[3..5] = [6 6]; read_output: y[4..6] = [30 36]",
    "state override: s given for one run (10) -> output 0 = [11 ...], fed into s",
    "run_into: a SKIP slot was left as it was; the state it feeds still advanced",
    "state unbind: s is the caller's again (a run without it is refused)",
    // Its misuse, each with its code.
    "error path: state bind of an unknown name -> NOT_FOUND (6)",
    "error path: state bind of s with shape [3, 2] -> INVALID_ARGUMENT (1)",
    "error path: state read_output before any run -> INVALID_ARGUMENT (1)",
    "error path: state read of elements 5..7 of 6 -> INVALID_ARGUMENT (1)",
    "error path: state set_feed from an unknown output -> NOT_FOUND (6)",
    // Row feeds.
    "state ROWS feed: 4 steps each wrote its row of k on the plugin's side; k = [2 0; 4 -2; \
     6 -4; 8 -6]",
    "error path: state feed_rows to row 4 of a 4-row state -> INVALID_ARGUMENT (1)",
    // Clones and shared params.
    "clone: the clone started from s = 1 and ran on its own state and a's w; a's state (1 + \
     2x) untouched",
    "share_params: 1 param shared (w); the receiver computes with it",
    "clone: outlives the original, with its own rebound w",
    "error path: clone of a destroyed executable -> INVALID_ARGUMENT (1)",
    "error path: share_params from a pointer that is no executable of the plugin -> \
     INVALID_ARGUMENT (1)",
    // Submitted runs: a lent, an OWNED and a skipped slot each.
    "wait 1: output 0 lent, output 1 OWNED: as synchronous runs give",
    "wait 2: output 0 SKIP, output 1 lent: as synchronous runs give",
    "wait 3: output 0 OWNED, output 1 SKIP: as synchronous runs give",
    "error path: wait with nothing submitted -> INVALID_ARGUMENT (1)",
    // The root table's 1.9 functions (set_active_extent: see mlx_cell).
    "bind_param_range: w[2..4] = [10 20]; output 1 = [1 2 10 40 10 12]",
    "set_rng: seed 1234 draws another stream; seed 42 again draws the compile's, bit for bit",
    "memory_usage: binding 4 MiB of weights grew the plugin's active bytes by ",
];

// ------------------------------------------------------------ the MLX plugin

fn mlx_cell(claim: &str, mode: &str) {
    let lib = mlx_library();
    let run = run_c_host(&[
        "--claim".as_ref(),
        claim.as_ref(),
        "--mode".as_ref(),
        mode.as_ref(),
        "--huge".as_ref(),
        lib.as_os_str(),
    ]);
    assert_ok(&run, claim);
    // The plugin's RESOURCE_EXHAUSTED (1.6) as each host reads it: a host
    // before 1.6 does not know the code and reads INTERNAL.
    let code = if minor(claim) >= 6 {
        "RESOURCE_EXHAUSTED (8)"
    } else {
        "INTERNAL (4)"
    };
    assert!(
        run.stdout
            .contains(&format!("error path: compile of a 16 TB graph -> {code}")),
        "{}",
        run.transcript()
    );
    assert!(
        run.stdout.contains("descriptor: mlx "),
        "{}",
        run.transcript()
    );
    // The host's log sink got the plugin's INFO record.
    assert!(
        run.stderr.contains("[plugin INFO ") && run.stderr.contains("plugin ready"),
        "{}",
        run.transcript()
    );
    if minor(claim) >= 9 {
        // Every 1.9 entry the MLX plugin offers was used and checked.
        for line in USED_1_9 {
            assert!(run.stdout.contains(line), "{line}\n{}", run.transcript());
        }
        // Active extents: used when the plugin offers them (the root
        // field set), else reported absent, never called.
        let extent = if mlx().offers().active_extent {
            "set_active_extent: row 0 of 2 computed as the whole run computes it; cleared, \
             every row"
        } else {
            "executable_set_active_extent: not offered"
        };
        assert!(
            run.stdout.contains(extent),
            "{extent}\n{}",
            run.transcript()
        );
        let absent: Vec<&str> = run
            .stdout
            .lines()
            .filter(|l| l.contains("not offered") && !l.starts_with("executable_set_active_extent"))
            .collect();
        assert!(absent.is_empty(), "{absent:?}\n{}", run.transcript());
    }
}

macro_rules! mlx_cells {
    ($($name:ident: $claim:literal, $mode:literal;)*) => {
        $(
            #[test]
            fn $name() {
                mlx_cell($claim, $mode);
            }
        )*
    };
}

mlx_cells! {
    mlx_host_1_0_lazy: "1.0", "lazy";
    mlx_host_1_0_eager: "1.0", "eager";
    mlx_host_1_0_compiled: "1.0", "compiled";
    mlx_host_1_1_lazy: "1.1", "lazy";
    mlx_host_1_1_eager: "1.1", "eager";
    mlx_host_1_1_compiled: "1.1", "compiled";
    mlx_host_1_2_lazy: "1.2", "lazy";
    mlx_host_1_2_eager: "1.2", "eager";
    mlx_host_1_2_compiled: "1.2", "compiled";
    mlx_host_1_3_lazy: "1.3", "lazy";
    mlx_host_1_3_eager: "1.3", "eager";
    mlx_host_1_3_compiled: "1.3", "compiled";
    mlx_host_1_4_lazy: "1.4", "lazy";
    mlx_host_1_4_eager: "1.4", "eager";
    mlx_host_1_4_compiled: "1.4", "compiled";
    mlx_host_1_5_lazy: "1.5", "lazy";
    mlx_host_1_5_eager: "1.5", "eager";
    mlx_host_1_5_compiled: "1.5", "compiled";
    mlx_host_1_6_lazy: "1.6", "lazy";
    mlx_host_1_6_eager: "1.6", "eager";
    mlx_host_1_6_compiled: "1.6", "compiled";
    mlx_host_1_7_lazy: "1.7", "lazy";
    mlx_host_1_7_eager: "1.7", "eager";
    mlx_host_1_7_compiled: "1.7", "compiled";
    mlx_host_1_8_lazy: "1.8", "lazy";
    mlx_host_1_8_eager: "1.8", "eager";
    mlx_host_1_8_compiled: "1.8", "compiled";
    mlx_host_1_9_lazy: "1.9", "lazy";
    mlx_host_1_9_eager: "1.9", "eager";
    mlx_host_1_9_compiled: "1.9", "compiled";
    mlx_host_1_10_lazy: "1.10", "lazy";
    mlx_host_1_10_eager: "1.10", "eager";
    mlx_host_1_10_compiled: "1.10", "compiled";
}

/// A host of another major is refused in the frozen header with
/// VERSION_MISMATCH, and the C host stops there (exit 3), reading nothing
/// past the header.
#[test]
fn mlx_refuses_a_major_2_host() {
    let lib = mlx_library();
    let run = run_c_host(&["--claim".as_ref(), "2.0".as_ref(), lib.as_os_str()]);
    assert_eq!(run.code, Some(3), "{}", run.transcript());
    assert!(
        run.stdout.contains("refused: VERSION_MISMATCH (3): "),
        "{}",
        run.transcript()
    );
    assert!(
        run.stdout.contains("2.0.0") && run.stdout.contains("upgrade the plugin"),
        "the refusal names both versions and the fix:\n{}",
        run.transcript()
    );
    for past_header in ["table:", "descriptor:", "init:", "ok"] {
        assert!(
            !run.stdout.lines().any(|l| l.starts_with(past_header)),
            "{past_header}\n{}",
            run.transcript()
        );
    }
}

// -------------------------------------------------------- the fixture plugin

/// The C host's graph, y = act(x . w + b), written by rlx-ir itself.
fn graph_text(act: Activation) -> String {
    let f32s = |d: &[usize]| Shape::new(d, IrDType::F32);
    let mut g = Graph::new("g");
    let x = g.input("x", f32s(&[2, 3]));
    let w = g.param("w", f32s(&[3, 2]));
    let m = g.matmul(x, w, f32s(&[2, 2]));
    let b = g.input("b", f32s(&[2, 2]));
    let a = g.binary(BinaryOp::Add, m, b, f32s(&[2, 2]));
    let r = g.activation(act, a, f32s(&[2, 2]));
    g.set_outputs(vec![r]);
    rlx_ir::rlxmodel::to_text(&g).unwrap()
}

fn fixture_cell(claim: &str) {
    let lib = test_plugin("fixture");
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("g.rlxmodel");
    // Relu: the fixture's only activation; the text is rlx-ir's, handed
    // over with `--graph`.
    std::fs::write(&graph, graph_text(Activation::Relu)).unwrap();
    for mode in MODES {
        let run = run_c_host(&[
            "--claim".as_ref(),
            claim.as_ref(),
            "--mode".as_ref(),
            mode.as_ref(),
            "--activation".as_ref(),
            "relu".as_ref(),
            "--graph".as_ref(),
            graph.as_os_str(),
            "--setting".as_ref(),
            "RLX_FIXTURE_SETTING=from the C host".as_ref(),
            lib.as_os_str(),
        ]);
        assert_ok(&run, claim);
        // (1.10) The fixture asks for its setting at each compile: through
        // the host table of a 1.10 host; an older host's table ends before
        // `setting`, and the fixture's process environment lacks it.
        let asked = "[plugin INFO rlx_fixture_core] fixture setting RLX_FIXTURE_SETTING = \
                     \"from the C host\"";
        assert_eq!(
            run.stderr.contains(asked),
            minor(claim) >= 10,
            "{}",
            run.transcript()
        );
        assert!(
            run.stdout.contains("descriptor: fixture 0.1.0"),
            "{}",
            run.transcript()
        );
        assert!(
            run.stderr
                .contains("[plugin INFO rlx_fixture_core] fixture registered 6 lowerings"),
            "{}",
            run.transcript()
        );
        // The fixture's DEBUG and TRACE records are not forwarded past the
        // host's INFO.
        assert!(
            !run.stderr.contains("[plugin DEBUG") && !run.stderr.contains("[plugin TRACE"),
            "{}",
            run.transcript()
        );
        if claim != "1.0" {
            assert!(
                run.stdout
                    .contains("custom op fixture.scale2 (plugin, 1 in, 1 out)"),
                "{}",
                run.transcript()
            );
        }
        // A 1.5 (or later) host reads the 1.5 fields of the fixture's
        // records, an older host does not know them.
        let knows_1_5 = minor(claim) >= 5;
        let with_rule = "custom op fixture.scale2 (plugin, 1 in, 1 out) kind kernel, \
                         shape same as input 0\n";
        assert_eq!(
            run.stdout.contains(with_rule),
            knows_1_5,
            "{}",
            run.transcript()
        );
        if knows_1_5 {
            assert!(
                run.stdout.contains(
                    "custom op c_host.add1 (host, 1 in, 1 out) kind kernel, shape not declared"
                ),
                "{}",
                run.transcript()
            );
        }
        // The fixture (a 1.10 plugin) offers none of 1.9's entries: its
        // table reaches every 1.9 field, and each is NULL. A 1.9 host sees
        // that and calls none of them.
        if minor(claim) >= 9 {
            for entry in [
                "state",
                "sharing",
                "submits",
                "executable_bind_param_range",
                "executable_set_rng",
                "executable_set_active_extent",
                "memory_usage",
            ] {
                let line = format!("{entry}: not offered (NULL)\n");
                assert!(run.stdout.contains(&line), "{line}{}", run.transcript());
            }
        }
    }
}

#[test]
fn fixture_host_1_0() {
    fixture_cell("1.0");
}

#[test]
fn fixture_host_1_1() {
    fixture_cell("1.1");
}

#[test]
fn fixture_host_1_2() {
    fixture_cell("1.2");
}

#[test]
fn fixture_host_1_3() {
    fixture_cell("1.3");
}

#[test]
fn fixture_host_1_4() {
    fixture_cell("1.4");
}

#[test]
fn fixture_host_1_5() {
    fixture_cell("1.5");
}

#[test]
fn fixture_host_1_6() {
    fixture_cell("1.6");
}

#[test]
fn fixture_host_1_7() {
    fixture_cell("1.7");
}

#[test]
fn fixture_host_1_8() {
    fixture_cell("1.8");
}

#[test]
fn fixture_host_1_9() {
    fixture_cell("1.9");
}

#[test]
fn fixture_host_1_10() {
    fixture_cell("1.10");
}

/// A host of an older major than the plugin is refused too; the message
/// says to upgrade the host.
#[test]
fn fixture_refuses_a_major_0_host() {
    let lib = test_plugin("fixture");
    let run = run_c_host(&["--claim".as_ref(), "0.9".as_ref(), lib.as_os_str()]);
    assert_eq!(run.code, Some(3), "{}", run.transcript());
    assert!(
        run.stdout.contains("refused: VERSION_MISMATCH (3): ")
            && run.stdout.contains("upgrade the host"),
        "{}",
        run.transcript()
    );
}

/// The graph text inside c_host.c is what rlx-ir writes for the same graph
/// (so the C file tracks the format, not a hand-written dialect).
#[test]
fn c_host_builtin_graphs_are_what_rlx_ir_writes() {
    for (flag, act) in [("exp", Activation::Exp), ("relu", Activation::Relu)] {
        let run = run_c_host(&["--print-graph", "--activation", flag]);
        assert_eq!(run.code, Some(0), "{}", run.transcript());
        let parsed = rlx_ir::rlxmodel::from_text(&run.stdout)
            .unwrap_or_else(|e| panic!("{e}\n{}", run.stdout));
        assert_eq!(
            rlx_ir::rlxmodel::to_text(&parsed).unwrap(),
            graph_text(act),
            "the C host's {flag} graph"
        );
    }
}

/// The checks are not vacuous: a graph that computes something else
/// (x . w - b) fails the C host's reference comparison (exit 1).
#[test]
fn c_host_fails_when_the_result_differs() {
    let lib = test_plugin("fixture");
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("sub.rlxmodel");
    let text = graph_text(Activation::Relu).replace("Binary(Add)", "Binary(Sub)");
    assert!(text.contains("Binary(Sub)"), "{text}");
    std::fs::write(&graph, text).unwrap();
    let run = run_c_host(&[
        "--claim".as_ref(),
        "1.3".as_ref(),
        "--activation".as_ref(),
        "relu".as_ref(),
        "--graph".as_ref(),
        graph.as_os_str(),
        lib.as_os_str(),
    ]);
    assert_eq!(run.code, Some(1), "{}", run.transcript());
    assert!(
        run.stderr.contains("FAIL: run 1: element"),
        "{}",
        run.transcript()
    );
}

/// A library that does not load is a load error (exit 2), not a crash.
#[test]
fn c_host_reports_a_library_that_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("librlx_junk.so");
    std::fs::write(&junk, b"not an ELF file").unwrap();
    let run = run_c_host(&["--claim".as_ref(), "1.3".as_ref(), junk.as_os_str()]);
    assert_eq!(run.code, Some(2), "{}", run.transcript());
    assert!(run.stderr.contains("dlopen"), "{}", run.transcript());
}

/// ABI 1.4 from C: the MLX plugin lists its devices (the default first),
/// says which device an executable runs on, and refuses a device it does
/// not have with UNSUPPORTED naming the ones it has.
#[test]
fn mlx_devices_through_the_1_4_abi() {
    let lib = mlx_library();
    let run = run_c_host(&["--claim".as_ref(), "1.4".as_ref(), lib.as_os_str()]);
    assert_eq!(run.code, Some(0), "{}", run.transcript());
    let has_gpu = run.stdout.contains("device 0: gpu:0");
    let default = if has_gpu { "gpu:0" } else { "cpu:0" };
    assert!(
        run.stdout.contains(&format!("device 0: {default}"))
            && run
                .stdout
                .contains(&format!("executable device: {default}")),
        "{}",
        run.transcript()
    );
    // The CPU is always there, and can be asked for by name.
    let cpu = run_c_host(&[
        "--claim".as_ref(),
        "1.4".as_ref(),
        "--device".as_ref(),
        "cpu".as_ref(),
        lib.as_os_str(),
    ]);
    assert_eq!(cpu.code, Some(0), "{}", cpu.transcript());
    assert!(
        cpu.stdout.contains("executable device: cpu:0"),
        "{}",
        cpu.transcript()
    );
    // A GPU this machine lacks.
    let missing = if has_gpu { "gpu:64" } else { "gpu" };
    let gpu = run_c_host(&[
        "--claim".as_ref(),
        "1.4".as_ref(),
        "--device".as_ref(),
        missing.as_ref(),
        lib.as_os_str(),
    ]);
    assert_ne!(gpu.code, Some(0), "{}", gpu.transcript());
    assert!(
        gpu.stderr.contains("UNSUPPORTED (2): no device gpu:")
            && gpu.stderr.contains("; it has ")
            && gpu.stderr.contains("cpu:0 (cpu)"),
        "{}",
        gpu.transcript()
    );
}
