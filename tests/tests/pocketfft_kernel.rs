//! `Fft` with rlx's pocketfft rounding (`OpKind::FftPocketFft`) is one
//! kernel of the plugin's (rlx_pocketfft's engine, as rlx-cpu runs it), not
//! rlx-runtime's replay in thousands of elementwise nodes: the graph is
//! handed to the plugin as written (no rlx-runtime rewrite in between, so a
//! plugin without the kernel refuses it), in every mode, and its output
//! must be the CPU backend's bit for bit (its row kernel is the reference:
//! the same engine, the same plan). Cases: f32 and f64, forward and
//! inverse, every norm, both contractions, a Bluestein length (4,099), and
//! enough rows that the plugin splits them over threads.

use rlx_ir::fft::{FftAlgo, FftNorm};
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{mlx, run_mlx, Feed};
use rlx_runtime::{Device, Session};

fn graph(rows: usize, n: usize, dt: DType, inverse: bool, norm: FftNorm, algo: FftAlgo) -> Graph {
    let mut g = Graph::new("pocketfft");
    let x = g.input("x", Shape::new(&[rows, 2 * n], dt));
    let y = g.fft_algo(x, inverse, norm, algo);
    g.set_outputs(vec![y]);
    g
}

fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0) * 1.5)
        .collect()
}

fn bytes(v: &[f32], dt: DType) -> Vec<u8> {
    match dt {
        DType::F64 => v.iter().flat_map(|x| (*x as f64).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

#[test]
fn pocketfft_is_one_kernel_with_the_cpu_backends_bits() {
    assert!(
        mlx()
            .supported_ops()
            .iter()
            .any(|o| o.op_kind == "FftPocketFft"),
        "the plugin claims FftPocketFft"
    );
    let cases = [
        (3, 1000, DType::F64, true, FftNorm::Ortho, FftAlgo::SCIPY),
        (
            2,
            7,
            DType::F64,
            false,
            FftNorm::Forward,
            FftAlgo::POCKETFFT_NO_FMA,
        ),
        (
            64,
            1024,
            DType::F32,
            false,
            FftNorm::Backward,
            FftAlgo::SCIPY,
        ),
        (2, 4099, DType::F32, true, FftNorm::Forward, FftAlgo::SCIPY),
        (
            5,
            360,
            DType::F32,
            false,
            FftNorm::Ortho,
            FftAlgo::POCKETFFT_NO_FMA,
        ),
    ];
    let mut bad = Vec::new();
    for (i, (rows, n, dt, inverse, norm, algo)) in cases.into_iter().enumerate() {
        let x = values(rows * 2 * n, i);
        let g = graph(rows, n, dt, inverse, norm, algo);
        let want =
            Session::new(Device::Cpu)
                .compile(g.clone())
                .run_typed(&[("x", &bytes(&x, dt), dt)])[0]
                .0
                .clone();
        for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
            let feeds = [Feed {
                name: "x".into(),
                values: x.clone(),
            }];
            let got = run_mlx(&g, &feeds, mode)
                .unwrap_or_else(|e| panic!("rows={rows} n={n} {dt:?} {mode:?}: {e}"));
            if got[0].data != want {
                bad.push(format!(
                    "rows={rows} n={n} {dt:?} inverse={inverse} {norm:?} {algo:?} {mode:?}"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "not the CPU backend's bits: {bad:#?}");
}
