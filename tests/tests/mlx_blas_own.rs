//! The plugin's BLAS is its own (issue #28, item 3). rlx-runtime's CPU
//! backend pins the process's OpenBLAS to one thread
//! (`rlx_cpu::blas::set_blas_num_threads(1)`), and the plugin's MLX calls
//! the same OpenBLAS when both run in one process. Here the pin is made as
//! rlx-cpu makes it (`openblas_set_num_threads(1)`, reached through the
//! plugin's libmlx, so it is the OpenBLAS MLX calls), and:
//!
//! - the plugin's f32 matrix product still runs on as many threads as
//!   before the pin (`rlx_mlx_matmul_threads`, the plugin library's
//!   diagnostic export), and its results still match an f64 product
//!   (1e-4 abs + 1e-4 rel, every mode);
//! - the plugin leaves the host's pin as it was (the thread count reads 1
//!   after the plugin's runs);
//! - rlx-runtime's CPU backend gives bit-identical outputs before and
//!   after the plugin ran.
//!
//! Without OpenBLAS behind the plugin (its bundled reference BLAS) there is
//! no shared pool to pin: the test says so and checks nothing.

use libloading::os::unix::{Library, Symbol, RTLD_NOW};
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_tests::parity::{mlx, random_feeds, run_cpu, run_mlx, MODES};

const M: usize = 64;
const K: usize = 512;
const N: usize = 256;

fn graph() -> Graph {
    let mut g = Graph::new("matmul");
    let x = g.input("x", Shape::new(&[M, K], DType::F32));
    let w = g.param("w", Shape::new(&[K, N], DType::F32));
    let y = g.matmul(x, w, Shape::new(&[M, N], DType::F32));
    g.set_named_outputs([("y", y)]);
    g
}

/// `x · w` in f64.
fn reference(x: &[f32], w: &[f32]) -> Vec<f64> {
    let mut y = vec![0.0f64; M * N];
    for i in 0..M {
        for k in 0..K {
            let a = x[i * K + k] as f64;
            for j in 0..N {
                y[i * N + j] += a * w[k * N + j] as f64;
            }
        }
    }
    y
}

/// A library already loaded in this process, by path (never loads one).
fn loaded(path: &str) -> Library {
    // SAFETY: RTLD_NOLOAD only returns a handle to a library the process
    // has already loaded (and initialised); nothing new runs.
    unsafe { Library::open(Some(path), libc::RTLD_NOLOAD | RTLD_NOW) }
        .unwrap_or_else(|e| panic!("{path} is not loaded in this process: {e}"))
}

#[test]
fn a_host_that_pins_openblas_leaves_the_plugins_products_their_threads() {
    let plugin = mlx();
    let info = &plugin.descriptor().build_info;
    let get = |k: &str| info.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let blas = get("blas").unwrap_or_default();
    if !blas.starts_with("OpenBLAS") {
        eprintln!("skipped: the plugin's MLX does not use OpenBLAS here ({blas}); install libopenblas0-pthread");
        return;
    }
    let g = graph();
    let feeds = random_feeds(&g, 3);
    let feed = |n: &str| &feeds.iter().find(|f| f.name == n).unwrap().values;
    let want = reference(feed("x"), feed("w"));
    let check = |when: &str| {
        for mode in MODES {
            let out = run_mlx(&g, &feeds, mode).unwrap();
            let got = out[0].to_f32_vec().unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (*g as f64 - w).abs() <= 1e-4 + 1e-4 * w.abs(),
                    "{when}, {mode:?}: y[{i}] = {g}, want {w}"
                );
            }
        }
    };
    // The plugin's MLX (and its OpenBLAS) are loaded and have run.
    check("before the pin");
    let cpu_before = run_cpu(&g, &feeds);

    let plugin_lib = loaded(plugin.path().to_str().unwrap());
    // SAFETY: the plugin library exports this function with this signature
    // (plugin-mlx/src/blas.rs).
    let threads: Symbol<extern "C" fn(i64, i64, i64) -> i64> =
        unsafe { plugin_lib.get(b"rlx_mlx_matmul_threads\0") }.unwrap();
    let mlx_lib = loaded(&get("mlx.library").expect("the plugin names its libmlx"));
    // SAFETY: OpenBLAS's C API (cblas.h): void(int), int(void); found in
    // libmlx's dependencies, so it is the OpenBLAS MLX calls.
    let (set, get_threads) = unsafe {
        (
            mlx_lib
                .get::<extern "C" fn(i32)>(b"openblas_set_num_threads\0")
                .unwrap(),
            mlx_lib
                .get::<extern "C" fn() -> i32>(b"openblas_get_num_threads\0")
                .unwrap(),
        )
    };
    let before = threads(M as i64, K as i64, N as i64);
    eprintln!(
        "before the pin: OpenBLAS {} threads, the plugin's product {before}",
        get_threads()
    );
    assert!(before >= 1);

    // What rlx-cpu does in a process where its CPU backend runs.
    rlx_cpu::blas::set_blas_num_threads(1);
    set(1);
    assert_eq!(get_threads(), 1, "the pin took");
    let after = threads(M as i64, K as i64, N as i64);
    eprintln!("after the pin: the plugin's product {after} threads");
    assert_eq!(
        after, before,
        "the host's pin of the shared OpenBLAS changed the plugin's matmul threads"
    );
    check("after the pin");
    assert_eq!(get_threads(), 1, "the plugin changed the host's BLAS pin");

    let cpu_after = run_cpu(&g, &feeds);
    assert!(
        cpu_before
            .iter()
            .flatten()
            .zip(cpu_after.iter().flatten())
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "the CPU backend's outputs changed after the plugin ran"
    );
}
