//! `rlx-host plugins check PATH`, the conformance kit
//! (`rlx_plugin_conformance`), on the plugins of this workspace: the MLX
//! plugin directory, the fixture test plugin, the purpose-built broken
//! plugins, an ABI 1.0 plugin and (when the tests crate has built it) the
//! C plugin in every minor. The kit is also called as a library, as a
//! plugin author's test would.

mod common;

use rlx_plugin_conformance::{self as conformance, Outcome};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn test_plugin(name: &str) -> PathBuf {
    common::built(&format!("rlx_test_{name}"))
}

/// `rlx-host plugins check PATH [--json]`, discovery limited to PATH.
fn check(path: &Path, json: bool) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut args = vec!["plugins", "check", path.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    std::process::Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .args(&args)
        .env_remove("RLX_BACKEND_PLUGINS")
        .env("RLX_HOME", home.path())
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("spawn rlx-host")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn report(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            stdout(o),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn checks<'a>(v: &'a Value, outcome: &str) -> Vec<&'a Value> {
    v["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["outcome"] == outcome)
        .collect()
}

/// Every check ok or skipped; the exit status says the same.
fn assert_passes(o: &Output) -> Value {
    let v = report(o);
    let unexpected: Vec<String> = checks(&v, "fail")
        .iter()
        .map(|c| format!("{}: {}", c["name"], c["detail"]))
        .collect();
    assert!(
        unexpected.is_empty(),
        "failed checks:\n{}",
        unexpected.join("\n")
    );
    assert_eq!(o.status.code(), Some(0), "{}", stdout(o));
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["loaded"], true);
    v
}

fn ok_count(v: &Value, prefix: &str) -> usize {
    checks(v, "ok")
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with(prefix))
        .count()
}

#[test]
fn the_mlx_plugin_directory_passes_with_its_eager_entries_checked() {
    let o = check(&common::mlx_plugin_dir(), true);
    let v = assert_passes(&o);
    assert_eq!(v["plugin"], "mlx 0.1.0");
    let eager = ok_count(&v, "eager ");
    assert!(eager >= 10, "only {eager} eager cases ran: {}", stdout(&o));
    // Every area ran, in every mode.
    for name in [
        "handshake: entry returns the same table",
        "tables: op list matches lowering table",
        "eager Binary.Add f32",
        "eager: too few inputs (Binary.Add f32 with 1)",
        "exec lazy: bind_param + run",
        "exec eager: bind_param_shared + run",
        "exec compiled: run_into",
        "exec compiled: destroy",
        "error: unknown mode",
        "error: n_outputs one too many",
        "status: round trip of every code",
        "custom: unregister drops the kernel context once",
    ] {
        let c = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} did not run"));
        assert_eq!(c["outcome"], "ok", "{name}: {}", c["detail"]);
    }
    // Ops the kit has no graph for are skipped, with the reason.
    let skips = checks(&v, "skip");
    assert!(skips
        .iter()
        .any(|c| c["detail"] == "no generated case for Conv"));
    // The MLX plugin offers every part of 1.9, 1.11's mapped host memory
    // and 1.12's graph forms: each ran, none "not offered".
    for name in ABI_1_9_CHECKS.iter().chain(&[
        "host memory: refusals change nothing",
        "host memory: runs read and write mapped memory",
        "graph forms: names",
        "graph forms: refusals",
        "graph forms: a graph runs as its text does",
    ]) {
        assert_eq!(outcome(&v, name), "ok", "{name}: {v}");
    }
    assert!(
        !skips
            .iter()
            .any(|c| c["name"].as_str().unwrap().ends_with(": not offered")),
        "{v}"
    );
}

/// Every 1.9 check the MLX plugin (which offers all of 1.9) must pass.
const ABI_1_9_CHECKS: [&str; 50] = [
    "1.9 tables: consistent",
    "state lazy: REPLACE feed keeps a running sum",
    "state eager: REPLACE feed keeps a running sum",
    "state compiled: REPLACE feed keeps a running sum",
    "state: bind, list, bind again",
    "state: read whole and in part",
    "state: a given input overrides it for one run",
    "state: read_output reads the last run's outputs",
    "state: unbind gives the input back",
    "state: a failed run applies no feed",
    "state: bind to a name that is no input",
    "state: unknown state name",
    "state: unknown output name",
    "state: bind of another dtype",
    "state: bind of another shape",
    "state: read of another dtype",
    "state: read past the end",
    "state: read_output before any run",
    "state: read_output past the end",
    "state: REPLACE feed from an output of another shape",
    "state: unknown feed kind",
    "state: lent buffers that break the rules",
    "state: null pointers",
    "state rows: feed_rows grows a cache a row a step",
    "state rows: feed_rows of one state by name",
    "state rows: rows out of range are refused, nothing written",
    "state rows: feed_rows before any run",
    "state rows: feed_rows with no state fed rows",
    "clone: copies the state, shares the params",
    "clone: goes its own way after",
    "clone: of a destroyed executable",
    "clone: NULL out",
    "share_params: dst reads src's params",
    "share_params: a mismatch is refused, nothing changed",
    "share_params: handles that are not live executables",
    "submit: results equal synchronous runs",
    "submit: a synchronous run runs after the submitted ones",
    "submit: wait with nothing submitted",
    "submit: a bad input is refused and queues nothing",
    "submit: 64 in flight, one more RESOURCE_EXHAUSTED",
    "submit: destroy with runs in flight",
    "param range: overwrites only its elements",
    "param range: misuse refused, nothing changed",
    "param range: a clone's shared param keeps its values",
    "set_rng: as a compile with that policy and seed",
    "set_rng: an unknown policy is UNSUPPORTED",
    "active extent: live rows exact, then cleared",
    "active extent: out of bounds refused",
    "skipped slots: run_into leaves a skipped slot as it was",
    "skipped slots: a state fed from a skipped output sees it",
];

/// The outcome of the check called `name` (panics if it did not run).
fn outcome<'a>(v: &'a Value, name: &str) -> &'a str {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} did not run: {v}"))["outcome"]
        .as_str()
        .unwrap()
}

#[test]
fn the_fixture_plugin_passes_and_prints_one_line_per_check() {
    let o = check(&common::fixture_path(), false);
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("checking "), "{text}");
    assert!(lines.contains(&"ok   handshake: load"), "{text}");
    assert!(
        lines.contains(&"ok   exec compiled: bind_param + run"),
        "{text}"
    );
    // The fixture runs only Relu: other activations are skipped as
    // UNSUPPORTED, not failed.
    assert!(
        lines.iter().any(
            |l| l.starts_with("skip eager Activation.Exp f32: the plugin answered UNSUPPORTED")
        ),
        "{text}"
    );
    for l in &lines[1..lines.len() - 1] {
        assert!(
            l.starts_with("ok   ") || l.starts_with("skip ") || l.starts_with("FAIL "),
            "{l}"
        );
        assert!(!l.starts_with("FAIL "), "{l}");
    }
    assert!(
        lines.last().unwrap().starts_with("plugin fixture 0.1.0: "),
        "{text}"
    );
    let v = assert_passes(&check(&common::fixture_path(), true));
    // The fixture offers nothing of 1.9 but lent (and so skipped) slots.
    assert_eq!(outcome(&v, "1.9 tables: consistent"), "ok");
    assert_eq!(
        outcome(
            &v,
            "skipped slots: run_into leaves a skipped slot as it was"
        ),
        "ok"
    );
    for part in [
        "state",
        "clone",
        "share_params",
        "submit",
        "memory_usage",
        "host memory",
    ] {
        assert_eq!(outcome(&v, &format!("{part}: not offered")), "skip", "{v}");
    }
}

#[test]
fn a_plugin_whose_registration_fails_exits_2_naming_the_problem() {
    let o = check(&test_plugin("init_fails"), false);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let text = stdout(&o);
    let fail = text
        .lines()
        .find(|l| l.starts_with("FAIL handshake: load: "))
        .unwrap_or_else(|| panic!("no FAIL line: {text}"));
    assert!(
        fail.contains("registration failed")
            && fail.contains("cannot register lowerings: backend library not initialised"),
        "{fail}"
    );
    assert!(text.contains("the plugin did not load"), "{text}");
}

#[test]
fn a_layout_mismatch_exits_2_naming_the_problem_in_json_too() {
    let o = check(&test_plugin("layout_mismatch"), true);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let v = report(&o);
    assert_eq!(v["loaded"], false);
    assert_eq!(v["exit_code"], 2);
    let fails = checks(&v, "fail");
    assert_eq!(fails.len(), 1, "{v}");
    assert_eq!(fails[0]["name"], "handshake: load");
    assert!(
        fails[0]["detail"]
            .as_str()
            .unwrap()
            .contains("ABI layout mismatch"),
        "{v}"
    );
}

#[test]
fn an_abi_1_0_plugin_passes_with_the_custom_op_checks_skipped() {
    let o = check(&test_plugin("prev_minor"), true);
    let v = assert_passes(&o);
    let skip = checks(&v, "skip");
    assert!(
        skip.iter().any(|c| c["name"] == "custom ops"
            && c["detail"]
                .as_str()
                .unwrap()
                .contains("ABI 1.0 plugin has no custom-op registry")),
        "{v}"
    );
    assert!(skip
        .iter()
        .any(|c| c["name"] == "tables: custom-op registry"));
    assert_eq!(ok_count(&v, "custom:"), 0);
}

#[test]
fn the_library_api_gives_the_report_the_cli_prints() {
    let r = conformance::check(common::fixture_path());
    assert!(r.loaded);
    assert_eq!(r.plugin.as_deref(), Some("fixture 0.1.0"));
    let c = r.get("exec eager: bind_param_shared + run").expect("ran");
    assert_eq!(c.outcome, Outcome::Ok);
    let c = r.get("eager MatMul.batched f32").expect("ran");
    assert!(matches!(&c.outcome, Outcome::Skip(why) if why.contains("2-D only")));
    let (ok, fail, skip) = r.counts();
    assert_eq!(ok + fail + skip, r.checks.len());
    assert_eq!(r.exit_code(), if fail == 0 { 0 } else { 1 });
    assert_eq!(r.to_json()["summary"]["ok"], ok);
    assert!(r.failures().is_empty(), "{}", r.text());
    assert!(r.text().ends_with(&format!("{}\n", r.summary())));
    // rlx-host re-exports the kit under its earlier path.
    let again = rlx_host::conformance::check(common::fixture_path());
    assert_eq!(again.checks.len(), r.checks.len());
    let missing = conformance::check(Path::new("/nonexistent/librlx_nothing.so"));
    assert!(!missing.loaded);
    assert_eq!(missing.exit_code(), 2);
    assert!(
        matches!(&missing.checks[0].outcome, Outcome::Fail(why) if why.contains("no such file"))
    );
}

/// The C plugin's builds, from the newest output of the tests crate's
/// build script (older hashes may hold stale builds).
fn c_plugin_builds() -> Vec<(u32, PathBuf)> {
    let build = common::profile_dir().join("build");
    let file = rlx_plugin_loader::library_file_name("rlx_c_plugin");
    let newest = std::fs::read_dir(&build)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| {
            d.file_name()
                .to_string_lossy()
                .starts_with("rlx-plugin-tests-")
        })
        .map(|d| d.path().join("out/c-plugins"))
        .filter_map(|d| {
            let t = std::fs::metadata(d.join("1.3").join(&file))
                .ok()?
                .modified()
                .ok()?;
            Some((t, d))
        })
        .max();
    let Some((_, dir)) = newest else {
        return Vec::new();
    };
    (0..=rlx_plugin_api::ABI_VERSION.minor)
        .map(|minor| (minor, dir.join(format!("1.{minor}")).join(&file)))
        .filter(|(_, p)| p.exists())
        .collect()
}

#[test]
fn the_c_plugin_passes_in_every_minor_when_it_is_built() {
    let builds = c_plugin_builds();
    if builds.is_empty() {
        eprintln!("the C plugin is not built (cargo build -p rlx-plugin-tests --tests); skipped");
        return;
    }
    for (minor, path) in builds {
        let o = check(&path, true);
        let v = report(&o);
        assert_eq!(checks(&v, "fail").len(), 0, "1.{minor}: {v}");
        assert_eq!(o.status.code(), Some(0), "1.{minor}");
        // Not a Rust plugin: no layout, and the kit still checks the tag.
        assert!(ok_count(&v, "handshake: rust layout tag") == 1, "1.{minor}");
        assert!(ok_count(&v, "eager ") >= 5, "1.{minor}: {v}");
        assert_eq!(ok_count(&v, "custom:") > 0, minor >= 1, "1.{minor}");
        // 1.8's run_into, in each mode, only where the build offers it.
        let into = checks(&v, "ok")
            .iter()
            .filter(|c| c["name"].as_str().unwrap().ends_with(": run_into"))
            .count();
        assert_eq!(into, if minor >= 8 { 3 } else { 0 }, "1.{minor}: {v}");
        // 1.9: state without row feeds; nothing else of 1.9.
        if minor >= 9 {
            for name in [
                "state: unknown output name",
                "state rows: ROWS without feed_rows is UNSUPPORTED",
                "skipped slots: a state fed from a skipped output sees it",
            ] {
                assert_eq!(outcome(&v, name), "ok", "{name}: {v}");
            }
            assert_eq!(outcome(&v, "state rows: not offered"), "skip");
            assert_eq!(outcome(&v, "submit: not offered"), "skip");
            // 1.11's host_memory and 1.12's graph_forms are NULL in the
            // builds that reach them, absent before.
            assert_eq!(outcome(&v, "host memory: not offered"), "skip");
            assert_eq!(outcome(&v, "graph forms: not offered"), "skip");
        } else {
            // Before 1.9 nothing of it runs: "not offered", each part.
            assert_eq!(outcome(&v, "state: not offered"), "skip", "1.{minor}");
        }
    }
}
