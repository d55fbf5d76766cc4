//! Host memory mapped for transfers, through the host library's loader: the
//! contract's refusals (a range overlapping a mapped one, an unmap where no
//! mapping starts, a null or empty range), a mapping dropped and made again,
//! and runs that read their input from and write their output into mapped
//! memory, in every mode, against `f64`'s `exp` at 1e-6 relative. On the CPU a
//! mapping only records its range; on a GPU (this binary run over the CUDA
//! build of libmlx) the same runs take the page-locked copies.

use rlx_plugin_api::{DType, HostTensorRef, Mode, StatusCode};

const N: usize = 4096;

fn graph() -> String {
    use rlx_ir::infer::GraphExt;
    let mut g = rlx_ir::Graph::new("exp");
    let x = g.input("x", rlx_ir::Shape::new(&[N], rlx_ir::DType::F32));
    let y = g.exp(x);
    g.set_named_outputs([("y", y)]);
    rlx_ir::rlxmodel::to_text(&g).unwrap()
}

#[test]
fn mapped_memory_keeps_the_contract_and_runs_read_and_write_it() {
    let opts = rlx_plugin_host::Options::default();
    // SAFETY: rlx_mlx::rlx_plugin_entry is the MLX plugin's entry, linked
    // into this test.
    let plugin =
        unsafe { rlx_plugin_host::install_static(rlx_mlx::rlx_plugin_entry, "mlx", &opts) }
            .unwrap();
    assert!(plugin.offers().dma_map);

    let mut input = vec![0u8; N * 4];
    let mut output = vec![0u8; N * 4];
    let mut x = plugin.dma_map(&mut input).unwrap();
    // Refusals change nothing: every one is checked before the runs.
    let base = x.as_mut_ptr();
    // SAFETY: each range lies inside `input`, alive (and mapped) here;
    // the calls that succeed are undone at once.
    unsafe {
        for (at, len, what) in [
            (0, 4, "its first bytes"),
            (N * 4 - 1, 1, "its last byte"),
            (8, 16, "its inside"),
        ] {
            let e = plugin.dma_map_raw(base.add(at), len).unwrap_err();
            assert_eq!(e.code, StatusCode::InvalidArgument, "{what}: {e}");
            assert!(e.message.contains("overlap"), "{what}: {e}");
        }
        let e = plugin.dma_unmap_raw(base.add(4)).unwrap_err();
        assert_eq!(e.code, StatusCode::NotFound, "{e}");
        let e = plugin.dma_map_raw(std::ptr::null_mut(), 16).unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument, "{e}");
        let e = plugin.dma_map_raw(output.as_mut_ptr(), 0).unwrap_err();
        assert_eq!(e.code, StatusCode::InvalidArgument, "{e}");
        // Ranges that touch without overlapping are two mappings.
        let (a, b) = output.split_at_mut(N * 2);
        plugin.dma_map_raw(a.as_mut_ptr(), a.len()).unwrap();
        plugin.dma_map_raw(b.as_mut_ptr(), b.len()).unwrap();
        plugin.dma_unmap_raw(a.as_mut_ptr()).unwrap();
        plugin.dma_unmap_raw(b.as_mut_ptr()).unwrap();
    }
    let mut y = plugin.dma_map(&mut output).unwrap();

    let text = graph();
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe = plugin.compile(&text, mode).unwrap();
        for run in 0..3 {
            let xs: Vec<f32> = (0..N)
                .map(|i| ((i * 7 + run * 13) % 97) as f32 * 0.05 - 2.0)
                .collect();
            for (dst, v) in x.chunks_exact_mut(4).zip(&xs) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
            let t = HostTensorRef::new(DType::F32, &[N], &x).unwrap();
            exe.run_refs_into(&[("x", t)], &mut [Some(&mut y[..])], |_| Ok(()))
                .unwrap();
            for (i, (got, v)) in y.chunks_exact(4).zip(&xs).enumerate() {
                let got = f32::from_le_bytes(got.try_into().unwrap()) as f64;
                let want = (*v as f64).exp();
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs(),
                    "{mode:?} run {run} y[{i}] = {got}, exp({v}) = {want}"
                );
            }
        }
    }
    drop((x, y));
    // Unmapped on drop: the same memory maps again.
    let again = plugin.dma_map(&mut input).unwrap();
    drop(again);
}
