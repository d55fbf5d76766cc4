//! `rlx-host run` with real data: inputs and params from safetensors (and
//! one input from `.npy`), outputs written with `--output`, on the MLX
//! plugin and on rlx-runtime's CPU backend; values checked against the
//! model's formula computed here in f64. Mismatched files are errors that
//! name the tensor.
//!
//! The model: `z = x · w` (x f32[2, 3] input, w f32[3, 4] param),
//! `s = x + y` (y f32[2, 3] input), `h = f16(z)`; outputs z, s, h.
//! Tolerances: z and s at 1e-6 abs + 1e-6 rel (sums of three products);
//! h at f16's half-ulp (2^-11 relative).

mod common;

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType, Graph, Shape};
use safetensors::tensor::{Dtype, TensorView};
use std::path::{Path, PathBuf};
use std::process::Output;

const X: [f32; 6] = [0.5, -1.25, 2.0, 3.5, -0.75, 1.0];
const Y: [f64; 6] = [0.1, 0.2, -0.3, 0.4, -0.5, 0.6];
const W: [f32; 12] = [
    1.0, -0.5, 0.25, 2.0, -1.5, 0.75, 1.25, -2.0, 0.5, 1.0, -0.25, 3.0,
];

fn model(dir: &Path) -> PathBuf {
    let f = |d: &[usize]| Shape::new(d, DType::F32);
    let mut g = Graph::new("data_io");
    let x = g.input("x", f(&[2, 3]));
    let y = g.input("y", f(&[2, 3]));
    let w = g.param("w", f(&[3, 4]));
    let z = g.matmul(x, w, f(&[2, 4]));
    let s = g.add(x, y);
    let h = g.cast(z, DType::F16);
    g.set_outputs(vec![z, s, h]);
    g.set_output_names(vec![(0, "z".into()), (1, "s".into()), (2, "h".into())]);
    let p = dir.join("data_io.rlxmodel");
    std::fs::write(&p, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    p
}

/// A tensor to write: name, dtype, shape, little-endian bytes.
type StTensor<'a> = (&'a str, Dtype, Vec<usize>, Vec<u8>);

fn write_st(path: &Path, tensors: &[StTensor]) {
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, dt, shape, b)| {
            (
                n.to_string(),
                TensorView::new(*dt, shape.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, &None, path).unwrap();
}

fn le32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn le64(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn rlx_host(home: &Path, args: &[&str]) -> Output {
    common::rlx_host_on_mlx(home, args)
}

/// `rlx-host run MODEL --backend mlx --inputs INPUTS [--output OUT]`.
fn run_on_mlx(home: &Path, model: &Path, inputs: &Path, output: Option<&Path>) -> Output {
    let mut args = vec![
        "run",
        model.to_str().unwrap(),
        "--backend",
        "mlx",
        "--inputs",
        inputs.to_str().unwrap(),
    ];
    if let Some(o) = output {
        args.extend(["--output", o.to_str().unwrap()]);
    }
    rlx_host(home, &args)
}

/// The outputs file: name -> (dtype, shape, values as f64).
fn read_outputs(path: &Path) -> Vec<(String, Dtype, Vec<usize>, Vec<f64>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<&String> = st.names();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let t = st.tensor(n).unwrap();
            let v: Vec<f64> = match t.dtype() {
                Dtype::F32 => t
                    .data()
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                    .collect(),
                Dtype::F16 => t
                    .data()
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64())
                    .collect(),
                other => panic!("unexpected {other:?}"),
            };
            (n.clone(), t.dtype(), t.shape().to_vec(), v)
        })
        .collect()
}

/// z = x · w and s = x + y in f64, from the values as the graph sees
/// them (y rounded to f32 on the way in).
fn reference(x: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let mut z = vec![0f64; 8];
    for i in 0..2 {
        for j in 0..4 {
            z[i * 4 + j] = (0..3)
                .map(|k| x[i * 3 + k] as f64 * W[k * 4 + j] as f64)
                .sum();
        }
    }
    let s = x
        .iter()
        .zip(Y)
        .map(|(a, b)| *a as f64 + (b as f32) as f64)
        .collect();
    (z, s)
}

fn check(got: &[(String, Dtype, Vec<usize>, Vec<f64>)], x: &[f32], what: &str) {
    let (z, s) = reference(x);
    let names: Vec<&str> = got.iter().map(|(n, ..)| n.as_str()).collect();
    assert_eq!(names, ["h", "s", "z"], "{what}");
    for (name, dt, shape, v) in got {
        let (want, want_dt, want_shape, rel) = match name.as_str() {
            "z" => (&z, Dtype::F32, vec![2, 4], 1e-6),
            "s" => (&s, Dtype::F32, vec![2, 3], 1e-6),
            _ => (&z, Dtype::F16, vec![2, 4], 1.0 / 2048.0),
        };
        assert_eq!(
            (*dt, shape),
            (want_dt, &want_shape),
            "{what}: output {name}"
        );
        for (i, (g, w)) in v.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 + rel * w.abs(),
                "{what}: {name}[{i}] = {g}, want {w}"
            );
        }
    }
}

#[test]
fn inputs_and_params_from_files_and_outputs_to_a_file_on_mlx_and_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let m = model(dir.path());
    let inputs = dir.path().join("in.safetensors");
    // y as f64: converted to the model's f32.
    write_st(
        &inputs,
        &[
            ("x", Dtype::F32, vec![2, 3], le32(&X)),
            ("y", Dtype::F64, vec![2, 3], le64(&Y)),
        ],
    );
    let params = dir.path().join("w.safetensors");
    write_st(&params, &[("w", Dtype::F32, vec![3, 4], le32(&W))]);
    for backend in ["mlx", "cpu"] {
        for mode in ["lazy", "eager", "compiled"] {
            if backend == "cpu" && mode != "lazy" {
                continue;
            }
            let out = dir.path().join(format!("out-{backend}-{mode}.safetensors"));
            let o = rlx_host(
                &home,
                &[
                    "run",
                    m.to_str().unwrap(),
                    "--backend",
                    backend,
                    "--mode",
                    mode,
                    "--inputs",
                    inputs.to_str().unwrap(),
                    "--params",
                    params.to_str().unwrap(),
                    "--output",
                    out.to_str().unwrap(),
                ],
            );
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            check(&read_outputs(&out), &X, &format!("{backend} {mode}"));
        }
    }
}

/// A `.npy` v1.0 file of little-endian f32 in C order.
fn write_npy(path: &Path, shape: &[usize], v: &[f32]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes.extend(le32(v));
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn one_input_from_npy() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut g = Graph::new("npy");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let y = g.neg(x);
    g.set_outputs(vec![y]);
    let m = dir.path().join("npy.rlxmodel");
    std::fs::write(&m, rlx_ir::rlxmodel::to_text(&g).unwrap()).unwrap();
    let npy = dir.path().join("x.npy");
    write_npy(&npy, &[2, 3], &X);
    let out = dir.path().join("out.safetensors");
    let o = run_on_mlx(&home, &m, &npy, Some(&out));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_outputs(&out);
    assert_eq!(got.len(), 1);
    let want: Vec<f64> = X.iter().map(|v| -(*v as f64)).collect();
    assert_eq!(got[0].3, want);
}

#[test]
fn mismatched_files_are_errors_that_name_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let m = model(dir.path());
    let run = |inputs: &Path| run_on_mlx(&home, &m, inputs, None);
    let y = ("y", Dtype::F32, vec![2, 3], le32(&[0.0; 6]));
    let cases: Vec<(&str, Vec<StTensor>, String)> = vec![
        (
            "dtype",
            vec![("x", Dtype::I32, vec![2, 3], vec![0u8; 24]), y.clone()],
            "input \"x\": the model declares f32 but".into(),
        ),
        (
            "shape",
            vec![("x", Dtype::F32, vec![3, 2], le32(&X)), y.clone()],
            "input \"x\": the model declares shape [2, 3] but".into(),
        ),
        ("missing", vec![y.clone()], "input \"x\" is not in".into()),
        (
            "unknown",
            vec![
                ("x", Dtype::F32, vec![2, 3], le32(&X)),
                y.clone(),
                ("q", Dtype::F32, vec![1], le32(&[1.0])),
            ],
            "tensor \"q\" is not an input of the model (its inputs: x, y)".into(),
        ),
    ];
    for (what, tensors, says) in cases {
        let p = dir.path().join(format!("{what}.safetensors"));
        write_st(&p, &tensors);
        let o = run(&p);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains(&says), "{what}: {says:?} not in {err}");
    }
    // A .npy for a model with two inputs.
    let npy = dir.path().join("x.npy");
    write_npy(&npy, &[2, 3], &X);
    let o = run(&npy);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a .npy file holds one tensor, but the model has 2 inputs"),
        "{err}"
    );
}
