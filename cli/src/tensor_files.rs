//! A model's tensors in files: inputs and params read from safetensors
//! (and one input from `.npy`), outputs written to safetensors.
//!
//! Values travel as [`ModelData`]'s f32 (rlx-runtime's `Session` surface
//! takes and returns f32; it converts at each boundary to the declared
//! dtype). The rules, the same for inputs and params:
//! - a float leaf takes f32, f16, bf16 or f64 data; an integer or bool
//!   leaf takes integer or bool data, each value exactly representable in
//!   f32 (|v| <= 2^24); anything else is an error naming the tensor;
//! - the shape must be the declared one; a complex (c64, c128) leaf of
//!   shape `[..]` is stored as a float tensor of shape `[.., 2]`, real and
//!   imaginary parts last (PyTorch's `view_as_real` layout);
//! - an inputs file must hold exactly the model's inputs (a missing or an
//!   unknown name is an error); a params file may hold some params (the
//!   rest keep their seeded values) and tensors the model does not declare
//!   are ignored with a warning.
//!
//! Outputs are written in their declared dtype (f64 outputs from the f32
//! values rlx-runtime returned; complex ones as `[.., 2]` float tensors),
//! and read back by the same rules as a saved reference.

use crate::model_data::{dims_of as static_dims, fmt_dims, output_infos, ModelData};
use rlx_ir::{DType, Graph, Op};
use safetensors::Dtype;
use std::collections::HashMap;
use std::path::Path;

/// Which leaves a file fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaves {
    Inputs,
    Params,
}

impl Leaves {
    fn what(self) -> &'static str {
        match self {
            Leaves::Inputs => "input",
            Leaves::Params => "param",
        }
    }
}

/// One tensor read from a file: its dtype, shape and little-endian bytes.
struct FileTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// The model's leaves of one kind: name -> declared shape.
fn declared(graph: &Graph, which: Leaves) -> Vec<(&str, &rlx_ir::Shape)> {
    graph
        .nodes()
        .iter()
        .filter_map(|n| match (&n.op, which) {
            (Op::Input { name }, Leaves::Inputs) => Some((name.as_str(), &n.shape)),
            (Op::Param { name }, Leaves::Params) => Some((name.as_str(), &n.shape)),
            _ => None,
        })
        .collect()
}

fn read_safetensors(path: &Path) -> Result<Vec<(String, FileTensor)>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: not a safetensors file: {e}", path.display()))?;
    let mut names: Vec<&String> = st.names();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let t = st
                .tensor(name)
                .map_err(|e| format!("{}: tensor {name:?}: {e}", path.display()))?;
            Ok((
                name.clone(),
                FileTensor {
                    dtype: t.dtype(),
                    shape: t.shape().to_vec(),
                    data: t.data().to_vec(),
                },
            ))
        })
        .collect()
}

/// A `.npy` file (format 1.0 to 3.0, little-endian, C order).
fn read_npy(path: &Path) -> Result<FileTensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bad = |why: &str| format!("{}: not a .npy file this reads: {why}", path.display());
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("no \\x93NUMPY magic"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
        v => return Err(bad(&format!("format version {v}"))),
    };
    let header = bytes
        .get(start..start + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("a truncated or non-text header"))?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or_else(|| bad(&format!("no {key:?} in the header")))?;
        let rest = header[at + key.len() + 2..].trim_start();
        Ok(rest.strip_prefix(':').unwrap_or(rest).trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or_else(|| bad("descr is not a string"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err(bad("Fortran order (save it C-contiguous)"));
    }
    let shape_text = field("shape")?;
    let shape_text = shape_text
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("shape is not a tuple"))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad("shape is not integers")))
        .collect::<Result<Vec<_>, _>>()?;
    let dtype = match descr {
        "<f4" => Dtype::F32,
        "<f8" => Dtype::F64,
        "<f2" => Dtype::F16,
        "<i8" => Dtype::I64,
        "<i4" => Dtype::I32,
        "<i2" => Dtype::I16,
        "|i1" => Dtype::I8,
        "|u1" => Dtype::U8,
        "<u4" => Dtype::U32,
        "<u8" => Dtype::U64,
        "|b1" => Dtype::BOOL,
        other => {
            return Err(bad(&format!(
                "dtype {other:?} (little-endian numbers and bool only)"
            )))
        }
    };
    let data = bytes[start + header_len..].to_vec();
    let want = shape.iter().product::<usize>() * dtype.size();
    if data.len() != want {
        return Err(bad(&format!(
            "{} data bytes for shape {} of {dtype:?}, expected {want}",
            data.len(),
            fmt_dims(&shape)
        )));
    }
    Ok(FileTensor { dtype, shape, data })
}

/// A file tensor's values as f32, for a leaf of `declared` dtype.
fn to_values(t: &FileTensor, leaf: DType, what: &str, file: &Path) -> Result<Vec<f32>, String> {
    let raw = &t.data;
    let float_file = matches!(t.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64);
    let float_leaf = leaf.is_float() || leaf.is_complex();
    if float_file != float_leaf {
        return Err(format!(
            "{what}: the model declares {leaf} but {} stores it as {:?}; {}",
            file.display(),
            t.dtype,
            if float_leaf {
                "a float leaf takes f32, f16, bf16 or f64 data"
            } else {
                "an integer or bool leaf takes integer or bool data"
            }
        ));
    }
    let ints = |v: Vec<i128>| -> Result<Vec<f32>, String> {
        match v.iter().find(|x| x.unsigned_abs() > 1 << 24) {
            Some(x) => Err(format!(
                "{what}: value {x} in {} is not exact as f32 (|v| > 2^24), which rlx-runtime's \
                 run surface carries",
                file.display()
            )),
            None => Ok(v.into_iter().map(|x| x as f32).collect()),
        }
    };
    macro_rules! le {
        ($t:ty, $n:literal) => {
            raw.chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().unwrap()))
        };
    }
    Ok(match t.dtype {
        Dtype::F32 => le!(f32, 4).collect(),
        Dtype::F64 => le!(f64, 8).map(|v| v as f32).collect(),
        Dtype::F16 => le!(half::f16, 2).map(|v| v.to_f32()).collect(),
        Dtype::BF16 => le!(half::bf16, 2).map(|v| v.to_f32()).collect(),
        Dtype::I64 => ints(le!(i64, 8).map(i128::from).collect())?,
        Dtype::I32 => ints(le!(i32, 4).map(i128::from).collect())?,
        Dtype::I16 => ints(le!(i16, 2).map(i128::from).collect())?,
        Dtype::I8 => ints(raw.iter().map(|b| *b as i8 as i128).collect())?,
        Dtype::U8 | Dtype::BOOL => raw.iter().map(|b| *b as f32).collect(),
        Dtype::U16 => ints(le!(u16, 2).map(i128::from).collect())?,
        Dtype::U32 => ints(le!(u32, 4).map(i128::from).collect())?,
        Dtype::U64 => ints(le!(u64, 8).map(i128::from).collect())?,
        other => {
            return Err(format!(
                "{what}: {} stores it as {other:?}, which this does not read",
                file.display()
            ))
        }
    })
}

/// Check `t` against a leaf's declared shape (with the complex pair axis).
fn check_shape(
    t: &FileTensor,
    shape: &rlx_ir::Shape,
    what: &str,
    file: &Path,
) -> Result<(), String> {
    let dims = static_dims(shape).map_err(|e| format!("{what}: {e}"))?;
    let mut want = dims.clone();
    if shape.dtype().is_complex() {
        want.push(2);
    }
    if t.shape == want {
        return Ok(());
    }
    Err(if shape.dtype().is_complex() {
        format!(
            "{what}: the model declares {} shape {}, stored as a float tensor of shape {} \
             (re, im last), but {} has shape {}",
            shape.dtype(),
            fmt_dims(&dims),
            fmt_dims(&want),
            file.display(),
            fmt_dims(&t.shape)
        )
    } else {
        format!(
            "{what}: the model declares shape {} but {} has shape {}",
            fmt_dims(&want),
            file.display(),
            fmt_dims(&t.shape)
        )
    })
}

fn slot<'a>(
    data: &'a mut ModelData,
    which: Leaves,
    name: &str,
) -> Result<&'a mut Vec<f32>, String> {
    let list = match which {
        Leaves::Inputs => &mut data.inputs,
        Leaves::Params => &mut data.params,
    };
    list.iter_mut()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .ok_or_else(|| format!("{} {name:?} has no slot", which.what()))
}

/// Fill `which` leaves from a safetensors file (see the module docs).
pub fn load_safetensors(
    graph: &Graph,
    path: &Path,
    which: Leaves,
    data: &mut ModelData,
) -> Result<(), String> {
    let tensors = read_safetensors(path)?;
    let leaves: HashMap<&str, &rlx_ir::Shape> = declared(graph, which).into_iter().collect();
    let mut loaded = 0;
    for (name, t) in &tensors {
        let what = format!("{} {name:?}", which.what());
        let Some(shape) = leaves.get(name.as_str()) else {
            match which {
                Leaves::Params => {
                    log::warn!(
                        "{}: tensor {name:?} is not a param of the model; ignored",
                        path.display()
                    );
                    continue;
                }
                Leaves::Inputs => {
                    let mut names: Vec<&str> = leaves.keys().copied().collect();
                    names.sort();
                    return Err(format!(
                        "{}: tensor {name:?} is not an input of the model (its inputs: {})",
                        path.display(),
                        names.join(", ")
                    ));
                }
            }
        };
        check_shape(t, shape, &what, path)?;
        let values = to_values(t, shape.dtype(), &what, path)?;
        *slot(data, which, name)? = values;
        loaded += 1;
    }
    if which == Leaves::Inputs {
        let have: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
        if let Some((missing, _)) = declared(graph, which)
            .into_iter()
            .find(|(n, _)| !have.contains(n))
        {
            return Err(format!(
                "input {missing:?} is not in {} (it holds: {})",
                path.display(),
                if have.is_empty() {
                    "nothing".to_string()
                } else {
                    have.join(", ")
                }
            ));
        }
    }
    log::info!(
        "{loaded} of {} {}s from {}",
        leaves.len(),
        which.what(),
        path.display()
    );
    Ok(())
}

/// Fill the model's one input from a `.npy` file.
pub fn load_npy_input(graph: &Graph, path: &Path, data: &mut ModelData) -> Result<(), String> {
    let inputs = declared(graph, Leaves::Inputs);
    let [(name, shape)] = inputs.as_slice() else {
        return Err(format!(
            "{}: a .npy file holds one tensor, but the model has {} inputs; give them in a \
             safetensors file",
            path.display(),
            inputs.len()
        ));
    };
    let t = read_npy(path)?;
    let what = format!("input {name:?}");
    check_shape(&t, shape, &what, path)?;
    let values = to_values(&t, shape.dtype(), &what, path)?;
    *slot(data, Leaves::Inputs, name)? = values;
    Ok(())
}

/// Fill the inputs from `path`: `.npy` for a one-input model, else
/// safetensors.
pub fn load_inputs(graph: &Graph, path: &Path, data: &mut ModelData) -> Result<(), String> {
    if path.extension().is_some_and(|e| e == "npy") {
        load_npy_input(graph, path, data)
    } else {
        load_safetensors(graph, path, Leaves::Inputs, data)
    }
}

/// The safetensors dtype and bytes an output of `dt` is written as.
fn output_bytes(values: &[f32], dt: DType) -> (Dtype, Vec<u8>) {
    let f32s = || values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f64s = || {
        values
            .iter()
            .flat_map(|v| (*v as f64).to_le_bytes())
            .collect()
    };
    match dt {
        DType::F16 => (
            Dtype::F16,
            values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
        ),
        DType::BF16 => (
            Dtype::BF16,
            values
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
        ),
        DType::F64 | DType::C128 => (Dtype::F64, f64s()),
        DType::I64 => (
            Dtype::I64,
            values
                .iter()
                .flat_map(|v| (*v as i64).to_le_bytes())
                .collect(),
        ),
        DType::I32 => (
            Dtype::I32,
            values
                .iter()
                .flat_map(|v| (*v as i32).to_le_bytes())
                .collect(),
        ),
        DType::I16 => (
            Dtype::I16,
            values
                .iter()
                .flat_map(|v| (*v as i16).to_le_bytes())
                .collect(),
        ),
        DType::I8 => (Dtype::I8, values.iter().map(|v| *v as i8 as u8).collect()),
        DType::U8 => (Dtype::U8, values.iter().map(|v| *v as u8).collect()),
        DType::U32 => (
            Dtype::U32,
            values
                .iter()
                .flat_map(|v| (*v as u32).to_le_bytes())
                .collect(),
        ),
        DType::Bool => (
            Dtype::BOOL,
            values.iter().map(|v| (*v != 0.0) as u8).collect(),
        ),
        DType::F32 | DType::C64 => (Dtype::F32, f32s()),
    }
}

/// Write `outputs` (one per graph output, [`ModelData`]'s f32 layout) to
/// a safetensors file, each under its output name in its declared dtype.
pub fn write_outputs(graph: &Graph, outputs: &[Vec<f32>], path: &Path) -> Result<(), String> {
    let infos = output_infos(graph, outputs);
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (i, (name, mut dims, _)) in infos.into_iter().enumerate() {
        if owned.iter().any(|(n, ..)| *n == name) {
            return Err(format!(
                "two outputs are named {name:?}; safetensors needs distinct names"
            ));
        }
        let dt = graph.shape(graph.outputs[i]).dtype();
        if dt.is_complex() {
            dims.push(2);
        }
        let values = &outputs[i];
        // dims carries the complex pair axis: one value per position.
        let n = dims.iter().product::<usize>();
        if values.len() != n {
            return Err(format!(
                "output {name:?}: {} values for shape {}",
                values.len(),
                fmt_dims(&dims)
            ));
        }
        let (st, bytes) = output_bytes(values, dt);
        owned.push((name, st, dims, bytes));
    }
    let views = owned
        .iter()
        .map(|(n, dt, dims, bytes)| {
            safetensors::tensor::TensorView::new(*dt, dims.clone(), bytes)
                .map(|v| (n.clone(), v))
                .map_err(|e| format!("output {n:?}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    safetensors::serialize_to_file(views, &None, path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Read back outputs [`write_outputs`] wrote (`run --output`), one per
/// graph output by name, as [`ModelData`]'s f32 values: a saved reference
/// for `run --compare FILE`. Each must be there in its declared shape;
/// other tensors in the file are an error, as a file of another model's
/// outputs would be.
pub fn read_outputs(graph: &Graph, path: &Path) -> Result<Vec<Vec<f32>>, String> {
    let tensors = read_safetensors(path)?;
    let names: Vec<String> = output_infos(graph, &[])
        .into_iter()
        .map(|(n, ..)| n)
        .collect();
    if let Some((extra, _)) = tensors.iter().find(|(n, _)| !names.contains(n)) {
        return Err(format!(
            "{}: tensor {extra:?} is not an output of the model (its outputs: {})",
            path.display(),
            names.join(", ")
        ));
    }
    names
        .iter()
        .zip(&graph.outputs)
        .map(|(name, id)| {
            let what = format!("output {name:?}");
            let t = tensors
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
                .ok_or_else(|| format!("{what} is not in {}", path.display()))?;
            let shape = graph.shape(*id);
            check_shape(t, shape, &what, path)?;
            to_values(t, shape.dtype(), &what, path)
        })
        .collect()
}

/// Write `tensors` (f32), each flat under its name, as one safetensors
/// file: the params a distributed run's workers read, and the outputs
/// `run --compare`'s reference child hands back exactly (named by
/// position, read by [`read_f32_values`]).
pub fn write_f32_safetensors(path: &Path, tensors: &[(String, Vec<f32>)]) -> Result<(), String> {
    let bytes: Vec<(String, Vec<u8>, usize)> = tensors
        .iter()
        .map(|(n, v)| {
            (
                n.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                v.len(),
            )
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(n, b, len)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![*len], b)
                .map(|v| (n.clone(), v))
                .map_err(|e| format!("{n}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    safetensors::serialize_to_file(views, &None, path)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Read back `n` outputs [`write_f32_safetensors`] wrote under the names
/// `0` .. `n - 1`.
pub fn read_f32_values(path: &Path, n: usize) -> Result<Vec<Vec<f32>>, String> {
    let tensors = read_safetensors(path)?;
    (0..n)
        .map(|i| {
            let what = format!("output {i}");
            let t = tensors
                .iter()
                .find(|(name, _)| *name == i.to_string())
                .map(|(_, t)| t)
                .ok_or_else(|| format!("{}: no {what}", path.display()))?;
            if t.dtype != Dtype::F32 {
                return Err(format!("{}: {what} is not f32", path.display()));
            }
            to_values(t, DType::F32, &what, path)
        })
        .collect()
}
