//! The kernel builder executable (`build/kernel_builder.c`), compiled with
//! the target's C compiler and put beside the plugin library in each plugin
//! directory this build lays out: compiled mode starts it to build a
//! graph's kernels in a process of its own (src/kernel_builder.rs).

use std::path::{Path, PathBuf};

/// Its file name in a plugin directory.
pub const NAME: &str = "rlx-mlx-kernel-builder";

/// Compile it into `out` and copy it into every directory of `bundles`;
/// the plugin finds it by the name this exports
/// (`RLX_MLX_KERNEL_BUILDER_FILE`).
pub fn build(manifest_dir: &Path, out: &Path, target_os: &str, bundles: &[PathBuf]) {
    println!("cargo:rustc-env=RLX_MLX_KERNEL_BUILDER_FILE={NAME}");
    let src = manifest_dir.join("build").join("kernel_builder.c");
    println!("cargo:rerun-if-changed={}", src.display());
    let exe = out.join(NAME);
    // From OUT_DIR: zig's `cc` (the macOS cross build) leaves an empty `a.o`
    // in the working directory when cc asks it what it is. Nothing later in
    // this build script uses a relative path.
    std::env::set_current_dir(out).expect("OUT_DIR");
    let compiler = cc::Build::new()
        .cargo_metadata(false)
        .opt_level(2)
        .get_compiler();
    let mut cmd = compiler.to_command();
    cmd.arg(&src).arg("-o").arg(&exe);
    if target_os == "linux" {
        // dlopen is in libc from glibc 2.34 on; older ones keep it in libdl.
        cmd.arg("-ldl");
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler for {NAME}: {e}"));
    assert!(status.success(), "compiling {}: {status}", src.display());
    for dir in bundles {
        super::copy_if_changed(&exe, &dir.join(NAME))
            .unwrap_or_else(|e| panic!("copying {NAME} into {}: {e}", dir.display()));
    }
}
