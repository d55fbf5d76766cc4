//! The kernel builder process's work: `rlx-mlx-kernel-builder` (the plugin
//! directory's executable, `build/kernel_builder.c`) loads this library
//! and calls [`rlx_mlx_kernel_builder_main`], which compiles the graph it
//! reads from standard input in compiled mode and calls the compiled
//! function once on zeros, so that MLX writes its kernels into the on-disk
//! cache the parent process reads (`executable::kernel_process` starts it
//! and says why).
//!
//! Not part of the plugin ABI: the parent and the child are the same
//! library file, so the arguments are this file's own business.

use crate::executable::MlxExecutable;
use crate::graph_source::GraphSource;
use rlx_plugin_api::{CompileOptions, DeviceKind, Mode};
use std::ffi::{c_char, c_int, CStr};
use std::io::Read;

/// `argv`: device kind (`cpu`/`gpu`), device ordinal, RNG policy, RNG
/// seed, the graph's form (`text` or a graph form's name, as the parent's
/// compile received it); the graph on standard input. Returns 0 when
/// the kernels are built, 1 with the reason on standard error otherwise.
///
/// # Safety
/// `argv` points to `argc` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn rlx_mlx_kernel_builder_main(
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    let args: Vec<String> = (0..argc.max(0) as usize)
        .map(|i| CStr::from_ptr(*argv.add(i)).to_string_lossy().into_owned())
        .collect();
    let result = std::panic::catch_unwind(|| build(&args))
        .unwrap_or_else(|_| Err("the kernel builder panicked".into()));
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rlx-mlx-kernel-builder: {e}");
            1
        }
    }
}

fn build(args: &[String]) -> Result<(), String> {
    let [kind, ordinal, policy, seed, form] = args else {
        return Err(format!("expected 5 arguments, got {args:?}"));
    };
    let kind = match kind.as_str() {
        "gpu" => DeviceKind::Gpu,
        "cpu" => DeviceKind::Cpu,
        other => return Err(format!("unknown device kind {other:?}")),
    };
    let number = |s: &str| s.parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
    let options = CompileOptions {
        mode: Mode::Compiled,
        rng_policy: number(policy)? as u32,
        rng_seed: number(seed)?,
        device: Some((kind, number(ordinal)? as u32)),
        memory_limit: None,
    };
    let mut graph = Vec::new();
    std::io::stdin()
        .read_to_end(&mut graph)
        .map_err(|e| format!("reading the graph: {e}"))?;
    let source = GraphSource::from_form(form, &graph).map_err(|e| e.to_string())?;
    // What loading the plugin does first (TF32, NVRTC's options and their
    // cache directory), before MLX compiles anything.
    crate::plugin::MlxPlugin::new();
    let exe = MlxExecutable::compile_source(source, &options).map_err(|e| e.to_string())?;
    exe.build_kernels().map_err(|e| e.to_string())
}
