//! `rlx-host plugins doctor` and the dependency walk behind it
//! (`rlx_plugin_loader::deps`), on tiny C libraries built here with the
//! C compiler and laid out as the loader's rules need, and on the MLX
//! plugin directories of the build tree.
//!
//! Where the walk says a library loads or not, the test also asks the real
//! loader (`dlopen` in this process), so the model is checked against
//! glibc, not only against itself. Every fixture has its own sonames: a
//! soname loaded once in this process would satisfy later tests.

#![cfg(target_os = "linux")]

mod common;

use rlx_plugin_loader::deps::{self, DepWalk, Library, Outcome, ProbeResult, SearchEnv, Via};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Build `dir/lib{name}.so` (soname the same) from `src`.
fn build(dir: &Path, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = dir.join(format!("lib{name}.so"));
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let st = Command::new(cc())
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&c)
        .arg(format!("-Wl,-soname,lib{name}.so"))
        .args(extra)
        .status()
        .expect("the C compiler runs");
    assert!(st.success(), "compiling {}", out.display());
    std::fs::remove_file(&c).unwrap();
    out
}

/// A leaf library `lib{name}.so` exporting `int {name}(void)`.
fn leaf(dir: &Path, name: &str) -> PathBuf {
    build(
        dir,
        name,
        &format!("int {name}(void) {{ return 1; }}\n"),
        &[],
    )
}

/// `lib{name}.so` calling `dep` (built in `dep_dir`), linked with `link`
/// (the rpath options).
fn needing(dir: &Path, name: &str, dep: &str, dep_dir: &Path, link: &[&str]) -> PathBuf {
    let mut args: Vec<String> = link.iter().map(|s| s.to_string()).collect();
    args.push(format!("-L{}", dep_dir.display()));
    args.push(format!("-Wl,-rpath-link,{}", dep_dir.display()));
    args.push(format!("-l{dep}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    build(
        dir,
        name,
        &format!("int {dep}(void);\nint {name}(void) {{ return {dep}(); }}\n"),
        &args,
    )
}

const RPATH: &str = "-Wl,--disable-new-dtags";
const RUNPATH: &str = "-Wl,--enable-new-dtags";

/// The system's loader setup, with `LD_LIBRARY_PATH` as given and no
/// executable in the chain.
fn env(llp: Option<&str>) -> SearchEnv {
    SearchEnv {
        ld_library_path: llp.map(Into::into),
        executable: None,
        ..SearchEnv::from_process()
    }
}

fn lib<'a>(w: &'a DepWalk, name: &str) -> &'a Library {
    w.libraries
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("{name} not in the walk: {w:#?}"))
}

fn found_at(w: &DepWalk, name: &str) -> (PathBuf, Via) {
    match &lib(w, name).outcome {
        Outcome::Found { path, via, .. } => (path.clone(), via.clone()),
        o => panic!("{name}: {o:?}"),
    }
}

fn unresolved(w: &DepWalk) -> Vec<&str> {
    w.unresolved().map(|l| l.name.as_str()).collect()
}

/// The real loader's verdict: `Ok` when `dlopen` succeeds.
fn dlopen(path: &Path) -> Result<(), String> {
    // SAFETY: the fixtures are C libraries with no initialisers of their
    // own; they are never unloaded, as a host never unloads a plugin.
    unsafe {
        libloading::os::unix::Library::open(Some(path), libloading::os::unix::RTLD_NOW)
            .map(std::mem::forget)
            .map_err(|e| e.to_string())
    }
}

#[test]
fn an_origin_rpath_is_expanded_and_a_missing_library_named_with_every_place_searched() {
    let t = tempfile::tempdir().unwrap();
    let built = t.path().join("build");
    let plug = t.path().join("plug");
    let dep = leaf(&built, "d1dep");
    let fixture = needing(
        &plug,
        "d1fixture",
        "d1dep",
        &built,
        &[RPATH, "-Wl,-rpath,$ORIGIN/sub"],
    );
    let e = env(None);
    // The directory exists, the library does not: glibc remembers a
    // search directory that does not exist as absent for the rest of the
    // process, which would fail the second dlopen below.
    let sub = plug.join("sub");
    std::fs::create_dir_all(&sub).unwrap();

    let w = deps::walk(&fixture, &e);
    assert_eq!(w.root_problem, None);
    assert_eq!(unresolved(&w), ["libd1dep.so"], "{w:#?}");
    let l = lib(&w, "libd1dep.so");
    assert_eq!(l.outcome, Outcome::Missing);
    assert_eq!(l.needed_by, std::slice::from_ref(&fixture));
    let places: Vec<(&str, &Path)> = l
        .tried
        .iter()
        .map(|p| (p.via.key(), p.place.as_path()))
        .collect();
    let mut want: Vec<(&str, &Path)> = vec![
        ("rpath", sub.as_path()),
        ("cache", Path::new(&e.cache.source)),
    ];
    want.extend(e.default_dirs.iter().map(|d| ("default", d.as_path())));
    assert_eq!(places, want);
    assert_eq!(l.tried[0].via, Via::Rpath(fixture.clone()));
    // Whatever else it needs (the C library, when the linker kept it) is
    // found.
    assert!(w
        .libraries
        .iter()
        .filter(|l| l.name != "libd1dep.so")
        .all(Library::is_found));
    let err = dlopen(&fixture).unwrap_err();
    assert!(
        err.contains("libd1dep.so: cannot open shared object file"),
        "{err}"
    );

    std::fs::copy(&dep, sub.join("libd1dep.so")).unwrap();
    let w = deps::walk(&fixture, &e);
    assert!(w.complete(), "{w:#?}");
    assert_eq!(
        found_at(&w, "libd1dep.so"),
        (plug.join("sub/libd1dep.so"), Via::Rpath(fixture.clone()))
    );
    dlopen(&fixture).unwrap();
}

/// `top` finds `mid` through its own search path; `mid` (no paths of its
/// own) needs `leaf`, which sits beside it.
fn chain(root: &Path, tag: &str, kind: &str) -> PathBuf {
    let built = root.join("build");
    let deps_dir = root.join("top/deps");
    let leaf_lib = leaf(&built, &format!("{tag}leaf"));
    let mid = needing(
        &built,
        &format!("{tag}mid"),
        &format!("{tag}leaf"),
        &built,
        &[],
    );
    std::fs::create_dir_all(&deps_dir).unwrap();
    for f in [&leaf_lib, &mid] {
        std::fs::copy(f, deps_dir.join(f.file_name().unwrap())).unwrap();
    }
    needing(
        &root.join("top"),
        &format!("{tag}top"),
        &format!("{tag}mid"),
        &built,
        &[kind, "-Wl,-rpath,$ORIGIN/deps"],
    )
}

#[test]
fn an_rpath_serves_the_whole_chain_and_a_runpath_only_its_own_object() {
    let t = tempfile::tempdir().unwrap();
    let e = env(None);

    let r = t.path().join("rpath");
    let top = chain(&r, "d2", RPATH);
    let w = deps::walk(&top, &e);
    assert!(w.complete(), "{w:#?}");
    assert_eq!(
        found_at(&w, "libd2mid.so"),
        (r.join("top/deps/libd2mid.so"), Via::Rpath(top.clone()))
    );
    // The leaf is found through the RPATH of the object that loaded mid.
    assert_eq!(
        found_at(&w, "libd2leaf.so"),
        (r.join("top/deps/libd2leaf.so"), Via::Rpath(top.clone()))
    );
    assert_eq!(
        lib(&w, "libd2leaf.so").needed_by,
        [r.join("top/deps/libd2mid.so")]
    );
    dlopen(&top).unwrap();

    let rr = t.path().join("runpath");
    let top = chain(&rr, "d3", RUNPATH);
    let w = deps::walk(&top, &e);
    assert_eq!(
        found_at(&w, "libd3mid.so"),
        (rr.join("top/deps/libd3mid.so"), Via::Runpath(top.clone()))
    );
    assert_eq!(unresolved(&w), ["libd3leaf.so"]);
    let leaf = lib(&w, "libd3leaf.so");
    assert!(
        leaf.tried
            .iter()
            .all(|p| matches!(p.via, Via::Cache | Via::DefaultDirs)),
        "a RUNPATH must not reach a dependency's dependencies: {:#?}",
        leaf.tried
    );
    let err = dlopen(&top).unwrap_err();
    assert!(err.contains("libd3leaf.so"), "{err}");
}

#[test]
fn ld_library_path_comes_after_rpath_and_before_runpath() {
    let t = tempfile::tempdir().unwrap();
    let built = t.path().join("build");
    let llp = t.path().join("llp");
    let dep = leaf(&built, "d4dep");
    std::fs::create_dir_all(&llp).unwrap();
    std::fs::copy(&dep, llp.join("libd4dep.so")).unwrap();
    let list = format!("/nonexistent-doctor-dir:{}", llp.display());
    let e = env(Some(&list));

    let with_rpath = needing(
        &t.path().join("a"),
        "d4a",
        "d4dep",
        &built,
        &[RPATH, "-Wl,-rpath,$ORIGIN/r"],
    );
    std::fs::create_dir_all(t.path().join("a/r")).unwrap();
    std::fs::copy(&dep, t.path().join("a/r/libd4dep.so")).unwrap();
    let w = deps::walk(&with_rpath, &e);
    assert_eq!(
        found_at(&w, "libd4dep.so"),
        (
            t.path().join("a/r/libd4dep.so"),
            Via::Rpath(with_rpath.clone())
        )
    );
    std::fs::remove_file(t.path().join("a/r/libd4dep.so")).unwrap();
    let w = deps::walk(&with_rpath, &e);
    assert_eq!(
        found_at(&w, "libd4dep.so"),
        (llp.join("libd4dep.so"), Via::LdLibraryPath)
    );
    let tried: Vec<(&str, &Path)> = lib(&w, "libd4dep.so")
        .tried
        .iter()
        .map(|p| (p.via.key(), p.place.as_path()))
        .collect();
    assert_eq!(
        tried,
        [
            ("rpath", t.path().join("a/r").as_path()),
            ("ld_library_path", Path::new("/nonexistent-doctor-dir")),
            ("ld_library_path", llp.as_path()),
        ]
    );

    let with_runpath = needing(
        &t.path().join("b"),
        "d4b",
        "d4dep",
        &built,
        &[RUNPATH, "-Wl,-rpath,$ORIGIN/r"],
    );
    std::fs::create_dir_all(t.path().join("b/r")).unwrap();
    std::fs::copy(&dep, t.path().join("b/r/libd4dep.so")).unwrap();
    let w = deps::walk(&with_runpath, &e);
    assert_eq!(
        found_at(&w, "libd4dep.so"),
        (llp.join("libd4dep.so"), Via::LdLibraryPath)
    );
    let w = deps::walk(&with_runpath, &env(None));
    assert_eq!(
        found_at(&w, "libd4dep.so"),
        (
            t.path().join("b/r/libd4dep.so"),
            Via::Runpath(with_runpath.clone())
        )
    );
}

/// A copy of `src` with one byte changed.
fn patched(src: &Path, dst: &Path, at: usize, byte: u8) {
    let mut b = std::fs::read(src).unwrap();
    b[at] = byte;
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::write(dst, b).unwrap();
}

#[test]
fn a_library_of_another_class_or_machine_is_skipped_and_a_broken_one_stops_the_search() {
    let t = tempfile::tempdir().unwrap();
    let built = t.path().join("build");
    let e = env(None);
    // Two search directories: a/ first, b/ second.
    let plugin = |tag: &str| {
        let dep = leaf(&built, &format!("{tag}dep"));
        let root = t.path().join(tag);
        let lib = needing(
            &root,
            &format!("{tag}fix"),
            &format!("{tag}dep"),
            &built,
            &[RPATH, "-Wl,-rpath,$ORIGIN/a:$ORIGIN/b"],
        );
        (dep, root, lib)
    };

    // EI_CLASS (byte 4) says 32-bit: skipped, the copy in b/ is used.
    let (dep, root, fixture) = plugin("d6");
    let name = "libd6dep.so";
    patched(&dep, &root.join("a").join(name), 4, 1);
    let w = deps::walk(&fixture, &e);
    assert_eq!(unresolved(&w), [name]);
    let first = &lib(&w, name).tried[0];
    assert_eq!(first.place, root.join("a"));
    assert!(
        matches!(&first.result, ProbeResult::WrongKind(m) if m.contains("wrong ELF class: ELFCLASS32")),
        "{first:?}"
    );
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::copy(&dep, root.join("b").join(name)).unwrap();
    let w = deps::walk(&fixture, &e);
    assert_eq!(found_at(&w, name).0, root.join("b").join(name));
    assert!(matches!(
        lib(&w, name).tried[0].result,
        ProbeResult::WrongKind(_)
    ));
    dlopen(&fixture).unwrap();

    // e_machine (bytes 18-19) says AArch64: skipped too.
    let (dep, root, fixture) = plugin("d7");
    let name = "libd7dep.so";
    patched(&dep, &root.join("a").join(name), 18, 183);
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::copy(&dep, root.join("b").join(name)).unwrap();
    let w = deps::walk(&fixture, &e);
    assert_eq!(found_at(&w, name).0, root.join("b").join(name));
    assert!(
        matches!(&lib(&w, name).tried[0].result, ProbeResult::WrongKind(m) if m.contains("wrong machine: AArch64")),
        "{:?}",
        lib(&w, name).tried
    );
    dlopen(&fixture).unwrap();

    // Not ELF at all: the loader stops with an error at the first file.
    let (dep, root, fixture) = plugin("d8");
    let name = "libd8dep.so";
    std::fs::create_dir_all(root.join("a")).unwrap();
    // Longer than an ELF header, so that the loader reads it as one.
    let script = "/* GNU ld script: not a library the loader can map */\nINPUT(-lsomething)\n";
    std::fs::write(root.join("a").join(name), script).unwrap();
    std::fs::create_dir_all(root.join("b")).unwrap();
    std::fs::copy(&dep, root.join("b").join(name)).unwrap();
    let w = deps::walk(&fixture, &e);
    assert_eq!(unresolved(&w), [name]);
    let l = lib(&w, name);
    assert!(
        matches!(&l.outcome, Outcome::Unusable { path, detail, .. }
            if *path == root.join("a").join(name) && detail.contains("not an ELF file")),
        "{l:?}"
    );
    assert_eq!(
        l.tried.len(),
        1,
        "the search must stop at the unusable file"
    );
    let err = dlopen(&fixture).unwrap_err();
    assert!(err.contains("invalid ELF header"), "{err}");

    // Truncated: the same.
    let (dep, root, fixture) = plugin("d9");
    let name = "libd9dep.so";
    let bytes = std::fs::read(&dep).unwrap();
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::write(root.join("a").join(name), &bytes[..bytes.len().min(1024)]).unwrap();
    let w = deps::walk(&fixture, &e);
    assert!(
        matches!(&lib(&w, name).outcome, Outcome::Unusable { detail, .. } if detail.contains("truncated")),
        "{:?}",
        lib(&w, name)
    );
}

#[test]
fn lib_and_platform_tokens_take_the_environments_values() {
    let t = tempfile::tempdir().unwrap();
    let built = t.path().join("build");
    let dep = leaf(&built, "d10dep");
    let plug = t.path().join("plug");
    let fixture = needing(
        &plug,
        "d10fix",
        "d10dep",
        &built,
        &[RPATH, "-Wl,-rpath,$ORIGIN/${PLATFORM}/$LIB"],
    );
    let dir = plug.join("someplatform/somelib");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&dep, dir.join("libd10dep.so")).unwrap();
    let e = SearchEnv {
        platform: "someplatform".into(),
        lib: "somelib".into(),
        ..env(None)
    };
    let w = deps::walk(&fixture, &e);
    assert_eq!(found_at(&w, "libd10dep.so").0, dir.join("libd10dep.so"));
}

#[test]
fn odd_plugin_files_are_reported_not_walked() {
    let t = tempfile::tempdir().unwrap();
    let e = env(None);
    let good = leaf(&t.path().join("build"), "d11ok");
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("libempty.so", vec![], "not an ELF file"),
        ("libtext.so", b"hello\n".to_vec(), "not an ELF file"),
        (
            "libshort.so",
            bytes[..40].to_vec(),
            "shorter than an ELF header",
        ),
        ("libcut.so", bytes[..1024].to_vec(), "truncated"),
        (
            "lib32.so",
            {
                let mut b = bytes.clone();
                b[4] = 1;
                b
            },
            "wrong ELF class",
        ),
    ];
    for (name, content, want) in cases {
        let p = t.path().join(name);
        std::fs::write(&p, content).unwrap();
        let w = deps::walk(&p, &e);
        let problem = w.root_problem.clone().unwrap_or_default();
        assert!(problem.contains(want), "{name}: {problem:?}");
        assert!(w.libraries.is_empty() && !w.complete());
    }
    let w = deps::walk(&t.path().join("absent.so"), &e);
    assert_eq!(w.root_problem.as_deref(), Some("no such file"));
    let w = deps::walk(t.path(), &e);
    assert!(w.root_problem.unwrap().contains("directory"));
}

/// Two plugin directories, each `libd12plug.so` needing `libd12shared.so`
/// from its own `lib/`.
fn twin_dirs(root: &Path, same_file: bool) -> (PathBuf, PathBuf) {
    let built = root.join("build");
    let shared = leaf(&built, "d12shared");
    let mut plugins = Vec::new();
    for d in ["one", "two"] {
        let dir = root.join(d);
        let p = needing(
            &dir,
            "d12plug",
            "d12shared",
            &built,
            &[RPATH, "-Wl,-rpath,$ORIGIN/lib"],
        );
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        let dst = dir.join("lib/libd12shared.so");
        if same_file && d == "two" {
            std::fs::hard_link(root.join("one/lib/libd12shared.so"), &dst).unwrap();
        } else {
            std::fs::copy(&shared, &dst).unwrap();
        }
        plugins.push(p);
    }
    (plugins.remove(0), plugins.remove(0))
}

#[test]
fn two_plugins_shipping_one_soname_are_flagged() {
    let t = tempfile::tempdir().unwrap();
    let e = env(None);
    let (one, two) = twin_dirs(&t.path().join("copies"), false);
    let (w1, w2) = (deps::walk(&one, &e), deps::walk(&two, &e));
    let clashes = deps::soname_clashes(&[&w1, &w2]);
    assert!(clashes[0].is_empty());
    assert_eq!(clashes[1].len(), 1, "{clashes:?}");
    let c = &clashes[1][0];
    assert_eq!(c.soname, "libd12shared.so");
    assert_eq!(c.other_plugin, one);
    assert_eq!(
        c.other_path,
        one.parent().unwrap().join("lib/libd12shared.so")
    );
    assert_eq!(
        c.path.as_deref(),
        Some(two.parent().unwrap().join("lib/libd12shared.so").as_path())
    );

    // One file under two paths is loaded once: nothing to flag.
    let (one, two) = twin_dirs(&t.path().join("linked"), true);
    let (w1, w2) = (deps::walk(&one, &e), deps::walk(&two, &e));
    assert!(deps::soname_clashes(&[&w1, &w2]).iter().all(Vec::is_empty));

    // The CLI over discovery shows it on the second directory.
    let (one, two) = twin_dirs(&t.path().join("cli"), false);
    let list = std::env::join_paths([one.parent().unwrap(), two.parent().unwrap()]).unwrap();
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .args(["plugins", "doctor", "--json"])
        .env("RLX_BACKEND_PLUGINS", list)
        .env("RLX_HOME", home.path())
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    let find = |p: &Path| {
        v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("{} not among {v:#}", p.display()))
            .clone()
    };
    let (c1, c2) = (find(&one), find(&two));
    assert_eq!(c1["ok"], true);
    assert_eq!(c1["warnings"].as_array().unwrap().len(), 0);
    let w = c2["warnings"][0].as_str().unwrap();
    assert!(
        w.contains("shares soname libd12shared.so with")
            && w.contains(&one.display().to_string())
            && w.contains("only one is loaded per process"),
        "{w}"
    );
}

fn doctor(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_rlx-host"))
        .args(["plugins", "doctor"])
        .args(args)
        .env_remove("RLX_BACKEND_PLUGINS")
        .env_remove("LD_LIBRARY_PATH")
        .env("RLX_HOME", home.path())
        .output()
        .expect("spawn rlx-host")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_cli_names_the_missing_library_and_sets_the_exit_status() {
    let t = tempfile::tempdir().unwrap();
    let built = t.path().join("build");
    let plug = t.path().join("plug");
    let dep = leaf(&built, "d13dep");
    let fixture = needing(
        &plug,
        "d13fix",
        "d13dep",
        &built,
        &[RPATH, "-Wl,-rpath,$ORIGIN/sub"],
    );
    let sub = plug.join("sub");
    let path = fixture.to_str().unwrap();

    let o = doctor(&[path]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("libd13dep.so") && out.contains("MISSING"),
        "{out}"
    );
    let searched = |dir: &Path, via: &str| {
        out.lines().any(|l| {
            let l = l.trim();
            l.starts_with(&format!("{} ", dir.display())) && l.ends_with(via)
        })
    };
    assert!(searched(&sub, "RPATH of libd13fix.so"), "{out}");
    assert!(
        out.contains("rejected: a library it depends on is missing: libd13dep.so"),
        "{out}"
    );

    let o = doctor(&[path, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let c = &v["candidates"][0];
    assert_eq!(c["missing"], serde_json::json!(["libd13dep.so"]));
    let l = c["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "libd13dep.so")
        .unwrap();
    assert_eq!(l["status"], "missing");
    assert_eq!(l["tried"][0]["place"], sub.display().to_string());
    assert_eq!(l["tried"][0]["via"], "rpath");
    assert_eq!(l["tried"][0]["via_object"], path);

    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&dep, sub.join("libd13dep.so")).unwrap();
    let o = doctor(&[path]);
    let out = stdout(&o);
    // Every library resolves; that it is no RLX plugin is the load
    // outcome, not a dependency problem.
    assert_eq!(o.status.code(), Some(0), "{out}");
    let found = sub.join("libd13dep.so").display().to_string();
    assert!(
        out.lines().any(|l| {
            let mut words = l.split_whitespace();
            words.next() == Some("libd13dep.so") && words.next() == Some(found.as_str())
        }),
        "{out}"
    );
    assert!(out.contains("not an RLX plugin"), "{out}");

    // PATH naming no plugin is a usage error.
    let o = doctor(&[t.path().join("absent.so").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1);
    let empty = t.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = doctor(&[empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("without a plugin library"));
}

#[test]
fn the_mlx_plugin_directory_resolves_libmlx_inside_itself() {
    let dir = common::mlx_plugin_dir();
    let o = doctor(&[dir.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("load     loaded: mlx"), "{out}");
    assert!(out.contains("devices  cpu:0"), "{out}");
    let o = doctor(&[dir.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &v["candidates"][0];
    let libmlx = c["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "libmlx.so")
        .unwrap_or_else(|| panic!("no libmlx.so in {c:#}"));
    assert_eq!(libmlx["status"], "found");
    let canon = dir.canonicalize().unwrap();
    assert_eq!(
        libmlx["path"],
        canon.join("mlx/lib/libmlx.so").display().to_string()
    );
    assert_eq!(libmlx["via"], "rpath");
    assert_eq!(c["load"]["state"], "loaded");
    assert_eq!(c["load"]["devices"][0], "cpu:0");
}

#[test]
fn the_cuda_plugin_directory_names_the_missing_driver_library() {
    let dir = common::profile_dir().join("plugins").join("mlx-cuda");
    if !dir
        .join(rlx_plugin_loader::library_file_name("rlx_mlx"))
        .exists()
    {
        println!(
            "skipped: {} is not laid out (RLX_MLX_CUDA=1 builds it)",
            dir.display()
        );
        return;
    }
    if Path::new("/dev/nvidia0").exists() {
        println!("skipped: this machine has an NVIDIA device");
        return;
    }
    let cache = deps::LdCache::system();
    if !cache
        .lookup("libcuda.so.1", &SearchEnv::from_process().expect)
        .is_empty()
    {
        println!("skipped: the library cache has libcuda.so.1 (a driver without a device)");
        return;
    }
    let o = doctor(&[dir.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &v["candidates"][0];
    assert!(
        c["missing"]
            .as_array()
            .unwrap()
            .contains(&Value::from("libcuda.so.1")),
        "{c:#}"
    );
    let o = doctor(&[dir.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(
        out.contains("libcuda.so.1") && out.contains("MISSING"),
        "{out}"
    );
}

#[test]
fn the_mlx_plugin_reports_its_build_and_judges_its_kernel_cache_as_compiled_mode_will() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::mlx_plugin_dir();
    let tmp = tempfile::tempdir().unwrap();
    let run = || {
        let home = tempfile::tempdir().unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_rlx-host"))
            .args(["plugins", "doctor", dir.to_str().unwrap()])
            .env_remove("RLX_BACKEND_PLUGINS")
            .env("RLX_HOME", home.path())
            .env("TMPDIR", tmp.path())
            .output()
            .expect("spawn rlx-host");
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
        stdout(&o)
    };
    let cache = tmp.path().join("mlx/0.32.4/cpu");
    let out = run();
    assert!(out.contains("  build    mlx.version = 0.32.4"), "{out}");
    assert!(out.contains("  build    blas = "), "{out}");
    let line = format!("  cache    CPU kernels {}: not made yet", cache.display());
    assert!(out.contains(&line), "{out}");

    // A cache another user could write into is refused, with what to do.
    std::fs::create_dir_all(&cache).unwrap();
    let mlx = tmp.path().join("mlx");
    std::fs::set_permissions(&mlx, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run();
    let line = format!("  cache    CPU kernels {}: refused: ", cache.display());
    assert!(out.contains(&line), "{out}");
    assert!(
        out.contains("hint: compiled mode will not load kernels from it"),
        "{out}"
    );

    // Our own 0755 directories (as MLX makes them) are fine.
    for d in [&mlx, &tmp.path().join("mlx/0.32.4"), &cache] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = run();
    assert!(
        out.contains("ok (yours; compiled mode tightens it to mode 0700)"),
        "{out}"
    );
}
