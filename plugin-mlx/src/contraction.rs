//! MLX's generated CUDA kernels compute what the graph says: no implicit
//! fused multiply-add.
//!
//! rlx's IR is explicit about fusing a product into a sum: a graph that
//! means one rounding has an FMA node (pocketfft's `FftContraction::Clang`
//! graphs emit them), a `Mul` then an `Add` means two. MLX's CUDA backend
//! compiles the kernels it generates (compiled mode's fused kernels, the
//! plugin's elementwise regions) with NVRTC, whose default `--fmad=true`
//! contracts `a * b + c` across the generated statements: the last bits of
//! such kernels then differed from the other modes and from the CPU
//! backend (rlx-runtime's `fft_algo::gpu_pocketfft_matches_the_cpu_kernel`,
//! 23 of 36 cases, compiled mode on an H100 only). MLX 0.32.4 has no
//! setting for NVRTC's options.
//!
//! So the plugin library defines `nvrtcCompileProgram` itself. The dynamic
//! loader binds libmlx's reference to the first definition in its search
//! order: the process's global scope, then the plugin's own load group, in
//! which the plugin library comes before the libnvrtc that libmlx pulls in.
//! The definition here adds `--fmad=false` (unless `RLX_MLX_CUDA_FMAD=1`,
//! NVRTC's default, as Python MLX has it) and calls NVRTC's. A host process
//! whose global scope already has the symbol (linked against libnvrtc, or
//! loaded it `RTLD_GLOBAL`) binds libmlx to that one instead; the plugin
//! then says so in its build info rather than claim what it cannot do.
//!
//! MLX caches NVRTC's output by kernel name only, whatever the options
//! were, so the exact kernels get a cache directory of their own
//! (`<tmp>/mlx/<version>/ptx-nofma`, beside MLX's `ptx`) unless the user set
//! `MLX_PTX_CACHE_DIR`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// NVRTC's `nvrtcCompileProgram(prog, numOptions, options)`.
type CompileProgram = unsafe extern "C" fn(*mut c_void, c_int, *const *const c_char) -> c_int;

/// `NVRTC_ERROR_INTERNAL_ERROR`: what MLX reports when NVRTC's own
/// function cannot be found (it turns any error into an exception).
const NVRTC_ERROR_INTERNAL_ERROR: c_int = 11;

const SYMBOL: &CStr = c"nvrtcCompileProgram";
const NO_FMAD: &CStr = c"--fmad=false";

/// The environment variable that lets NVRTC contract (`1`).
pub const ENV_ALLOW: &str = "RLX_MLX_CUDA_FMAD";

/// Whether the user let NVRTC contract products into sums.
fn allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| rlx_plugin_api::setting_flag(ENV_ALLOW))
}

/// NVRTC's own `nvrtcCompileProgram`: the next definition after this
/// library's in the load group, else the loaded libnvrtc's.
fn nvrtc_compile() -> Option<CompileProgram> {
    static REAL: OnceLock<Option<CompileProgram>> = OnceLock::new();
    *REAL.get_or_init(|| {
        let ours = nvrtcCompileProgram as CompileProgram as *mut c_void;
        // SAFETY: dlsym/dlopen with valid C strings; a non-null result for
        // this name is NVRTC's function of this signature.
        unsafe {
            let mut f = libc::dlsym(libc::RTLD_NEXT, SYMBOL.as_ptr());
            if f.is_null() || f == ours {
                let lib = libc::dlopen(
                    c"libnvrtc.so.13".as_ptr(),
                    libc::RTLD_NOLOAD | libc::RTLD_LAZY,
                );
                f = if lib.is_null() {
                    std::ptr::null_mut()
                } else {
                    libc::dlsym(lib, SYMBOL.as_ptr())
                };
            }
            (!f.is_null() && f != ours)
                .then(|| std::mem::transmute::<*mut c_void, CompileProgram>(f))
        }
    })
}

/// Called by libmlx in place of NVRTC's function (see the module docs).
///
/// # Safety
/// NVRTC's contract: `prog` is a live program and `options` points to
/// `num_options` C strings.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn nvrtcCompileProgram(
    prog: *mut c_void,
    num_options: c_int,
    options: *const *const c_char,
) -> c_int {
    let Some(real) = nvrtc_compile() else {
        return NVRTC_ERROR_INTERNAL_ERROR;
    };
    if allowed() {
        return real(prog, num_options, options);
    }
    let given: &[*const c_char] = if options.is_null() || num_options <= 0 {
        &[]
    } else {
        std::slice::from_raw_parts(options, num_options as usize)
    };
    let mut with = Vec::with_capacity(given.len() + 1);
    with.extend_from_slice(given);
    with.push(NO_FMAD.as_ptr());
    real(prog, with.len() as c_int, with.as_ptr())
}

/// Whether libmlx reaches the definition above: no definition of the
/// symbol is in the process's global scope, where the loader looks first.
fn bound_here() -> bool {
    // SAFETY: dlsym with a valid C string.
    let global = unsafe { libc::dlsym(libc::RTLD_DEFAULT, SYMBOL.as_ptr()) };
    global.is_null() || global == nvrtcCompileProgram as CompileProgram as *mut c_void
}

/// Whether a child process that loads this plugin library generates
/// kernels as this process does: not where this process's own NVRTC is
/// bound before the plugin's (the child's would be the plugin's, and its
/// kernels would differ from this process's, in another cache directory).
pub fn same_in_a_child() -> bool {
    allowed() || bound_here()
}

/// Decide, once, before MLX compiles a kernel: give the exact kernels
/// their own cache directory, and say what holds (the build info's
/// `mlx.fma_contraction`). Called when the CUDA build loads.
pub fn choose() -> &'static str {
    static CHOICE: OnceLock<&'static str> = OnceLock::new();
    CHOICE.get_or_init(|| {
        if allowed() {
            return "on (RLX_MLX_CUDA_FMAD=1: NVRTC may fuse a*b+c)";
        }
        if !bound_here() {
            return "on (this process's own NVRTC is bound before the plugin's; \
                    generated kernels may fuse a*b+c)";
        }
        if std::env::var_os("MLX_PTX_CACHE_DIR").is_none_or(|v| v.is_empty()) {
            let dir = rlx_plugin_api::trust::kernel_cache_dir(
                &rlx_plugin_api::machine::temp_dir(),
                rlx_mlx_shim::MLX_VERSION,
            )
            .with_file_name("ptx-nofma");
            // As with MLX_ENABLE_TF32 (devices::choose_tf32): set once, when
            // the plugin loads, before MLX reads it on its first kernel.
            std::env::set_var("MLX_PTX_CACHE_DIR", dir);
        }
        "off (generated kernels round a*b and +c separately, as the graph says; \
         RLX_MLX_CUDA_FMAD=1 lets NVRTC fuse them)"
    })
}
