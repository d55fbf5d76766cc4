//! Running a model on a backend through `rlx_runtime::Session`, with
//! seeded data, optional safetensors params, and parity against the CPU.
//!
//! Used by `rlx-host run` and `rlx-host demo`, and by tests.

use crate::guard;
use crate::rlx_backend;
use rlx_ir::{Dim, Graph, NodeId, Op};
use rlx_plugin_api::host::{CandidateState, LoadedPlugin, PluginSet};
use rlx_plugin_api::Mode;
use rlx_runtime::{Device, Session};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Values for every input and param of a graph, as f32 (rlx-runtime
/// converts to each boundary's declared dtype).
#[derive(Clone, Debug, Default)]
pub struct ModelData {
    /// (name, values), in graph order.
    pub inputs: Vec<(String, Vec<f32>)>,
    /// (name, values), in graph order.
    pub params: Vec<(String, Vec<f32>)>,
}

fn dims_of(shape: &rlx_ir::Shape) -> Result<Vec<usize>, String> {
    shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Static(n) => Ok(*n),
            Dim::Dynamic(_) => Err(format!("{shape} has a size known only at run time")),
        })
        .collect()
}

fn fmt_dims(d: &[usize]) -> String {
    format!(
        "[{}]",
        d.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Inputs that feed the indices operand of an `Op::Gather` (directly, or
/// through reshape / cast / transpose / expand / narrow / stop-gradient),
/// with the exclusive upper bound of valid values: the size of the
/// gathered axis of the table (the smallest one when several gathers read
/// the same input).
pub fn index_inputs(graph: &Graph) -> HashMap<String, usize> {
    let mut out: HashMap<String, usize> = HashMap::new();
    for n in graph.nodes() {
        let Op::Gather { axis } = &n.op else { continue };
        let (Some(&table), Some(&idx)) = (n.inputs.first(), n.inputs.get(1)) else {
            continue;
        };
        let Some(Dim::Static(bound)) = graph.shape(table).dims().get(*axis).cloned() else {
            continue;
        };
        let mut cur: NodeId = idx;
        loop {
            let node = graph.node(cur);
            match &node.op {
                Op::Input { name } => {
                    let e = out.entry(name.clone()).or_insert(bound);
                    *e = (*e).min(bound);
                    break;
                }
                Op::Reshape { .. }
                | Op::Cast { .. }
                | Op::StopGradient
                | Op::Transpose { .. }
                | Op::Expand { .. }
                | Op::Narrow { .. }
                    if !node.inputs.is_empty() =>
                {
                    cur = node.inputs[0]
                }
                _ => break,
            }
        }
    }
    out
}

/// Seeded values for every input and param of `graph`.
///
/// Drawn in graph order from one `StdRng::seed_from_u64(seed)`:
/// - an index input (see [`index_inputs`]): integers uniform in `[0, bound)`;
/// - another integer or bool input: integers in `[0, 10)` (bool: 0 or 1);
/// - a float input: uniform in `[-1, 1)`;
/// - a float param of rank >= 2: uniform in `[-1, 1) / sqrt(fan_in)`,
///   `fan_in` = its second-to-last size (a matmul weight's K); of rank <= 1:
///   uniform in `[-1, 1)`;
/// - an integer param: integers in `[0, 10)`.
pub fn random_data(graph: &Graph, seed: u64) -> Result<ModelData, String> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let index = index_inputs(graph);
    let mut data = ModelData::default();
    for n in graph.nodes() {
        let (name, is_param) = match &n.op {
            Op::Input { name } => (name, false),
            Op::Param { name } => (name, true),
            _ => continue,
        };
        let dims = dims_of(&n.shape).map_err(|e| format!("{name:?}: {e}"))?;
        let count: usize = dims.iter().product();
        let dt = n.shape.dtype();
        let values: Vec<f32> = if let (false, Some(&bound)) = (is_param, index.get(name)) {
            (0..count)
                .map(|_| rng.gen_range(0..bound.max(1)) as f32)
                .collect()
        } else if dt == rlx_ir::DType::Bool {
            (0..count).map(|_| rng.gen_range(0..2) as f32).collect()
        } else if !dt.is_float() {
            (0..count).map(|_| rng.gen_range(0..10) as f32).collect()
        } else {
            let scale = if is_param && dims.len() >= 2 {
                1.0 / (dims[dims.len() - 2].max(1) as f32).sqrt()
            } else {
                1.0
            };
            (0..count)
                .map(|_| rng.gen_range(-1.0f32..1.0) * scale)
                .collect()
        };
        if is_param {
            data.params.push((name.clone(), values));
        } else {
            data.inputs.push((name.clone(), values));
        }
    }
    Ok(data)
}

/// Replace params with the tensors of a safetensors file. A tensor whose
/// name the graph declares must have the declared shape; f32, f16, bf16
/// and f64 tensors convert (rlx-runtime then converts to the graph's
/// dtype). Params the file lacks keep their values; tensors the graph does
/// not declare are ignored with a warning.
pub fn load_params(graph: &Graph, path: &Path, data: &mut ModelData) -> Result<(), String> {
    use safetensors::{Dtype, SafeTensors};
    let bytes = std::fs::read(path)
        .map_err(|e| format!("cannot read params file {}: {e}", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: not a safetensors file: {e}", path.display()))?;
    let declared: HashMap<&str, &rlx_ir::Node> = graph
        .nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Param { name } => Some((name.as_str(), n)),
            _ => None,
        })
        .collect();
    let mut names: Vec<&String> = st.names();
    names.sort();
    let mut loaded = 0;
    for name in names {
        let Some(node) = declared.get(name.as_str()) else {
            log::warn!(
                "{}: tensor {name:?} is not a param of the model; ignored",
                path.display()
            );
            continue;
        };
        let t = st
            .tensor(name)
            .map_err(|e| format!("{}: tensor {name:?}: {e}", path.display()))?;
        let want = dims_of(&node.shape).map_err(|e| format!("param {name:?}: {e}"))?;
        if t.shape() != want.as_slice() {
            return Err(format!(
                "param {name:?}: the model declares shape {} but {} has shape {}",
                fmt_dims(&want),
                path.display(),
                fmt_dims(t.shape())
            ));
        }
        let raw = t.data();
        let values: Vec<f32> = match t.dtype() {
            Dtype::F32 => raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            Dtype::F16 => raw
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f32())
                .collect(),
            Dtype::BF16 => raw
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f32())
                .collect(),
            Dtype::F64 => raw
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()) as f32)
                .collect(),
            other => {
                return Err(format!(
                    "param {name:?}: {} stores it as {other:?}; only f32, f16, bf16 and f64 tensors convert to the model's {}",
                    path.display(),
                    node.shape.dtype()
                ))
            }
        };
        let slot = data
            .params
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| format!("param {name:?} has no slot"))?;
        slot.1 = values;
        loaded += 1;
    }
    log::info!(
        "{} of {} params from {}",
        loaded,
        declared.len(),
        path.display()
    );
    Ok(())
}

/// What one backend produced.
#[derive(Clone, Debug)]
pub struct Execution {
    pub outputs: Vec<Vec<f32>>,
    /// `Session::compile` wall time.
    pub compile_ms: f64,
    /// Wall time of each run (params are bound before the first).
    pub run_ms: Vec<f64>,
}

impl Execution {
    pub fn mean_run_ms(&self) -> f64 {
        mean(&self.run_ms)
    }

    /// The mean of every run but the first (which may include lazy
    /// evaluation set-up or tracing); the first run's when there is one.
    pub fn steady_run_ms(&self) -> f64 {
        if self.run_ms.len() > 1 {
            mean(&self.run_ms[1..])
        } else {
            self.mean_run_ms()
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Compile `graph` with `Session::new(device)`, bind the params, run it
/// `runs` times (at least once). Every panic inside rlx-runtime or the
/// backend becomes an `Err` with one line.
pub fn execute(
    device: Device,
    graph: &Graph,
    data: &ModelData,
    runs: usize,
) -> Result<Execution, String> {
    let graph = graph.clone();
    let t0 = Instant::now();
    let mut compiled = guard::catch(&format!("compile on {device}"), || {
        Session::new(device).compile(graph)
    })?;
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    guard::catch(&format!("binding params on {device}"), || {
        for (name, v) in &data.params {
            compiled.set_param(name, v);
        }
    })?;
    let inputs: Vec<(&str, &[f32])> = data
        .inputs
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    let mut run_ms = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        outputs = guard::catch(&format!("run on {device}"), || compiled.run(&inputs))?;
        run_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Execution {
        outputs,
        compile_ms,
        run_ms,
    })
}

/// Max abs and max rel error of `got` against `want`:
/// `abs = max |got - want|`, `rel = max |got - want| / max(|want|, 1e-6)`.
/// A NaN or infinity on one side only (or different infinities) counts as
/// an infinite error; the same non-finite value on both sides as none.
pub fn errors(got: &[f32], want: &[f32]) -> Result<(f64, f64), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} elements vs the reference's {}",
            got.len(),
            want.len()
        ));
    }
    let (mut abs, mut rel) = (0f64, 0f64);
    for (&a, &b) in got.iter().zip(want) {
        let (a, b) = (a as f64, b as f64);
        let d = if a.is_finite() && b.is_finite() {
            (a - b).abs()
        } else if (a.is_nan() && b.is_nan()) || a == b {
            0.0
        } else {
            f64::INFINITY
        };
        abs = abs.max(d);
        rel = rel.max(d / b.abs().max(1e-6));
    }
    Ok((abs, rel))
}

/// One output in a report.
#[derive(Clone, Debug)]
pub struct OutputReport {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: String,
    pub max_abs_err: Option<f64>,
    pub max_rel_err: Option<f64>,
}

/// The result of `rlx-host run`.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub backend: String,
    /// `None` for the CPU backend (modes are a plugin notion).
    pub mode: Option<Mode>,
    pub outputs: Vec<OutputReport>,
    pub compile_ms: f64,
    pub run_ms: f64,
    /// What the report compares against (`cpu`), if anything.
    pub compare: Option<String>,
    /// Where the plugin came from, for the readable report.
    pub plugin_path: Option<String>,
}

fn num(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!(v)
    } else {
        // JSON has no infinity or NaN.
        serde_json::Value::String(if v.is_nan() { "nan" } else { "inf" }.into())
    }
}

impl RunReport {
    /// The contract object: `{"backend", "mode", "outputs": [{"name",
    /// "shape", "dtype", "max_abs_err", "max_rel_err"}], "compile_ms",
    /// "run_ms"}`; error fields are null without a comparison.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": self.backend,
            "mode": self.mode.map(|m| m.name()),
            "outputs": self.outputs.iter().map(|o| serde_json::json!({
                "name": o.name,
                "shape": o.shape,
                "dtype": o.dtype,
                "max_abs_err": o.max_abs_err.map(num),
                "max_rel_err": o.max_rel_err.map(num),
            })).collect::<Vec<_>>(),
            "compile_ms": num(self.compile_ms),
            "run_ms": num(self.run_ms),
        })
    }

    pub fn print_text(&self, model: &Path) {
        println!("model    {}", model.display());
        match (&self.mode, &self.plugin_path) {
            (Some(m), Some(p)) => println!(
                "backend  {} (plugin {p}) through Session::new(Device::Mlx), mode {}",
                self.backend,
                m.name()
            ),
            _ => println!("backend  {} (rlx-runtime)", self.backend),
        }
        println!("compile  {:.3} ms", self.compile_ms);
        println!("run      {:.3} ms", self.run_ms);
        match &self.compare {
            Some(c) => println!("compare  against {c} (rel = |a-b| / max(|b|, 1e-6))"),
            None => println!("compare  none (use --compare cpu)"),
        }
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3e}"));
        let rows: Vec<[String; 5]> = self
            .outputs
            .iter()
            .map(|o| {
                [
                    o.name.clone(),
                    fmt_dims(&o.shape),
                    o.dtype.clone(),
                    fmt(o.max_abs_err),
                    fmt(o.max_rel_err),
                ]
            })
            .collect();
        println!();
        crate::cli::print_table(
            &["OUTPUT", "SHAPE", "DTYPE", "MAX ABS ERR", "MAX REL ERR"],
            &rows,
        );
    }
}

/// Output names, shapes and dtypes of `graph` (`output{i}` when unnamed).
pub fn output_infos(graph: &Graph, outputs: &[Vec<f32>]) -> Vec<(String, Vec<usize>, String)> {
    graph
        .outputs
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let shape = graph.shape(*id);
            let dims =
                dims_of(shape).unwrap_or_else(|_| vec![outputs.get(i).map_or(0, |o| o.len())]);
            (
                graph
                    .output_name(i)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("output{i}")),
                dims,
                shape.dtype().to_string().to_lowercase(),
            )
        })
        .collect()
}

/// Why `name` is not among the loaded plugins, in one line.
pub fn missing_plugin_message(set: &PluginSet, name: &str) -> String {
    if set.candidates.is_empty() {
        return format!(
            "no plugin named {name:?}: no plugin candidates were found (searched --plugin paths, {}, the executable's plugins/ directory, and $RLX_HOME/plugins or ~/.rlx/plugins)",
            rlx_plugin_api::host::ENV_PLUGINS
        );
    }
    let found: Vec<String> = set
        .candidates
        .iter()
        .map(|c| match &c.state {
            CandidateState::Loaded(p) => format!(
                "{} (plugin {:?}): loaded",
                c.path.display(),
                p.descriptor().name
            ),
            CandidateState::Shadowed { plugin, by } => format!(
                "{} (plugin {:?}): shadowed by {}",
                c.path.display(),
                plugin.descriptor().name,
                by.display()
            ),
            CandidateState::Rejected(e) => {
                format!("{}: rejected: {e}", c.path.display())
            }
        })
        .collect();
    // Reasons may carry line breaks (a loader message); keep one line.
    let found = found.join("; ").replace('\n', " ");
    format!("no plugin named {name:?} is loaded; found: {found}")
}

/// The plugin serving `name` from `set` (a loaded GPU variant such as
/// `mlx-cuda` for `mlx`, see [`PluginSet::select`]), or why there is none.
pub fn find_plugin(set: &PluginSet, name: &str) -> Result<Arc<LoadedPlugin>, String> {
    set.select(name)
        .ok_or_else(|| missing_plugin_message(set, name))
}

/// Options of `rlx-host run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub backend: String,
    pub mode: Mode,
    pub compare: Option<String>,
    pub seed: u64,
    pub params: Option<std::path::PathBuf>,
    pub plugins: Vec<std::path::PathBuf>,
}

/// The device a plugin backend is registered on. The adapter could use any
/// device; MLX's is the natural one for this workspace's plugins.
pub const PLUGIN_DEVICE: Device = Device::Mlx;

/// `rlx-host run`: everything but printing.
pub fn run_model_file(model: &Path, opts: &RunOptions) -> Result<RunReport, String> {
    let text = std::fs::read_to_string(model)
        .map_err(|e| format!("cannot read model {}: {e}", model.display()))?;
    let graph = rlx_ir::rlxmodel::from_text(&text).map_err(|e| {
        format!(
            "{}: not a valid .rlxmodel: {}",
            model.display(),
            e.to_string().replace('\n', " ")
        )
    })?;
    if let Some(c) = &opts.compare {
        if c != "cpu" {
            return Err(format!(
                "--compare {c:?}: only `cpu` (rlx-runtime's CPU backend) is a reference"
            ));
        }
    }
    let mut data = random_data(&graph, opts.seed)?;
    if let Some(p) = &opts.params {
        load_params(&graph, p, &mut data)?;
    }
    let (device, mode, plugin_path) = if opts.backend == "cpu" {
        (Device::Cpu, None, None)
    } else {
        let set = PluginSet::load_from_env(opts.plugins.clone());
        let plugin = find_plugin(&set, &opts.backend)?;
        let path = plugin.path().display().to_string();
        rlx_backend::register_plugin_backend(plugin, PLUGIN_DEVICE, opts.mode);
        (PLUGIN_DEVICE, Some(opts.mode), Some(path))
    };
    let exec = match mode {
        Some(m) => rlx_backend::with_mode(m, || execute(device, &graph, &data, 1)),
        None => execute(device, &graph, &data, 1),
    }
    .map_err(|e| format!("{}: {e}", opts.backend))?;
    let reference = match &opts.compare {
        Some(_) => Some(
            execute(Device::Cpu, &graph, &data, 1)
                .map_err(|e| format!("cpu reference: {e}"))?
                .outputs,
        ),
        None => None,
    };
    let infos = output_infos(&graph, &exec.outputs);
    if exec.outputs.len() != infos.len() {
        return Err(format!(
            "{} returned {} outputs, the model has {}",
            opts.backend,
            exec.outputs.len(),
            infos.len()
        ));
    }
    let mut outputs = Vec::new();
    for (i, (name, shape, dtype)) in infos.into_iter().enumerate() {
        let (abs, rel) = match &reference {
            Some(r) => {
                let (a, b) =
                    errors(&exec.outputs[i], &r[i]).map_err(|e| format!("output {name:?}: {e}"))?;
                (Some(a), Some(b))
            }
            None => (None, None),
        };
        outputs.push(OutputReport {
            name,
            shape,
            dtype,
            max_abs_err: abs,
            max_rel_err: rel,
        });
    }
    Ok(RunReport {
        backend: opts.backend.clone(),
        mode,
        outputs,
        compile_ms: exec.compile_ms,
        run_ms: exec.mean_run_ms(),
        compare: opts.compare.clone(),
        plugin_path,
    })
}

/// Per-output (max abs, max rel) errors of `got` against `want`.
pub fn parity(got: &[Vec<f32>], want: &[Vec<f32>]) -> Result<Vec<(f64, f64)>, String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} outputs vs the reference's {}",
            got.len(),
            want.len()
        ));
    }
    got.iter().zip(want).map(|(a, b)| errors(a, b)).collect()
}

/// (param tensors, param elements) of `data`.
pub fn param_count(data: &ModelData) -> (usize, usize) {
    let tensors = data.params.len();
    let elements = data.params.iter().map(|(_, v)| v.len()).sum();
    (tensors, elements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::infer::GraphExt;
    use rlx_ir::{DType, Shape};

    #[test]
    fn errors_are_abs_and_rel_with_non_finite_values_counted() {
        let (a, r) = errors(&[1.0, 2.5, 0.0], &[1.0, 2.0, 0.0]).unwrap();
        assert_eq!(a, 0.5);
        assert_eq!(r, 0.25);
        assert_eq!(errors(&[f32::NAN], &[f32::NAN]).unwrap(), (0.0, 0.0));
        assert_eq!(errors(&[f32::NAN], &[1.0]).unwrap().0, f64::INFINITY);
        assert!(errors(&[1.0], &[1.0, 2.0]).is_err());
        assert_eq!(num(f64::INFINITY), serde_json::json!("inf"));
    }

    #[test]
    fn gather_indices_are_found_through_reshapes_and_filled_in_range() {
        let mut g = Graph::new("g");
        let table = g.param("table", Shape::new(&[5, 3], DType::F32));
        let ids = g.input("ids", Shape::new(&[2, 3], DType::F32));
        let flat = g.reshape_(ids, vec![6]);
        let x = g.input("x", Shape::new(&[6, 3], DType::F32));
        let e = g.gather_(table, flat, 0);
        let y = g.add(e, x);
        g.set_outputs(vec![y]);
        let idx = index_inputs(&g);
        assert_eq!(idx.get("ids"), Some(&5));
        assert!(!idx.contains_key("x"));
        let d = random_data(&g, 1).unwrap();
        let ids = &d.inputs.iter().find(|(n, _)| n == "ids").unwrap().1;
        assert!(ids
            .iter()
            .all(|v| v.fract() == 0.0 && (0.0..5.0).contains(v)));
        let x = &d.inputs.iter().find(|(n, _)| n == "x").unwrap().1;
        assert!(x.iter().any(|v| v.fract() != 0.0));
    }

    #[test]
    fn params_files_are_checked_by_name_shape_and_dtype() {
        use safetensors::tensor::{Dtype, TensorView};
        let mut g = Graph::new("g");
        let x = g.input("x", Shape::new(&[2], DType::F32));
        let w = g.param("w", Shape::new(&[2], DType::F32));
        let y = g.mul(x, w);
        g.set_outputs(vec![y]);
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, dt: Dtype, shape: Vec<usize>, bytes: &[u8]| {
            let p = dir.path().join(name);
            safetensors::serialize_to_file(
                vec![("w", TensorView::new(dt, shape, bytes).unwrap())],
                &None,
                &p,
            )
            .unwrap();
            p
        };
        let bf: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        let mut d = random_data(&g, 0).unwrap();
        load_params(&g, &write("bf.st", Dtype::BF16, vec![2], &bf), &mut d).unwrap();
        assert_eq!(d.params[0].1, vec![1.5, -2.0]);
        let e = load_params(&g, &write("i.st", Dtype::I32, vec![2], &[0; 8]), &mut d).unwrap_err();
        assert!(e.contains("param \"w\"") && e.contains("I32"), "{e}");
        let e =
            load_params(&g, &write("s.st", Dtype::F32, vec![1, 2], &[0; 8]), &mut d).unwrap_err();
        assert!(e.contains("[2]") && e.contains("[1, 2]"), "{e}");
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"not safetensors").unwrap();
        assert!(load_params(&g, &junk, &mut d)
            .unwrap_err()
            .contains("not a safetensors file"));
    }
}
