//! Seeded data for a graph's leaves, rlx-runtime's CPU backend as the
//! reference, and the comparison of a plugin's outputs with it.

use rlx_ir::infer::GraphExt;
use rlx_ir::{DType as IrDType, Dim, Graph, Op, Shape};
use rlx_plugin_api::convert::{bytes_to_f32, f32_to_bytes};
use rlx_plugin_api::{DType, HostTensor};
use rlx_runtime::Device;

/// How a leaf's values are drawn.
#[derive(Clone, Copy, Debug)]
pub enum Fill {
    /// Uniform in `[lo, hi)`.
    Uniform(f32, f32),
    /// Integers uniform in `[lo, hi)`.
    Int(i32, i32),
    /// 0 or 1.
    Bool,
}

/// The ABI dtype of an rlx-ir dtype, when the ABI has one.
pub fn abi_dtype(d: IrDType) -> Option<DType> {
    DType::from_name(&format!("{d:?}"))
}

/// A graph input or param with its seeded values, already rounded to its
/// dtype (so the plugin and the reference see the same numbers).
#[derive(Clone, Debug)]
pub struct Leaf {
    pub name: String,
    pub is_param: bool,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

impl Leaf {
    pub fn tensor(&self) -> HostTensor {
        let bytes = f32_to_bytes(self.dtype, &self.values).expect("a generated dtype");
        HostTensor::new(self.dtype, self.shape.clone(), bytes).expect("sized by its shape")
    }
}

pub fn static_dims(s: &Shape) -> Result<Vec<usize>, String> {
    s.dims()
        .iter()
        .map(|d| match d {
            Dim::Static(n) => Ok(*n),
            Dim::Dynamic(_) => Err(format!("{s} is not static")),
        })
        .collect()
}

/// Seeded values for every input and param of `graph`, in node order.
pub fn leaves(
    graph: &Graph,
    fill: &dyn Fn(&str, IrDType) -> Fill,
    seed: u64,
) -> Result<Vec<Leaf>, String> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    for n in graph.nodes() {
        let (name, is_param) = match &n.op {
            Op::Input { name } => (name, false),
            Op::Param { name } => (name, true),
            _ => continue,
        };
        let ird = n.shape.dtype();
        let dtype = abi_dtype(ird).ok_or(format!("{name}: dtype {ird:?} has no ABI dtype"))?;
        let shape = static_dims(&n.shape)?;
        let count: usize = shape.iter().product();
        let raw: Vec<f32> = (0..count)
            .map(|_| match fill(name, ird) {
                Fill::Uniform(lo, hi) => rng.gen_range(lo..hi),
                Fill::Int(lo, hi) => rng.gen_range(lo..hi) as f32,
                Fill::Bool => rng.gen_range(0..2) as f32,
            })
            .collect();
        let values = bytes_to_f32(dtype, &f32_to_bytes(dtype, &raw).map_err(|e| e.message)?)
            .map_err(|e| e.message)?;
        out.push(Leaf {
            name: name.clone(),
            is_param,
            dtype,
            shape,
            values,
        });
    }
    Ok(out)
}

/// `graph` with every bool output cast to f32: rlx-runtime's `run`
/// returns a bool output's bytes reinterpreted as f32, not 0.0 / 1.0.
fn bool_outputs_as_f32(graph: &Graph) -> Graph {
    let mut g = graph.clone();
    for i in 0..g.outputs.len() {
        let id = g.outputs[i];
        if g.shape(id).dtype() == IrDType::Bool {
            g.outputs[i] = g.cast(id, IrDType::F32);
        }
    }
    g
}

/// Run `graph` on rlx-runtime's CPU backend: every value as f32 (what
/// its `run` takes and returns for the kit's dtypes), each panic of
/// rlx-runtime an error.
pub fn cpu_reference(graph: &Graph, leaves: &[Leaf]) -> Result<Vec<Vec<f32>>, String> {
    use crate::guard::catch;
    let graph = bool_outputs_as_f32(graph);
    let mut compiled = catch("compile on the CPU", || {
        rlx_runtime::Session::new(Device::Cpu).compile(graph)
    })?;
    catch("binding params on the CPU", || {
        for l in leaves.iter().filter(|l| l.is_param) {
            compiled.set_param(&l.name, &l.values);
        }
    })?;
    let inputs: Vec<(&str, &[f32])> = leaves
        .iter()
        .filter(|l| !l.is_param)
        .map(|l| (l.name.as_str(), l.values.as_slice()))
        .collect();
    catch("run on the CPU", || compiled.run(&inputs))
}

/// Elementwise `|got - want| <= abs + rel * |want|`.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub abs: f32,
    pub rel: f32,
}

impl Tol {
    /// f32 1e-4 + 1e-4·|want|; f16 4e-3 + 4e-3·|want|; bf16 3e-2 +
    /// 3e-2·|want|; integers and bool exact.
    pub fn for_dtype(d: DType) -> Tol {
        let t = |v| Tol { abs: v, rel: v };
        match d {
            DType::F32 | DType::F64 => t(1e-4),
            DType::F16 => t(4e-3),
            DType::BF16 => t(3e-2),
            _ => t(0.0),
        }
    }
}

/// Outputs against the reference: count, each output's declared dtype
/// and shape, then values within the output dtype's tolerance.
pub fn compare(graph: &Graph, got: &[HostTensor], want: &[Vec<f32>]) -> Result<(), String> {
    if got.len() != graph.outputs.len() {
        return Err(format!(
            "{} outputs, the graph has {}",
            got.len(),
            graph.outputs.len()
        ));
    }
    for (i, (g, id)) in got.iter().zip(&graph.outputs).enumerate() {
        let shape = graph.shape(*id);
        let dtype = abi_dtype(shape.dtype()).ok_or("an output dtype without an ABI dtype")?;
        let dims = static_dims(shape)?;
        if g.dtype != dtype || g.shape != dims {
            return Err(format!(
                "output {i} is {}{:?}, the graph declares {dtype}{dims:?}",
                g.dtype, g.shape
            ));
        }
        let values = g.to_f32_vec().map_err(|e| e.message)?;
        let w = want.get(i).ok_or("the reference has fewer outputs")?;
        within(&values, w, Tol::for_dtype(dtype)).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

fn within(got: &[f32], want: &[f32], tol: Tol) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} values, the reference has {}",
            got.len(),
            want.len()
        ));
    }
    for (j, (&a, &b)) in got.iter().zip(want).enumerate() {
        let same_special = (a.is_nan() && b.is_nan()) || a == b;
        // False for a NaN on one side only, which must fail.
        let close = (a - b).abs() <= tol.abs + tol.rel * b.abs();
        if !same_special && !close {
            return Err(format!(
                "element {j} is {a}, the CPU reference {b} (tolerance {} + {}·|ref|)",
                tol.abs, tol.rel
            ));
        }
    }
    Ok(())
}

/// The non-input nodes of a graph, as op-kind names.
pub fn op_kinds(graph: &Graph) -> Vec<String> {
    graph
        .nodes()
        .iter()
        .filter(|n| !matches!(n.op, Op::Input { .. } | Op::Param { .. }))
        .map(|n| format!("{:?}", n.op.kind()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tolerance_is_abs_plus_rel_and_nan_matches_nan() {
        let t = Tol::for_dtype(DType::F32);
        assert!(within(&[1.0001], &[1.0], t).is_ok());
        assert!(within(&[1.001], &[1.0], t).is_err());
        assert!(within(&[f32::NAN], &[f32::NAN], t).is_ok());
        assert!(within(&[f32::NAN], &[1.0], t).is_err());
        assert!(within(&[3.0], &[3.0], Tol::for_dtype(DType::I32)).is_ok());
    }
}
