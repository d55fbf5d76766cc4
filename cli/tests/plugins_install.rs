//! `rlx-host plugins install / list / remove` on release archives of the
//! build tree's MLX plugin directory: verification before anything is
//! written, atomic replacement with the previous version kept, roll back
//! of a plugin that does not load, and a running program that keeps its
//! plugin while an install replaces it.
//!
//! The archives are packed here with `rlx_plugin_package::pack`, as `cargo
//! xtask package` packs them. A "0.1.1" is the same library with its
//! embedded manifest's version bytes changed (`patch_manifest`): the
//! installer reads versions from manifests, so this is a newer release to
//! it, and its code is the build's, so it loads.

mod common;

use rlx_plugin_package::{self as pkg, PackInput};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary RLX home, and a copy of `rlx-host` outside the build tree
/// (next to the build tree's binary, discovery would also find
/// `target/<profile>/plugins/mlx`).
struct Env {
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("bin")).unwrap();
        std::fs::copy(
            env!("CARGO_BIN_EXE_rlx-host"),
            tmp.path().join("bin/rlx-host"),
        )
        .unwrap();
        Env { tmp }
    }
    fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }
    fn plugins(&self) -> PathBuf {
        self.home().join("plugins")
    }
    fn rlx_host(&self, args: &[&str]) -> Output {
        Command::new(self.tmp.path().join("bin/rlx-host"))
            .args(args)
            .env("RLX_HOME", self.home())
            .env_remove("RLX_BACKEND_PLUGINS")
            .output()
            .expect("rlx-host runs")
    }
    fn install(&self, archive: &Path, more: &[&str]) -> (bool, String) {
        let mut args = vec!["plugins", "install", archive.to_str().unwrap()];
        args.extend_from_slice(more);
        let o = self.rlx_host(&args);
        (o.status.success(), text(&o))
    }
    /// A new process finds the installed plugin and runs a model on it,
    /// agreeing with the CPU backend.
    fn assert_runs(&self) {
        let model = tiny_model(self.tmp.path());
        let o = self.rlx_host(&["run", "--backend", "mlx", "--compare", "cpu", &model]);
        assert!(o.status.success(), "{}", text(&o));
    }
    /// The installed version, from its record.
    fn installed_version(&self) -> Option<String> {
        pkg::install::installed(&self.plugins().join("mlx")).map(|i| i.version)
    }
    /// Nothing under plugins/, and nothing left in the installer's area
    /// but its lock.
    fn assert_untouched(&self, what: &str) {
        assert!(!self.plugins().exists(), "{what}: plugins/ was written");
        let left: Vec<_> = std::fs::read_dir(self.home().join("install"))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(
            left.iter().all(|n| n == "lock" || n == "downloads"),
            "{what}: left behind {left:?}"
        );
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The MLX plugin directory, with its library's debug info stripped (a
/// smaller archive packs in seconds), `edit`ed, packed as `version` for
/// `platform`, with a SHA256SUMS beside it. Each variant is packed once
/// per test binary (`key` names it) under cargo's temporary directory for
/// tests; a test that changes the files beside it works on a copy.
fn archive(key: &str, version: &str, platform: &str, edit: impl Fn(&Path)) -> PathBuf {
    type Once = std::sync::Arc<std::sync::OnceLock<PathBuf>>;
    static MADE: std::sync::Mutex<Vec<(String, Once)>> = std::sync::Mutex::new(Vec::new());
    let once: Once = {
        let mut made = MADE.lock().unwrap();
        match made.iter().find(|(k, _)| k == key) {
            Some((_, o)) => o.clone(),
            None => {
                let o = Once::default();
                made.push((key.to_string(), o.clone()));
                o
            }
        }
    };
    once.get_or_init(|| pack_variant(key, version, platform, edit))
        .clone()
}

fn pack_variant(key: &str, version: &str, platform: &str, edit: impl Fn(&Path)) -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins_install");
    let work = root.join(key);
    let _ = std::fs::remove_dir_all(&work);
    let dir = work.join("src/mlx");
    copy_tree(&common::mlx_plugin_dir(), &dir);
    let lib = dir.join("librlx_mlx.so");
    let stripped = Command::new("strip")
        .arg("--strip-debug")
        .arg(&lib)
        .status();
    assert!(
        stripped.is_ok_and(|s| s.success()),
        "strip --strip-debug {}",
        lib.display()
    );
    if version != "0.1.0" {
        patch_manifest(&lib, |m| {
            let at = find(m, b"version=0.1.0\0").expect("the manifest's version entry");
            m[at..at + 14].copy_from_slice(format!("version={version}\0").as_bytes());
        });
    }
    edit(&dir);
    let input = PackInput {
        dir,
        name: "mlx".into(),
        version: version.into(),
        abi_version: rlx_plugin_api::ABI_VERSION.to_string(),
        platform: platform.into(),
        mlx_version: "0.32.4".into(),
        mlx_backend: "cpu".into(),
        exclude: Vec::new(),
    };
    let dist = work.join("dist");
    let (path, _) = pkg::pack(&input, &dist).unwrap();
    pkg::write_sums(&dist, std::slice::from_ref(&path)).unwrap();
    path
}

/// The release 0.1.0 and the newer 0.1.1, for this machine.
fn v0() -> PathBuf {
    archive("v0", "0.1.0", "linux-x86_64", |_| {})
}
fn v1() -> PathBuf {
    archive("v1", "0.1.1", "linux-x86_64", |_| {})
}

/// `archive` and its SHA256SUMS copied into `dir`, for a test to change.
fn own_copy(archive: &Path, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let to = dir.join(archive.file_name().unwrap());
    std::fs::copy(archive, &to).unwrap();
    std::fs::copy(
        archive.with_file_name(pkg::SUMS_NAME),
        dir.join(pkg::SUMS_NAME),
    )
    .unwrap();
    to
}

/// Leave out libmlx and the BLAS: the plugin library alone cannot load.
fn drop_libraries(dir: &Path) {
    std::fs::remove_file(dir.join("mlx/lib/libmlx.so")).unwrap();
    std::fs::remove_dir_all(dir.join("blas")).unwrap();
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Edit the bytes of the library's embedded manifest (found by its magic).
fn patch_manifest(lib: &Path, edit: impl Fn(&mut [u8])) {
    let mut bytes = std::fs::read(lib).unwrap();
    let at = find(&bytes, b"RLXMANIF").expect("an embedded manifest");
    edit(&mut bytes[at..]);
    std::fs::write(lib, bytes).unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ty = e.file_type().unwrap();
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ty.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn sign(archive: &Path, keys: &Path, name: &str) -> PathBuf {
    let (secret, public) = pkg::generate_keypair(keys, name, None).unwrap();
    pkg::sign_file(&archive.with_file_name(pkg::SUMS_NAME), &secret, None).unwrap();
    public
}

#[test]
fn a_signature_is_required_once_a_key_is_trusted_and_unsigned_needs_saying_so() {
    let env = Env::new();
    let a = own_copy(&v0(), &env.tmp.path().join("release"));
    let (ok, t) = env.install(&a, &[]);
    assert!(!ok && t.contains("--allow-unsigned"), "{t}");
    env.assert_untouched("no key, no --allow-unsigned");

    let keys = env.tmp.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let public = sign(&a, &keys, "publisher");
    let (other, _) = pkg::generate_keypair(&keys, "other", None)
        .map(|(s, p)| (p, s))
        .unwrap();
    let (ok, t) = env.install(&a, &["--key", other.to_str().unwrap()]);
    assert!(!ok && t.contains("no trusted key verifies it"), "{t}");
    env.assert_untouched("another key");

    // Trusted in the home: the signature is then required.
    std::fs::create_dir_all(env.home().join("trusted-keys")).unwrap();
    std::fs::copy(&public, env.home().join("trusted-keys/publisher.pub")).unwrap();
    let sums = a.with_file_name(pkg::SUMS_NAME);
    let good = std::fs::read_to_string(&sums).unwrap();
    std::fs::write(&sums, format!("{good}0000  another.tar.xz\n")).unwrap();
    let (ok, t) = env.install(&a, &["--allow-unsigned"]);
    assert!(!ok && t.contains("SHA256SUMS.minisig"), "altered sums: {t}");
    env.assert_untouched("altered sums");
    std::fs::write(&sums, good).unwrap();

    let (ok, t) = env.install(&a, &[]);
    assert!(ok, "{t}");
    assert!(t.contains("signature verified"), "{t}");
    let list = text(&env.rlx_host(&["plugins", "list"]));
    assert!(
        list.contains("mlx") && list.contains("0.1.0") && list.contains("signature verified"),
        "{list}"
    );
    // A plugin that discovery finds and that runs (CI also runs the demo
    // from an installed archive).
    env.assert_runs();
}

#[test]
fn bad_archives_change_nothing() {
    let env = Env::new();
    let bytes = std::fs::read(v0()).unwrap();
    let case = |name: &str, data: &[u8]| {
        let p = env.tmp.path().join("bad").join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
        p
    };
    let truncated = case("truncated.tar.xz", &bytes[..bytes.len() / 2]);
    let mut flipped = bytes.clone();
    let mid = flipped.len() * 3 / 4;
    flipped[mid] ^= 0x40;
    let corrupt = case("corrupt.tar.xz", &flipped);
    // Refused before anything would load: the large libraries are left out
    // (they only cost packing time).
    let mac = archive("mac", "0.1.0", "macos-arm64", drop_libraries);
    let abi = archive("abi", "0.1.0", "linux-x86_64-abi", |d| {
        drop_libraries(d);
        // The manifest header's ABI major (offset 16) set to 99.
        patch_manifest(&d.join("librlx_mlx.so"), |m| {
            m[16..20].copy_from_slice(&99u32.to_le_bytes())
        });
    });
    for (what, a, expect) in [
        ("truncated", &truncated, ""),
        ("corrupt", &corrupt, ""),
        ("another platform", &mac, "macos-arm64"),
        ("another ABI major", &abi, "cannot load in this host"),
    ] {
        let (ok, t) = env.install(a, &["--allow-unsigned"]);
        assert!(!ok, "{what}: installed: {t}");
        assert!(t.contains(expect), "{what}: {t}");
        env.assert_untouched(what);
    }
}

#[test]
fn an_upgrade_keeps_the_previous_a_downgrade_needs_force_and_a_broken_one_rolls_back() {
    let env = Env::new();
    let (v0, v1) = (v0(), v1());
    let u = ["--allow-unsigned"];
    assert!(env.install(&v0, &u).0);
    let (ok, t) = env.install(&v0, &u);
    assert!(ok && t.contains("already installed"), "{t}");

    let (ok, t) = env.install(&v1, &u);
    assert!(ok && t.contains("replacing 0.1.0"), "{t}");
    assert_eq!(env.installed_version().as_deref(), Some("0.1.1"));
    let previous = env.home().join("install/previous/mlx");
    assert_eq!(
        pkg::install::installed(&previous)
            .map(|i| i.version)
            .as_deref(),
        Some("0.1.0")
    );

    let (ok, t) = env.install(&v0, &u);
    assert!(!ok && t.contains("--force"), "{t}");
    assert_eq!(env.installed_version().as_deref(), Some("0.1.1"));
    let (ok, t) = env.install(&v0, &["--allow-unsigned", "--force"]);
    assert!(ok, "{t}");
    assert_eq!(env.installed_version().as_deref(), Some("0.1.0"));

    // 0.1.2 without its libmlx: every check that needs no loading passes,
    // the load fails, and 0.1.0 is back.
    let broken = archive("broken", "0.1.2", "linux-x86_64", drop_libraries);
    let (ok, t) = env.install(&broken, &u);
    assert!(
        !ok && t.contains("did not load") && t.contains("back in place"),
        "{t}"
    );
    assert_eq!(env.installed_version().as_deref(), Some("0.1.0"));
    env.assert_runs();

    assert!(env.rlx_host(&["plugins", "remove", "mlx"]).status.success());
    assert!(!env.plugins().join("mlx").exists());
    let list = text(&env.rlx_host(&["plugins", "list"]));
    assert!(list.contains("no plugins installed"), "{list}");
}

/// A one-matmul model file.
fn tiny_model(dir: &Path) -> String {
    let mut g = rlx_ir::Graph::new("tiny");
    let s = rlx_ir::Shape::new(&[4, 8], rlx_ir::DType::F32);
    let x = g.input("x", s.clone());
    let y = g.activation(rlx_ir::op::Activation::Tanh, x, s);
    g.set_outputs(vec![y]);
    let p = dir.join("tiny.rlxmodel");
    std::fs::write(&p, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    p.display().to_string()
}

/// A program that loaded 0.1.0 keeps running it, with the same results,
/// while another process installs 0.1.1 over it; a new process then runs
/// the new one.
#[test]
fn a_running_program_keeps_its_plugin_while_an_install_replaces_it() {
    use rlx_plugin_api::{DType, HostTensor, Mode};
    let env = Env::new();
    let (v0, v1) = (v0(), v1());
    assert!(env.install(&v0, &["--allow-unsigned"]).0);

    let plugin = rlx_plugin_conformance::load(env.plugins().join("mlx")).unwrap();
    let model = std::fs::read_to_string(tiny_model(env.tmp.path())).unwrap();
    let mut exe = plugin.compile(&model, Mode::Lazy).unwrap();
    let xs: Vec<f32> = (0..32).map(|i| i as f32 / 7.0 - 2.0).collect();
    let x = HostTensor::new(
        DType::F32,
        vec![4, 8],
        xs.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
    .unwrap();
    let want: Vec<f32> = xs.iter().map(|v| v.tanh()).collect();
    let mut run = || {
        let o = exe.run(&[("x", &x)]).unwrap();
        let got = o[0].to_f32_vec().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
        }
    };
    run();
    let mut child = Command::new(env.tmp.path().join("bin/rlx-host"))
        .args([
            "plugins",
            "install",
            v1.to_str().unwrap(),
            "--allow-unsigned",
        ])
        .env("RLX_HOME", env.home())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut runs = 0;
    let status = loop {
        run();
        runs += 1;
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
    };
    assert!(
        status.success(),
        "{}",
        text(&child.wait_with_output().unwrap())
    );
    assert!(runs > 1, "the install finished before a second run");
    for _ in 0..3 {
        run();
    }
    assert_eq!(env.installed_version().as_deref(), Some("0.1.1"));
    let o = env.rlx_host(&[
        "plugins",
        "inspect",
        "--static",
        "--json",
        env.plugins().join("mlx").to_str().unwrap(),
    ]);
    assert!(text(&o).contains("\"version\": \"0.1.1\""), "{}", text(&o));
    env.assert_runs();
}

/// A minimal HTTP/1.1 server on loopback serving the files of `dir` (404
/// for anything else), one connection at a time, until the test ends.
fn serve(dir: PathBuf) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            // The rest of the header.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let file = dir.join(path.trim_start_matches('/'));
            let response = match std::fs::read(&file) {
                Ok(body) if !path.contains("..") => {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend(body);
                    r
                }
                _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            };
            let _ = stream.write_all(&response);
        }
    });
    format!("http://{addr}")
}

#[test]
fn an_archive_is_fetched_over_http_from_loopback_with_its_signed_sums() {
    let env = Env::new();
    let release = env.tmp.path().join("release");
    let a = own_copy(&v0(), &release);
    let keys = env.tmp.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let public = sign(&a, &keys, "publisher");
    let base = serve(release.clone());
    let url = format!("{base}/{}", a.file_name().unwrap().to_str().unwrap());

    let (ok, t) = env.install(Path::new(&url), &["--key", public.to_str().unwrap()]);
    assert!(ok && t.contains("signature verified"), "{t}");
    let list = text(&env.rlx_host(&["plugins", "list"]));
    assert!(list.contains(&url), "the source is recorded: {list}");
    // The download is not left behind.
    let downloads = env.home().join("install/downloads");
    let left: Vec<_> = std::fs::read_dir(&downloads)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");

    // A missing archive is an HTTP error, not an install.
    let env2 = Env::new();
    let (ok, t) = env2.install(
        Path::new(&format!("{base}/no-such.tar.xz")),
        &["--allow-unsigned"],
    );
    assert!(!ok && t.contains("404"), "{t}");
    env2.assert_untouched("404");
    // Plain http is only fetched from this machine.
    let (ok, t) = env2.install(
        Path::new("http://example.com/rlx-mlx-0.1.0-linux-x86_64.tar.xz"),
        &[],
    );
    assert!(!ok && t.contains("https://"), "{t}");
}
