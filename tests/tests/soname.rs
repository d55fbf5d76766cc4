//! Two plugin directories that each ship a runtime library under the same
//! soname (the CPU and CUDA builds of libmlx are both `libmlx.so`): the
//! dynamic loader binds the second plugin to the first one's library. The
//! rewrite in `build-support/elf_names.rs` (what the `mlx-cuda` directory
//! gets) gives each plugin its own.
//!
//! The libraries are tiny C stand-ins built here with the C compiler: a
//! "runtime" whose `which()` says which copy it is, and a "plugin" that
//! needs it through `$ORIGIN/mlx/lib`. This file is its own test binary, so
//! no other `libmlx.so` is loaded in the process.

#[path = "../../build-support/elf_names.rs"]
mod elf_names;

use elf_names::{Entry, CUDA_LIBMLX, WHEEL_LIBMLX};
use std::path::{Path, PathBuf};
use std::process::Command;

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn compile(out: &Path, src: &str, extra: &[&str]) {
    let c = out.with_extension("c");
    std::fs::write(&c, src).unwrap();
    let st = Command::new(cc())
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(&c)
        .args(extra)
        .status()
        .expect("the C compiler runs");
    assert!(st.success(), "compiling {}", out.display());
}

/// A runtime library called `libmlx.so` whose `which()` returns `n`.
fn runtime(dir: &Path, n: i32) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(WHEEL_LIBMLX);
    compile(
        &p,
        &format!("int which(void) {{ return {n}; }}\n"),
        &["-Wl,-soname,libmlx.so"],
    );
    p
}

/// A plugin directory: `libplug.so` (needing `libmlx.so` through
/// `$ORIGIN/mlx/lib`) linked against `rt`.
fn plugin(dir: &Path, rt: &Path) -> PathBuf {
    let lib = dir.join("mlx").join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let p = dir.join("libplug.so");
    compile(
        &p,
        "int which(void);\nint plug_which(void) { return which(); }\n",
        &[
            "-Wl,--disable-new-dtags,-rpath,$ORIGIN/mlx/lib",
            &format!("-L{}", rt.parent().unwrap().display()),
            "-lmlx",
        ],
    );
    p
}

fn which_of(plugin: &Path) -> i32 {
    // SAFETY: the library is the fixture built above; its initialisers are
    // the C runtime's, and `plug_which` has the signature declared here.
    unsafe {
        let lib = libloading::Library::new(plugin).expect("the plugin loads");
        let f: libloading::Symbol<unsafe extern "C" fn() -> i32> =
            lib.get(b"plug_which").expect("plug_which");
        let n = f();
        // Never unloaded, as a host never unloads a plugin.
        std::mem::forget(lib);
        n
    }
}

#[test]
fn a_renamed_soname_gives_each_plugin_directory_its_own_runtime() {
    let t = tempfile::tempdir().unwrap();
    let cpu_rt = runtime(&t.path().join("rt-cpu"), 1);
    let gpu_rt = runtime(&t.path().join("rt-gpu"), 2);

    // The CPU directory, loaded first.
    let cpu = t.path().join("plugins").join("mlx");
    let cpu_plugin = plugin(&cpu, &cpu_rt);
    std::fs::copy(&cpu_rt, cpu.join("mlx/lib").join(WHEEL_LIBMLX)).unwrap();
    assert_eq!(which_of(&cpu_plugin), 1);

    // The problem: a second directory with its own libmlx.so, unrenamed,
    // is bound to the first one's.
    let naive = t.path().join("plugins").join("naive");
    std::fs::create_dir_all(naive.join("mlx/lib")).unwrap();
    std::fs::copy(&cpu_plugin, naive.join("libplug.so")).unwrap();
    std::fs::copy(&gpu_rt, naive.join("mlx/lib").join(WHEEL_LIBMLX)).unwrap();
    assert_eq!(
        which_of(&naive.join("libplug.so")),
        1,
        "the loader shares a soname across directories (if this changes, the rename is moot)"
    );

    // The fix: the runtime's soname and the plugin copy's need, renamed.
    let gpu = t.path().join("plugins").join("mlx-cuda");
    std::fs::create_dir_all(gpu.join("mlx/lib")).unwrap();
    elf_names::copy_renamed(
        &gpu_rt,
        &gpu.join("mlx/lib").join(CUDA_LIBMLX),
        Entry::Soname,
        WHEEL_LIBMLX,
        CUDA_LIBMLX,
    )
    .unwrap();
    elf_names::copy_renamed(
        &cpu_plugin,
        &gpu.join("libplug.so"),
        Entry::Needed,
        WHEEL_LIBMLX,
        CUDA_LIBMLX,
    )
    .unwrap();
    let read = |p: &Path, e| elf_names::names(&std::fs::read(p).unwrap(), e).unwrap();
    assert_eq!(
        read(&gpu.join("mlx/lib").join(CUDA_LIBMLX), Entry::Soname),
        [CUDA_LIBMLX]
    );
    assert!(read(&gpu.join("libplug.so"), Entry::Needed).contains(&CUDA_LIBMLX.to_string()));
    assert!(!read(&gpu.join("libplug.so"), Entry::Needed).contains(&WHEEL_LIBMLX.to_string()));
    assert_eq!(which_of(&gpu.join("libplug.so")), 2);
    // And the first directory still runs on its own.
    assert_eq!(which_of(&cpu_plugin), 1);
}

#[test]
fn renames_that_cannot_be_done_in_place_are_errors() {
    let t = tempfile::tempdir().unwrap();
    let rt = runtime(t.path(), 1);
    let mut bytes = std::fs::read(&rt).unwrap();
    let before = bytes.clone();
    let e = elf_names::rename(&mut bytes, Entry::Soname, WHEEL_LIBMLX, "libmlx-cuda.so");
    assert!(e.unwrap_err().contains("at most 9 bytes"));
    let e = elf_names::rename(&mut bytes, Entry::Needed, WHEEL_LIBMLX, CUDA_LIBMLX);
    assert!(e.unwrap_err().contains("no Needed entry"));
    let e = elf_names::rename(&mut bytes[..64], Entry::Soname, WHEEL_LIBMLX, CUDA_LIBMLX);
    assert!(e.is_err());
    let mut text = b"not a library".to_vec();
    assert_eq!(
        elf_names::rename(&mut text, Entry::Soname, WHEEL_LIBMLX, CUDA_LIBMLX).unwrap_err(),
        "not an ELF file"
    );
    assert_eq!(bytes, before, "a failed rename leaves the bytes alone");
}
