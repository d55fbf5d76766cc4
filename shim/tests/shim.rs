//! Tests against real MLX output.
//!
//! The shim's contract is one graph used by one thread at a time, so every
//! test takes a global lock (cargo runs tests on parallel threads).

use half::{bf16, f16};
use rlx_mlx_shim::{
    array, compile, fast, fft, info, linalg, ops, random, Array, ArrayList, DType, ShimError,
    UniquePtr,
};
use std::sync::{Mutex, MutexGuard};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn f32s(data: &[f32], shape: &[i32]) -> UniquePtr<Array> {
    Array::from_slice(data, shape).unwrap()
}

fn read(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "element {i}: got {g}, want {w} (tol {tol})\n got: {got:?}\nwant: {want:?}"
        );
    }
}

#[test]
fn version_and_blas() {
    let _g = lock();
    assert_eq!(info::mlx_version(), "0.32.4");
    assert_eq!(rlx_mlx_shim::mlx_version(), rlx_mlx_shim::MLX_VERSION);
    rlx_mlx_shim::init().unwrap();
    assert!(array::default_device_is_cpu());
    let mlx = info::mlx_library_path();
    assert!(mlx.ends_with("libmlx.so"), "libmlx path: {mlx}");
    let blas = info::blas_library_path();
    assert!(blas.contains("blas"), "blas path: {blas:?}");
    assert!(
        std::path::Path::new(&blas).exists(),
        "blas path exists: {blas}"
    );
    let lapack = info::lapack_library_path();
    assert!(lapack.contains("lapack"), "lapack path: {lapack:?}");
    let summary = info::blas_info();
    assert!(summary.contains(&blas), "{summary}");
}

#[test]
fn add_and_matmul_f32() {
    let _g = lock();
    let a = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = f32s(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[2, 3]);
    let s = ops::add(&a, &b).unwrap();
    assert_eq!(s.shape(), vec![2, 3]);
    assert_eq!(s.dtype(), DType::F32);
    assert_eq!(read(&s), vec![11.0, 22.0, 33.0, 44.0, 55.0, 66.0]);

    // [2,3] @ [3,2]
    let c = f32s(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
    let m = ops::matmul(&a, &c).unwrap();
    assert_eq!(m.shape(), vec![2, 2]);
    // row0: [1*1+2*0+3*1, 1*0+2*1+3*1] = [4, 5]; row1: [4+0+6, 0+5+6] = [10, 11]
    assert_eq!(read(&m), vec![4.0, 5.0, 10.0, 11.0]);

    // Broadcasting with a scalar, then bytes read-out.
    let two = array::scalar_f64(2.0, DType::F32).unwrap();
    let p = ops::multiply(&m, &two).unwrap();
    let bytes = array::array_to_bytes(&p).unwrap();
    let back: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(back, vec![8.0, 10.0, 20.0, 22.0]);
    assert_eq!(array::array_nbytes(&p), 16);
    assert_eq!(array::array_size(&p), 4);
}

#[test]
fn half_and_bfloat_round_trip() {
    let _g = lock();
    let vals = [0.5f32, -1.25, 3.0, 65504.0, 1.0e-3, -0.0];
    let h: Vec<f16> = vals.iter().map(|&v| f16::from_f32(v)).collect();
    let a = Array::from_slice(&h, &[2, 3]).unwrap();
    assert_eq!(a.dtype(), DType::F16);
    assert_eq!(a.nbytes(), 12);
    assert_eq!(a.to_vec::<f16>().unwrap(), h);
    // Through MLX's own conversion.
    let a32 = ops::astype(&a, DType::F32).unwrap();
    let want: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
    assert_eq!(read(&a32), want);

    let b: Vec<bf16> = vals[..5].iter().map(|&v| bf16::from_f32(v)).collect();
    let bb = Array::from_slice(&b, &[5]).unwrap();
    assert_eq!(bb.dtype(), DType::BF16);
    assert_eq!(bb.to_vec::<bf16>().unwrap(), b);
    let doubled = ops::add(&bb, &bb).unwrap();
    let want: Vec<bf16> = b.iter().map(|v| bf16::from_f32(v.to_f32() * 2.0)).collect();
    assert_eq!(doubled.to_vec::<bf16>().unwrap(), want);

    // f32 -> bf16 in MLX rounds like `half` does (round to nearest even).
    let x = f32s(&[1.0 / 3.0, 1234.567], &[2]);
    let xb = ops::astype(&x, DType::BF16).unwrap();
    assert_eq!(
        xb.to_vec::<bf16>().unwrap(),
        vec![bf16::from_f32(1.0 / 3.0), bf16::from_f32(1234.567)]
    );
}

#[test]
fn strided_arrays_read_out_row_major() {
    let _g = lock();
    let a = array::arange(0.0, 6.0, 1.0, DType::F32).unwrap();
    let a = ops::reshape(&a, &[2, 3]).unwrap();
    let t = ops::transpose(&a, &[1, 0]).unwrap();
    assert_eq!(t.shape(), vec![3, 2]);
    assert_eq!(read(&t), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    // Empty axes reverse.
    let t2 = ops::transpose(&a, &[]).unwrap();
    assert_eq!(read(&t2), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);

    // Step-2 slice of the transposed view.
    let s = ops::slice(&t, &[0, 0], &[3, 2], &[2, 1]).unwrap();
    assert_eq!(s.shape(), vec![2, 2]);
    assert_eq!(read(&s), vec![0.0, 3.0, 2.0, 5.0]);

    // Broadcast (stride-0) view.
    let row = f32s(&[7.0, 8.0, 9.0], &[1, 3]);
    let b = ops::broadcast_to(&row, &[2, 3]).unwrap();
    assert_eq!(read(&b), vec![7.0, 8.0, 9.0, 7.0, 8.0, 9.0]);

    // copy_into checks the size.
    let mut small = [0u8; 4];
    let err = array::array_copy_into(&t, &mut small).unwrap_err();
    assert_eq!(err.op, "array_copy_into");
    assert!(err.message.contains("24"), "{err}");

    // Integer typed read-out of a transposed int32 array.
    let i = Array::from_slice(&[1i32, 2, 3, 4, 5, 6], &[3, 2]).unwrap();
    let it = ops::transpose(&i, &[1, 0]).unwrap();
    assert_eq!(it.to_vec::<i32>().unwrap(), vec![1, 3, 5, 2, 4, 6]);
    assert!(it.to_vec::<f32>().is_err());
}

#[test]
fn mlx_exceptions_become_errors() {
    let _g = lock();
    let a = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let err: ShimError = ops::matmul(&a, &a).unwrap_err();
    assert_eq!(err.op, "matmul");
    assert!(
        err.message.contains("[matmul]"),
        "MLX message: {}",
        err.message
    );
    let shown = err.to_string();
    assert!(
        shown.contains("matmul") && shown.contains(&err.message),
        "{shown}"
    );

    let err = ops::reshape(&a, &[4]).unwrap_err();
    assert_eq!(err.op, "reshape");
    assert!(
        err.message.contains("[reshape]"),
        "MLX message: {}",
        err.message
    );
    assert!(
        err.message.contains("size 6"),
        "MLX message: {}",
        err.message
    );

    // The raw bridge gives MLX's what() unchanged.
    let raw = ops::ffi::reshape(&a, &[5]).unwrap_err();
    assert!(raw.what().starts_with("[reshape]"), "{}", raw.what());

    // Shim-side argument checks are errors too.
    let err = array::array_from_bytes(&[0u8; 7], &[2], DType::F32).unwrap_err();
    assert_eq!(err.op, "array_from_bytes");
    assert!(err.message.contains("7 bytes"), "{err}");
    let err = array::full(&[-1], 0.0, DType::F32).unwrap_err();
    assert!(err.message.contains("non-negative"), "{err}");

    // Errors surfacing at evaluation time.
    let l = ArrayList::from_arrays([&*a]);
    assert!(l.get(3).is_err());
    let e = ops::concatenate(&ArrayList::from_arrays([]), 0).unwrap_err();
    assert_eq!(e.op, "concatenate");
}

#[test]
fn compile_closure() {
    let _g = lock();
    let f = compile(|inputs: &ArrayList| {
        let x = inputs.get(0).map_err(|e| e.to_string())?;
        let two = array::scalar_f64(2.0, DType::F32)?;
        let one = array::scalar_f64(1.0, DType::F32)?;
        let twice = ops::multiply(&x, &two)?;
        let y = ops::add(&twice, &one)?;
        Ok(ArrayList::from_arrays([&*y]))
    })
    .unwrap();

    let x1 = f32s(&[0.0, 1.0, 2.5], &[3]);
    let out1 = f.call(&ArrayList::from_arrays([&*x1])).unwrap();
    assert_eq!(out1.len(), 1);
    assert_eq!(read(&out1.get(0).unwrap()), vec![1.0, 3.0, 6.0]);

    let x2 = f32s(&[-1.0, 10.0, 0.25, 4.0], &[2, 2]);
    let out2 = f.call_arrays(&[&x2]).unwrap();
    assert_eq!(out2[0].shape(), vec![2, 2]);
    assert_eq!(read(&out2[0]), vec![-1.0, 21.0, 1.5, 9.0]);

    // Same shapes again (cached trace), new values.
    let x3 = f32s(&[3.0, 4.0, 5.0], &[3]);
    assert_eq!(
        read(&f.call_arrays(&[&x3]).unwrap()[0]),
        vec![7.0, 9.0, 11.0]
    );
    assert_eq!(
        read(
            &f.call_uncompiled(&ArrayList::from_arrays([&*x3]))
                .unwrap()
                .get(0)
                .unwrap()
        ),
        vec![7.0, 9.0, 11.0]
    );

    // A closure returning Err: the error comes back, nothing crashes.
    let bad = compile(|_inputs: &ArrayList| Err("no such op: frobnicate".to_string())).unwrap();
    let err = bad.call(&ArrayList::from_arrays([&*x1])).unwrap_err();
    assert_eq!(err.op, "compiled_call");
    assert!(err.message.contains("no such op: frobnicate"), "{err}");
    // ...and again (MLX must not be left in a broken state).
    let err = bad.call(&ArrayList::from_arrays([&*x1])).unwrap_err();
    assert!(err.message.contains("frobnicate"), "{err}");

    // An MLX error inside the traced closure.
    let mlx_err = compile(|inputs: &ArrayList| {
        let x = inputs.get(0).map_err(|e| e.to_string())?;
        let y = ops::reshape(&x, &[7])?;
        Ok(ArrayList::from_arrays([&*y]))
    })
    .unwrap();
    let err = mlx_err.call(&ArrayList::from_arrays([&*x1])).unwrap_err();
    assert!(err.message.contains("[reshape]"), "{err}");
    assert!(err.message.contains("reshape"), "{err}");

    // A panicking closure.
    let panicky = compile(
        |_inputs: &ArrayList| -> Result<UniquePtr<ArrayList>, String> { panic!("boom in closure") },
    )
    .unwrap();
    let err = panicky.call(&ArrayList::from_arrays([&*x1])).unwrap_err();
    assert!(err.message.contains("boom in closure"), "{err}");

    // The good function still works after all that.
    assert_eq!(
        read(&f.call_arrays(&[&x1]).unwrap()[0]),
        vec![1.0, 3.0, 6.0]
    );

    // Shapeless compilation: one trace for all shapes.
    let g = rlx_mlx_shim::compile::compile_with(
        |inputs: &ArrayList| {
            let x = inputs.get(0).map_err(|e| e.to_string())?;
            let y = ops::exp(&x)?;
            Ok(ArrayList::from_arrays([&*y]))
        },
        true,
    )
    .unwrap();
    let z = f32s(&[0.0, 0.0], &[2]);
    assert_eq!(read(&g.call_arrays(&[&z]).unwrap()[0]), vec![1.0, 1.0]);
    let z = f32s(&[0.0; 5], &[5]);
    assert_eq!(read(&g.call_arrays(&[&z]).unwrap()[0]), vec![1.0; 5]);
}

#[test]
fn compile_captures_and_multiple_outputs() {
    let _g = lock();
    // A captured constant (weights) and two outputs.
    let w = f32s(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let f = compile(move |inputs: &ArrayList| {
        let x = inputs.get(0).map_err(|e| e.to_string())?;
        let y = ops::matmul(&x, &w)?;
        let s = ops::sum(&y, &[1], false)?;
        Ok(ArrayList::from_arrays([&*y, &*s]))
    })
    .unwrap();
    let x = f32s(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
    let out = f.call_arrays(&[&x]).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(read(&out[0]), vec![1.0, 2.0, 3.0, 4.0, 4.0, 6.0]);
    assert_eq!(read(&out[1]), vec![3.0, 7.0, 10.0]);
    // A new dtype retraces.
    let xd = ops::astype(&x, DType::F16).unwrap();
    let out = f.call_arrays(&[&xd]).unwrap();
    assert_eq!(out[1].dtype(), DType::F32);
    assert_eq!(read(&out[1]), vec![3.0, 7.0, 10.0]);

    // Evaluating inside the traced closure is refused by MLX: an Err, no crash.
    let evals = compile(|inputs: &ArrayList| {
        let x = inputs.get(0).map_err(|e| e.to_string())?;
        let y = ops::exp(&x)?;
        array::eval(&y)?;
        Ok(ArrayList::from_arrays([&*y]))
    })
    .unwrap();
    let r = evals.call_arrays(&[&x]);
    assert!(r.is_err(), "eval while tracing should fail");
}

#[test]
fn borrowed_buffer_is_read_in_place() {
    let _g = lock();
    let buf: Vec<f32> = vec![1.5, -2.0, 3.25, 8.0];
    let a = unsafe {
        array::array_from_borrowed(buf.as_ptr() as usize, 16, &[2, 2], DType::F32).unwrap()
    };
    assert_eq!(read(&a), buf);
    // MLX 0.32.4's CPU allocator cannot adopt foreign memory, so its
    // raw-pointer constructor copies; the probe reports what happens.
    let ptr = array::array_data_ptr(&a).unwrap();
    let zero_copy = array::borrow_is_zero_copy().unwrap();
    assert_eq!(zero_copy, ptr == buf.as_ptr() as usize);
    let s = ops::sum(&a, &[0, 1], false).unwrap();
    assert_eq!(s.item_f64().unwrap(), 10.75);
    drop(s);
    drop(a);
    // Size mismatch is an error.
    let err = unsafe {
        array::array_from_borrowed(buf.as_ptr() as usize, 12, &[2, 2], DType::F32).unwrap_err()
    };
    assert!(err.message.contains("12 bytes"), "{err}");
    drop(buf);
}

// ---- fast ops against naive references --------------------------------------

fn rms_norm_ref(x: &[f32], w: Option<&[f32]>, d: usize, eps: f32) -> Vec<f32> {
    let mut out = Vec::new();
    for row in x.chunks(d) {
        let ms: f32 = row.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let r = 1.0 / (ms + eps).sqrt();
        for (i, v) in row.iter().enumerate() {
            out.push(v * r * w.map_or(1.0, |w| w[i]));
        }
    }
    out
}

fn layer_norm_ref(x: &[f32], w: Option<&[f32]>, b: Option<&[f32]>, d: usize, eps: f32) -> Vec<f32> {
    let mut out = Vec::new();
    for row in x.chunks(d) {
        let mean: f32 = row.iter().sum::<f32>() / d as f32;
        let var: f32 = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let r = 1.0 / (var + eps).sqrt();
        for (i, v) in row.iter().enumerate() {
            out.push((v - mean) * r * w.map_or(1.0, |w| w[i]) + b.map_or(0.0, |b| b[i]));
        }
    }
    out
}

/// x: (L, D) rows; positions offset..offset+L.
#[allow(clippy::too_many_arguments)]
fn rope_ref(
    x: &[f32],
    l: usize,
    d: usize,
    dims: usize,
    traditional: bool,
    base: f32,
    scale: f32,
    offset: i32,
) -> Vec<f32> {
    let mut out = x.to_vec();
    let half = dims / 2;
    for t in 0..l {
        let pos = (offset as f32 + t as f32) * scale;
        let row = &x[t * d..(t + 1) * d];
        let o = &mut out[t * d..(t + 1) * d];
        for i in 0..half {
            let freq = 1.0 / base.powf(i as f32 / half as f32);
            let (s, c) = ((pos * freq) as f64).sin_cos();
            let (s, c) = (s as f32, c as f32);
            let (i1, i2) = if traditional {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + half)
            };
            let (x1, x2) = (row[i1], row[i2]);
            o[i1] = x1 * c - x2 * s;
            o[i2] = x1 * s + x2 * c;
        }
    }
    out
}

/// q: (H, Lq, D), k/v: (H, Lk, D) (batch 1).
#[allow(clippy::too_many_arguments)]
fn sdpa_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    h: usize,
    lq: usize,
    lk: usize,
    d: usize,
    scale: f32,
    causal: bool,
    mask: Option<&[bool]>,
) -> Vec<f32> {
    let mut out = vec![0.0; h * lq * d];
    for hh in 0..h {
        for i in 0..lq {
            let qi = &q[(hh * lq + i) * d..(hh * lq + i + 1) * d];
            let mut scores: Vec<f32> = (0..lk)
                .map(|j| {
                    let kj = &k[(hh * lk + j) * d..(hh * lk + j + 1) * d];
                    let allowed =
                        (!causal || j <= i + (lk - lq)) && mask.is_none_or(|m| m[i * lk + j]);
                    if allowed {
                        scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>()
                    } else {
                        f32::NEG_INFINITY
                    }
                })
                .collect();
            let mx = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut z = 0.0;
            for s in scores.iter_mut() {
                *s = (*s - mx).exp();
                z += *s;
            }
            for (j, s) in scores.iter().enumerate() {
                let vj = &v[(hh * lk + j) * d..(hh * lk + j + 1) * d];
                for t in 0..d {
                    out[(hh * lq + i) * d + t] += s / z * vj[t];
                }
            }
        }
    }
    out
}

fn pseudo(n: usize, seed: u32) -> Vec<f32> {
    // Small deterministic values in [-1, 1).
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            ((s >> 8) as f32 / (1u32 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn fast_norms_match_reference() {
    let _g = lock();
    let (rows, d) = (3, 8);
    let xs = pseudo(rows * d, 1);
    let ws = pseudo(d, 2);
    let bs = pseudo(d, 3);
    let x = f32s(&xs, &[rows as i32, d as i32]);
    let w = f32s(&ws, &[d as i32]);
    let b = f32s(&bs, &[d as i32]);
    let eps = 1e-5;

    let got = read(&fast::rms_norm(&x, Some(&w), eps).unwrap());
    assert_close(&got, &rms_norm_ref(&xs, Some(&ws), d, eps), 1e-5);
    let got = read(&fast::rms_norm(&x, None, eps).unwrap());
    assert_close(&got, &rms_norm_ref(&xs, None, d, eps), 1e-5);

    let got = read(&fast::layer_norm(&x, Some(&w), Some(&b), eps).unwrap());
    assert_close(
        &got,
        &layer_norm_ref(&xs, Some(&ws), Some(&bs), d, eps),
        1e-5,
    );
    let got = read(&fast::layer_norm(&x, None, None, eps).unwrap());
    assert_close(&got, &layer_norm_ref(&xs, None, None, d, eps), 1e-5);
    let got = read(&fast::layer_norm(&x, Some(&w), None, eps).unwrap());
    assert_close(&got, &layer_norm_ref(&xs, Some(&ws), None, d, eps), 1e-5);

    // Wrong weight size is an MLX error.
    let bad = f32s(&[1.0; 3], &[3]);
    let err = fast::rms_norm(&x, Some(&bad), eps).unwrap_err();
    assert_eq!(err.op, "rms_norm");
    assert!(err.message.contains("rms_norm"), "{err}");
}

#[test]
fn fast_rope_matches_reference() {
    let _g = lock();
    let (l, d) = (4usize, 8usize);
    let xs = pseudo(l * d, 4);
    let x = f32s(&xs, &[1, 1, l as i32, d as i32]);
    for &(dims, traditional, base, scale, offset) in &[
        (8usize, false, 10000.0f32, 1.0f32, 0i32),
        (8, true, 10000.0, 1.0, 3),
        (4, false, 100.0, 0.5, 2),
        (6, true, 500.0, 1.0, 1),
    ] {
        let got = read(&fast::rope(&x, dims as i32, traditional, base, scale, offset).unwrap());
        let want = rope_ref(&xs, l, d, dims, traditional, base, scale, offset);
        assert_close(&got, &want, 1e-5);
    }
}

#[test]
fn fast_sdpa_matches_reference() {
    let _g = lock();
    let (h, l, d) = (2usize, 3usize, 4usize);
    let qs = pseudo(h * l * d, 5);
    let ks = pseudo(h * l * d, 6);
    let vs = pseudo(h * l * d, 7);
    let shape = [1, h as i32, l as i32, d as i32];
    let (q, k, v) = (f32s(&qs, &shape), f32s(&ks, &shape), f32s(&vs, &shape));
    let scale = 1.0 / (d as f32).sqrt();

    let got = read(&fast::scaled_dot_product_attention(&q, &k, &v, scale, "", None).unwrap());
    assert_close(
        &got,
        &sdpa_ref(&qs, &ks, &vs, h, l, l, d, scale, false, None),
        1e-5,
    );

    let got = read(&fast::scaled_dot_product_attention(&q, &k, &v, scale, "causal", None).unwrap());
    assert_close(
        &got,
        &sdpa_ref(&qs, &ks, &vs, h, l, l, d, scale, true, None),
        1e-5,
    );

    // Boolean keep-mask (broadcast over heads).
    let mask_v = [true, false, true, true, true, false, false, true, true];
    let mask = Array::from_slice(&mask_v, &[l as i32, l as i32]).unwrap();
    let got =
        read(&fast::scaled_dot_product_attention(&q, &k, &v, scale, "", Some(&mask)).unwrap());
    assert_close(
        &got,
        &sdpa_ref(&qs, &ks, &vs, h, l, l, d, scale, false, Some(&mask_v)),
        1e-5,
    );

    let err = fast::scaled_dot_product_attention(&q, &k, &v, scale, "sideways", None).unwrap_err();
    assert_eq!(err.op, "scaled_dot_product_attention");
}

#[test]
fn assorted_ops() {
    let _g = lock();
    let a = f32s(&[1.0, 5.0, 3.0, 4.0, 2.0, 6.0], &[2, 3]);
    assert_eq!(read(&ops::sum(&a, &[1], false).unwrap()), vec![9.0, 12.0]);
    assert_eq!(
        read(&ops::max(&a, &[0], true).unwrap()),
        vec![4.0, 5.0, 6.0]
    );
    assert_eq!(read(&ops::mean(&a, &[0, 1], false).unwrap()), vec![3.5]);
    assert_eq!(
        ops::argmax(&a, 1, false).unwrap().to_vec::<u32>().unwrap(),
        vec![1, 2]
    );
    let sm = read(&ops::softmax(&a, &[1], true).unwrap());
    let e: Vec<f32> = [1.0f32, 5.0, 3.0].iter().map(|v| (v - 5.0).exp()).collect();
    let z: f32 = e.iter().sum();
    assert_close(&sm[..3], &e.iter().map(|v| v / z).collect::<Vec<_>>(), 1e-6);
    assert_eq!(
        read(&ops::cumsum(&a, 1, false, true).unwrap()),
        vec![1.0, 6.0, 9.0, 4.0, 6.0, 12.0]
    );
    assert_eq!(
        read(&ops::cumsum(&a, 1, true, false).unwrap()),
        vec![8.0, 3.0, 0.0, 8.0, 6.0, 0.0]
    );
    assert_eq!(
        read(&ops::sort(&a, 1).unwrap()),
        vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]
    );
    assert_eq!(
        read(&ops::clip(&a, 2.0, f64::NAN).unwrap()),
        vec![2.0, 5.0, 3.0, 4.0, 2.0, 6.0]
    );
    assert_eq!(
        read(&ops::clip(&a, f64::NAN, 3.0).unwrap()),
        vec![1.0, 3.0, 3.0, 3.0, 2.0, 3.0]
    );

    let idx = Array::from_slice(&[2i32, 0], &[2]).unwrap();
    assert_eq!(
        read(&ops::take(&a, &idx, 1).unwrap()),
        vec![3.0, 1.0, 6.0, 4.0]
    );

    let c = ops::concatenate(&ArrayList::from_arrays([&*a, &*a]), 0).unwrap();
    assert_eq!(c.shape(), vec![4, 3]);
    let cond = Array::from_slice(&[true, false, true, false, true, false], &[2, 3]).unwrap();
    let zero = array::scalar_f64(0.0, DType::F32).unwrap();
    assert_eq!(
        read(&ops::where_(&cond, &a, &zero).unwrap()),
        vec![1.0, 0.0, 3.0, 0.0, 2.0, 0.0]
    );
    let p = ops::pad(&a, &[1], &[1], &[0], -1.0).unwrap();
    assert_eq!(p.shape(), vec![2, 4]);
    assert_eq!(read(&p), vec![-1.0, 1.0, 5.0, 3.0, -1.0, 4.0, 2.0, 6.0]);
    assert_eq!(
        read(&ops::tril(&f32s(&[1.0; 4], &[2, 2]), 0).unwrap()),
        vec![1.0, 0.0, 1.0, 1.0]
    );

    // scatter_add (single axis): add rows of updates into rows 0 and 0 of z.
    let z = array::full(&[3, 2], 0.0, DType::F32).unwrap();
    let ind = Array::from_slice(&[0i32, 0, 2], &[3]).unwrap();
    let upd = f32s(&[1.0, 2.0, 10.0, 20.0, 5.0, 6.0], &[3, 1, 2]);
    assert_eq!(
        read(&ops::scatter_add(&z, &ind, &upd, 0).unwrap()),
        vec![11.0, 22.0, 0.0, 0.0, 5.0, 6.0]
    );

    let e = ops::einsum("ij,kj->ik", &ArrayList::from_arrays([&*a, &*a])).unwrap();
    // rows [1,5,3] and [4,2,6]: 1+25+9 = 35, 4+10+18 = 32, 16+4+36 = 56
    assert_eq!(read(&e), vec![35.0, 32.0, 32.0, 56.0]);
    let td = ops::tensordot(&a, &a, &[1], &[1]).unwrap();
    assert_eq!(read(&td), vec![35.0, 32.0, 32.0, 56.0]);

    // conv_general: 1-D, one channel, kernel [1, 1].
    let inp = f32s(&[1.0, 2.0, 3.0, 4.0], &[1, 4, 1]);
    let w = f32s(&[1.0, 1.0], &[1, 2, 1]);
    let y = ops::conv_general(&inp, &w, &[1], &[0], &[0], &[1], &[1], 1, false).unwrap();
    assert_eq!(read(&y), vec![3.0, 5.0, 7.0]);

    let ar = array::arange(0.0, 5.0, 1.0, DType::I32).unwrap();
    assert_eq!(ar.to_vec::<i32>().unwrap(), vec![0, 1, 2, 3, 4]);
    let f = array::full(&[2], 1.5, DType::F64).unwrap();
    assert_eq!(f.to_vec::<f64>().unwrap(), vec![1.5, 1.5]);
    let ev = ArrayList::from_arrays([&*ar, &*f]);
    array::eval_list(&ev).unwrap();
    assert_eq!(ev.to_vec().len(), 2);
}

#[test]
fn random_linalg_fft() {
    let _g = lock();
    let k = random::key(42).unwrap();
    let a = random::normal(&[4], DType::F32, &k).unwrap();
    let b = random::normal(&[4], DType::F32, &k).unwrap();
    assert_eq!(read(&a), read(&b), "same key, same numbers");
    let keys = random::split(&k).unwrap();
    assert_eq!(keys.len(), 2);
    let c = random::normal(&[4], DType::F32, &keys.get(0).unwrap()).unwrap();
    assert_ne!(read(&a), read(&c));
    let u = read(&random::uniform(2.0, 3.0, &[64], DType::F32, &k).unwrap());
    assert!(u.iter().all(|&v| (2.0..3.0).contains(&v)), "{u:?}");
    let ri = random::randint(0, 5, &[32], DType::I32, &k).unwrap();
    assert!(ri
        .to_vec::<i32>()
        .unwrap()
        .iter()
        .all(|v| (0..5).contains(v)));

    let m = f32s(&[4.0, 1.0, 1.0, 3.0], &[2, 2]);
    let rhs = f32s(&[1.0, 2.0], &[2]);
    let x = read(&linalg::solve(&m, &rhs).unwrap());
    // 4x + y = 1, x + 3y = 2 -> x = 1/11, y = 7/11
    assert_close(&x, &[1.0 / 11.0, 7.0 / 11.0], 1e-6);
    let inv = read(&linalg::inv(&m).unwrap());
    assert_close(
        &inv,
        &[3.0 / 11.0, -1.0 / 11.0, -1.0 / 11.0, 4.0 / 11.0],
        1e-6,
    );
    let l = read(&linalg::cholesky(&m, false).unwrap());
    assert_close(&l, &[2.0, 0.0, 0.5, (3.0f32 - 0.25).sqrt()], 1e-6);
    let qr = linalg::qr(&m).unwrap();
    assert_eq!(qr.len(), 2);
    let back = read(&ops::matmul(&qr.get(0).unwrap(), &qr.get(1).unwrap()).unwrap());
    assert_close(&back, &[4.0, 1.0, 1.0, 3.0], 1e-5);

    let sig = f32s(&[1.0, 0.0, -1.0, 0.0], &[4]);
    let spec = fft::rfft(&sig, 0, -1).unwrap();
    assert_eq!(spec.dtype(), DType::C64);
    assert_eq!(spec.shape(), vec![3]);
    let mag = read(&ops::abs(&spec).unwrap());
    assert_close(&mag, &[0.0, 2.0, 0.0], 1e-6);
    let back = read(&fft::irfft(&spec, 4, -1).unwrap());
    assert_close(&back, &[1.0, 0.0, -1.0, 0.0], 1e-6);
}

#[test]
fn dtypes_round_trip_through_mlx() {
    let _g = lock();
    for dt in [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
    ] {
        let a = array::full(&[3], 1.0, dt).unwrap();
        assert_eq!(a.dtype(), dt);
        assert_eq!(array::array_itemsize(&a), dt.size_of());
        assert_eq!(a.to_bytes().unwrap().len(), 3 * dt.size_of());
    }
    let b = Array::from_slice(&[true, false, true], &[3]).unwrap();
    let n = ops::logical_not(&b).unwrap();
    assert_eq!(n.to_vec::<bool>().unwrap(), vec![false, true, false]);
    let i = ops::astype(&b, DType::I64).unwrap();
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 0, 1]);
}
