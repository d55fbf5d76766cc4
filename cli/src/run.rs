//! Running a model on a backend through `rlx_runtime::Session`, with
//! seeded data or data from files (`tensor_files`), and parity against
//! the CPU.
//!
//! Used by `rlx-host run` and `rlx-host demo`, and by tests.

use crate::model_data::{dims_of, fmt_dims};
pub use crate::model_data::{output_infos, values_per_element, ModelData};
use rlx_ir::{Dim, Graph, NodeId, Op};
use rlx_plugin_api::Mode;
use rlx_plugin_host::backend as rlx_backend;
use rlx_plugin_host::guard;
use rlx_runtime::{Device, Session};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

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
/// - an integer param: integers in `[0, 10)`;
/// - a complex (c64, c128) input or param: two values per element (re, im,
///   interleaved), each drawn as for a float one.
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
        let dt = n.shape.dtype();
        let count = random_count(name, &dims, values_per_element(dt))?;
        // Reserved fallibly: within physical memory is not always free.
        let mut values: Vec<f32> = Vec::new();
        values.try_reserve_exact(count).map_err(|_| {
            format!(
                "{name:?} {dims:?}: cannot allocate {} bytes for its random data (resource \
                 exhausted)",
                count as u128 * 4
            )
        })?;
        let rng = &mut rng;
        if let (false, Some(&bound)) = (is_param, index.get(name)) {
            values.extend((0..count).map(|_| rng.gen_range(0..bound.max(1)) as f32));
        } else if dt == rlx_ir::DType::Bool {
            values.extend((0..count).map(|_| rng.gen_range(0..2) as f32));
        } else if !dt.is_float() && !dt.is_complex() {
            values.extend((0..count).map(|_| rng.gen_range(0..10) as f32));
        } else {
            let scale = if is_param && dims.len() >= 2 {
                1.0 / (dims[dims.len() - 2].max(1) as f32).sqrt()
            } else {
                1.0
            };
            values.extend((0..count).map(|_| rng.gen_range(-1.0f32..1.0) * scale));
        }
        if is_param {
            data.params.push((name.clone(), values));
        } else {
            data.inputs.push((name.clone(), values));
        }
    }
    Ok(data)
}

/// How many f32 values random data for a leaf of `dims` takes, refused
/// (naming the leaf, its shape and the bytes) when they would not fit in
/// this machine's physical memory: a failed allocation aborts the process.
fn random_count(name: &str, dims: &[usize], per_element: usize) -> Result<usize, String> {
    let count = dims
        .iter()
        .try_fold(per_element, |n, d| n.checked_mul(*d))
        .filter(|c| c.checked_mul(4).is_some());
    let memory = physical_memory();
    match count {
        Some(c) if (c as u64).saturating_mul(4) <= memory => Ok(c),
        _ => Err(format!(
            "{name:?} {dims:?}: its random data needs {}, more than this machine's {memory} bytes \
             of physical memory (resource exhausted)",
            count.map_or_else(
                || "more than 2^64 bytes".into(),
                |c| format!("{} bytes", c as u128 * 4)
            )
        )),
    }
}

/// rlx-runtime's CPU backend allocates every node's output infallibly (a
/// failure aborts the process): refuse, naming the node, a graph with a
/// tensor beyond this machine's physical memory before it runs there.
pub fn check_cpu_sizes(graph: &Graph) -> Result<(), String> {
    let memory = physical_memory();
    for n in graph.nodes() {
        let bytes = n
            .shape
            .num_elements()
            .and_then(|e| (e as u64).checked_mul(n.shape.dtype().size_bytes() as u64));
        if bytes.is_none_or(|b| b > memory) {
            return Err(format!(
                "node {} ({:?} {:?}) needs {}, more than this machine's {memory} bytes of \
                 physical memory: not run on rlx-runtime's CPU backend, which aborts on a failed \
                 allocation (resource exhausted)",
                n.id,
                n.op.kind(),
                dims_of(&n.shape).unwrap_or_default(),
                bytes.map_or_else(|| "more than 2^64 bytes".into(), |b| format!("{b} bytes"))
            ));
        }
    }
    Ok(())
}

pub use rlx_plugin_api::machine::physical_memory;

/// Replace params with the tensors of a safetensors file: a file may hold
/// some of the params (the others keep their values), and tensors the
/// graph does not declare are ignored with a warning. Shapes, dtypes and
/// the complex layout follow [`crate::tensor_files`].
pub fn load_params(graph: &Graph, path: &Path, data: &mut ModelData) -> Result<(), String> {
    crate::tensor_files::load_safetensors(graph, path, crate::tensor_files::Leaves::Params, data)
}

/// What one backend produced.
#[derive(Clone, Debug)]
pub struct Execution {
    pub outputs: Vec<Vec<f32>>,
    /// `Session::compile` wall time.
    pub compile_ms: f64,
    /// Wall time of binding every param (`set_param`), after the compile.
    pub bind_ms: f64,
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

/// `values` ([`ModelData`]'s f32 layout) as little-endian bytes of `dt`,
/// for rlx-runtime's typed surface: a complex element is its (re, im) pair
/// (c64: two f32, c128: two f64).
fn typed_bytes(values: &[f32], dt: rlx_ir::DType) -> Vec<u8> {
    match dt {
        rlx_ir::DType::C64 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        rlx_ir::DType::C128 => values
            .iter()
            .flat_map(|v| (*v as f64).to_le_bytes())
            .collect(),
        _ => rlx_runtime::backend::narrow_f32_to_bytes(values, dt),
    }
}

/// Little-endian bytes of `dt` as f32 values ([`ModelData`]'s layout: a
/// complex element is its (re, im) pair).
fn typed_values(bytes: &[u8], dt: rlx_ir::DType) -> Vec<f32> {
    match dt {
        rlx_ir::DType::C128 => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        rlx_ir::DType::I16 => bytes
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes(c.try_into().unwrap()) as f32)
            .collect(),
        // C64 is a pure reinterpret of its interleaved f32 pairs.
        _ => rlx_runtime::backend::widen_bytes_to_f32(bytes, dt),
    }
}

/// Declared dtypes of `graph`'s inputs and params, by name.
fn leaf_dtypes(graph: &Graph) -> HashMap<&str, rlx_ir::DType> {
    graph
        .nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Input { name } | Op::Param { name } => Some((name.as_str(), n.shape.dtype())),
            _ => None,
        })
        .collect()
}

/// Compile `graph` with `Session::new(device)`, bind the params, run it
/// `runs` times (at least once). Every panic inside rlx-runtime or the
/// backend becomes an `Err` with one line.
///
/// Complex values are (re, im) pairs ([`values_per_element`]) in `data`
/// and in the outputs. A complex param is bound as bytes of its dtype
/// (`set_param_typed`: `set_param` counts f32 values as elements); a graph
/// with a complex input or output runs through `run_typed`, every input in
/// its declared dtype (a plugin backend cannot take or return complex
/// tensors as f32).
pub fn execute(
    device: Device,
    graph: &Graph,
    data: &ModelData,
    runs: usize,
) -> Result<Execution, String> {
    execute_with(device, graph, data, runs, &mut || {})
}

/// [`execute`], calling `first_run_done` when the first run has returned
/// (the demo's progress line for a compiled mode's kernel build watches it).
pub fn execute_with(
    device: Device,
    graph: &Graph,
    data: &ModelData,
    runs: usize,
    first_run_done: &mut dyn FnMut(),
) -> Result<Execution, String> {
    if device == Device::Cpu {
        check_cpu_sizes(graph)?;
    }
    let dtypes = leaf_dtypes(graph);
    let dtype_of = |name: &str| dtypes.get(name).copied().unwrap_or(rlx_ir::DType::F32);
    let typed_run = data.inputs.iter().any(|(n, _)| dtype_of(n).is_complex())
        || graph
            .outputs
            .iter()
            .any(|id| graph.shape(*id).dtype().is_complex());
    let graph = graph.clone();
    let t0 = Instant::now();
    let mut compiled = guard::catch(&format!("compile on {device}"), || {
        Session::new(device).compile(graph)
    })?;
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t0 = Instant::now();
    guard::catch(&format!("binding params on {device}"), || {
        for (name, v) in &data.params {
            let dt = dtype_of(name);
            if dt == rlx_ir::DType::C128 {
                // rlx-runtime 0.2.19's CPU backend widens c128 bytes to
                // four df64 lanes (re_hi, re_lo, im_hi, im_lo) and stores
                // them as two f64 pairs, binding (re_hi, re_lo) as the
                // first element. Its f64 path copies the bytes as they
                // are, which is the c128 layout (f64 re, f64 im).
                compiled.set_param_typed(name, &typed_bytes(v, dt), rlx_ir::DType::F64);
            } else if dt.is_complex() {
                compiled.set_param_typed(name, &typed_bytes(v, dt), dt);
            } else {
                compiled.set_param(name, v);
            }
        }
    })?;
    let bind_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut run_ms = Vec::new();
    let mut outputs = Vec::new();
    if typed_run {
        let owned: Vec<(&str, Vec<u8>, rlx_ir::DType)> = data
            .inputs
            .iter()
            .map(|(n, v)| {
                let dt = dtype_of(n);
                (n.as_str(), typed_bytes(v, dt), dt)
            })
            .collect();
        let inputs: Vec<(&str, &[u8], rlx_ir::DType)> = owned
            .iter()
            .map(|(n, b, dt)| (*n, b.as_slice(), *dt))
            .collect();
        for _ in 0..runs.max(1) {
            let t = Instant::now();
            let outs = guard::catch(&format!("run on {device}"), || compiled.run_typed(&inputs))?;
            run_ms.push(t.elapsed().as_secs_f64() * 1e3);
            if run_ms.len() == 1 {
                first_run_done();
            }
            outputs = outs.iter().map(|(b, dt)| typed_values(b, *dt)).collect();
        }
    } else {
        let inputs: Vec<(&str, &[f32])> = data
            .inputs
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        for _ in 0..runs.max(1) {
            let t = Instant::now();
            outputs = guard::catch(&format!("run on {device}"), || compiled.run(&inputs))?;
            run_ms.push(t.elapsed().as_secs_f64() * 1e3);
            if run_ms.len() == 1 {
                first_run_done();
            }
        }
    }
    Ok(Execution {
        outputs,
        compile_ms,
        bind_ms,
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
    /// What the report compares against (`cpu`, or a file of saved
    /// outputs), if anything.
    pub compare: Option<String>,
    /// Where the plugin came from, for the readable report.
    pub plugin_path: Option<String>,
    /// With `--explain` on a plugin: where each node ran.
    pub placement: Option<rlx_plugin_host::partition::Plan>,
    /// Why the comparison asked for could not be made (the reference
    /// failed or crashed in its child process).
    pub reference_error: Option<String>,
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
    /// "run_ms", "placement", "reference_error"}`; error fields are null
    /// without a comparison (and when the reference failed:
    /// `reference_error` says how), `placement` ([`Plan::to_json`](rlx_plugin_host::partition::Plan::to_json))
    /// without `--explain`.
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
            "placement": self.placement.as_ref().map(|p| p.to_json()),
            "reference_error": self.reference_error,
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
        match (&self.compare, &self.reference_error) {
            (Some(c), Some(e)) => println!("compare  against {c}: not made, {e}"),
            (Some(c), None) => println!("compare  against {c} (rel = |a-b| / max(|b|, 1e-6))"),
            (None, _) => println!("compare  none (use --compare cpu)"),
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
        crate::tables::print_table(
            &["OUTPUT", "SHAPE", "DTYPE", "MAX ABS ERR", "MAX REL ERR"],
            &rows,
        );
        if let Some(p) = &self.placement {
            println!("\nwhere each node ran (the graph as rlx-runtime's pipeline prepared it):");
            print!("{p}");
        }
    }
}

pub use rlx_plugin_host::{find_plugin, missing_plugin_message};

/// Options of `rlx-host run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub backend: String,
    pub mode: Mode,
    pub compare: Option<String>,
    pub seed: u64,
    pub params: Option<std::path::PathBuf>,
    /// Every input from this file (safetensors, or `.npy` for a model with
    /// one input) instead of seeded random data.
    pub inputs: Option<std::path::PathBuf>,
    /// Write the outputs to this safetensors file.
    pub output: Option<std::path::PathBuf>,
    /// Report where each node runs ([`RunReport::placement`]).
    pub explain: bool,
    /// Write the outputs' f32 values here (`--compare`'s reference child).
    pub reference_out: Option<std::path::PathBuf>,
    /// Whether nodes the plugin does not take may run on the CPU backend.
    pub fallback: rlx_plugin_host::partition::Fallback,
    pub plugins: Vec<std::path::PathBuf>,
}

/// The device a plugin backend is registered on. The adapter could use any
/// device; MLX's is the natural one for this workspace's plugins.
pub const PLUGIN_DEVICE: Device = Device::Mlx;

/// `rlx-host run`: everything but printing.
pub fn run_model_file(model: &Path, opts: &RunOptions) -> Result<RunReport, String> {
    let text = std::fs::read_to_string(model)
        .map_err(|e| format!("cannot read model {}: {e}", model.display()))?;
    rlx_plugin_api::graph_text::check_nesting(&text)
        .map_err(|e| format!("{}: not a valid .rlxmodel: {e}", model.display()))?;
    let graph = rlx_ir::rlxmodel::from_text(&text).map_err(|e| {
        format!(
            "{}: not a valid .rlxmodel: {}",
            model.display(),
            e.to_string().replace('\n', " ")
        )
    })?;
    // A saved reference is read before the run: a file that does not fit
    // the model is a wrong argument, not a comparison that failed.
    let saved = match opts.compare.as_deref() {
        None | Some("cpu") => None,
        Some(file) if !Path::new(file).is_file() => {
            return Err(format!(
                "--compare {file:?}: neither `cpu` (rlx-runtime's CPU backend) nor a file \
                 of outputs `run --output` wrote"
            ))
        }
        Some(file) => Some(
            crate::tensor_files::read_outputs(&graph, Path::new(file))
                .map_err(|e| format!("--compare {file}: {e}"))?,
        ),
    };
    let mut data = random_data(&graph, opts.seed)?;
    if let Some(p) = &opts.params {
        load_params(&graph, p, &mut data)?;
    }
    if let Some(p) = &opts.inputs {
        crate::tensor_files::load_inputs(&graph, p, &mut data)?;
    }
    let (device, mode, plugin_path) = if opts.backend == "cpu" {
        (Device::Cpu, None, None)
    } else {
        let installed = rlx_plugin_host::install(&rlx_plugin_host::Options {
            plugins: opts.plugins.clone(),
            backend: opts.backend.clone(),
            device: PLUGIN_DEVICE,
            mode: opts.mode,
            fallback: opts.fallback,
            ..Default::default()
        })?;
        let path = installed.plugin.path().display().to_string();
        (PLUGIN_DEVICE, Some(opts.mode), Some(path))
    };
    let placement = match (opts.explain, mode) {
        (true, Some(_)) => Some(
            rlx_plugin_host::backend::explain(device, &graph)
                .map_err(|e| format!("{}: {e}", opts.backend))?,
        ),
        _ => None,
    };
    let exec = match mode {
        Some(m) => rlx_backend::with_mode(m, || execute(device, &graph, &data, 1)),
        None => execute(device, &graph, &data, 1),
    }
    .map_err(|e| format!("{}: {e}", opts.backend))?;
    if let Some(p) = &opts.output {
        crate::tensor_files::write_outputs(&graph, &exec.outputs, p)?;
    }
    if let Some(p) = &opts.reference_out {
        // Fault injection for the tests of `--compare`: the reference child
        // dies as a crashing backend would.
        if std::env::var("RLX_HOST_FAULT").as_deref() == Ok("reference-abort") {
            std::process::abort();
        }
        let named: Vec<(String, Vec<f32>)> = exec
            .outputs
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v.clone()))
            .collect();
        crate::tensor_files::write_f32_safetensors(p, &named)?;
    }
    let (reference, reference_error) = match (&opts.compare, saved) {
        (_, Some(r)) => (Some(r), None),
        (Some(_), None) => match reference_in_child(model, opts, graph.outputs.len()) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e)),
        },
        (None, None) => (None, None),
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
        placement,
        reference_error,
    })
}

/// The CPU backend's outputs for `--compare cpu`, computed in a child
/// process (this executable, `run --backend cpu`, the same seed and files):
/// a reference that crashes on a graph (rlx-runtime's CPU backend does on
/// some) is then reported as the reference's failure, and the backend's
/// own result still stands.
fn reference_in_child(
    model: &Path,
    opts: &RunOptions,
    outputs: usize,
) -> Result<Vec<Vec<f32>>, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this executable to run the reference: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let out = dir.path().join("reference.safetensors");
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg("run")
        .arg(model)
        .args(["--backend", "cpu", "--seed", &opts.seed.to_string()])
        .arg("--reference-out")
        .arg(&out);
    if let Some(p) = &opts.params {
        cmd.arg("--params").arg(p);
    }
    if let Some(p) = &opts.inputs {
        cmd.arg("--inputs").arg(p);
    }
    // No limit: a reference of a large model may take long; Ctrl-C stops both.
    let done = crate::bench::spawn::run_with_limit(cmd, std::time::Duration::MAX)
        .map_err(|e| format!("cannot run the cpu reference ({}): {e}", exe.display()))?
        .ok_or("the cpu reference did not finish")?;
    if !done.status.success() {
        return Err(format!(
            "the cpu reference failed: {}",
            crate::bench::spawn::failure_reason(&done)
        ));
    }
    crate::tensor_files::read_f32_values(&out, outputs)
        .map_err(|e| format!("the cpu reference's outputs: {e}"))
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

    /// Unnormalized DFT of each row of interleaved (re, im) pairs, in f64
    /// (`sign` -1 forward, +1 inverse: rlx's `FftNorm::Backward`).
    fn dft_rows(v: &[f32], n: usize, sign: f64) -> Vec<f32> {
        let mut out = vec![0f32; v.len()];
        for r in 0..v.len() / (2 * n) {
            for k in 0..n {
                let (mut re, mut im) = (0f64, 0f64);
                for t in 0..n {
                    let a = sign * 2.0 * std::f64::consts::PI * (k * t % n) as f64 / n as f64;
                    let (xr, xi) = (v[(r * n + t) * 2] as f64, v[(r * n + t) * 2 + 1] as f64);
                    re += xr * a.cos() - xi * a.sin();
                    im += xr * a.sin() + xi * a.cos();
                }
                out[(r * n + k) * 2] = re as f32;
                out[(r * n + k) * 2 + 1] = im as f32;
            }
        }
        out
    }

    /// y = fft(x), z = ifft(w): x a c64 input, w a c64 param, both [3, 4].
    fn c64_fft_graph() -> Graph {
        let mut g = Graph::new("c64");
        let x = g.input("x", Shape::new(&[3, 4], DType::C64));
        let w = g.param("w", Shape::new(&[3, 4], DType::C64));
        let y = g.fft(x, false);
        let z = g.fft(w, true);
        g.set_outputs(vec![y, z]);
        g
    }

    #[test]
    fn complex_leaves_get_two_values_per_element_and_run_on_the_cpu() {
        assert_eq!(values_per_element(DType::C64), 2);
        assert_eq!(values_per_element(DType::C128), 2);
        assert_eq!(values_per_element(DType::F32), 1);
        // The reference itself: the DFT of [1, i] is [1 + i, 1 - i].
        assert_eq!(
            dft_rows(&[1.0, 0.0, 0.0, 1.0], 2, -1.0),
            vec![1.0, 1.0, 1.0, -1.0]
        );
        let g = c64_fft_graph();
        let d = random_data(&g, 5).unwrap();
        assert_eq!(d.inputs[0].1.len(), 24);
        assert_eq!(d.params[0].1.len(), 24);
        // A rank-2 complex param is drawn as a float one, scaled by
        // 1/sqrt(fan_in); both parts vary.
        let w = &d.params[0].1;
        assert!(w.iter().all(|v| v.abs() <= 1.0 / 3f32.sqrt()), "{w:?}");
        assert!(w.iter().step_by(2).any(|v| *v != 0.0));
        assert!(w.iter().skip(1).step_by(2).any(|v| *v != 0.0));
        let e = execute(Device::Cpu, &g, &d, 2).unwrap();
        assert_eq!(e.run_ms.len(), 2);
        let (y, z) = (&e.outputs[0], &e.outputs[1]);
        let (ey, _) = errors(y, &dft_rows(&d.inputs[0].1, 4, -1.0)).unwrap();
        let (ez, _) = errors(z, &dft_rows(&d.params[0].1, 4, 1.0)).unwrap();
        assert!(ey < 1e-5 && ez < 1e-5, "{ey} {ez}");
        let infos = output_infos(&g, &e.outputs);
        assert_eq!(infos[0].1, vec![3, 4]);
        assert_eq!(infos[0].2, "c64");
    }

    #[test]
    fn a_complex_param_loads_from_a_float_tensor_with_a_trailing_pair_axis() {
        use safetensors::tensor::{Dtype, TensorView};
        let g = c64_fft_graph();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, shape: Vec<usize>, v: &[f32]| {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            let p = dir.path().join(name);
            safetensors::serialize_to_file(
                vec![("w", TensorView::new(Dtype::F32, shape, &bytes).unwrap())],
                &None,
                &p,
            )
            .unwrap();
            p
        };
        // w = (1 + 2i) at k = 0 of every row: its unnormalized inverse DFT
        // is (1 + 2i) everywhere.
        let mut w = vec![0f32; 24];
        for r in 0..3 {
            w[r * 8] = 1.0;
            w[r * 8 + 1] = 2.0;
        }
        let mut d = random_data(&g, 0).unwrap();
        load_params(&g, &write("w.st", vec![3, 4, 2], &w), &mut d).unwrap();
        assert_eq!(d.params[0].1, w);
        let z = &execute(Device::Cpu, &g, &d, 1).unwrap().outputs[1];
        let want: Vec<f32> = (0..12).flat_map(|_| [1.0, 2.0]).collect();
        assert!(errors(z, &want).unwrap().0 < 1e-6, "{z:?}");
        // The element shape alone holds half the values.
        let e = load_params(&g, &write("half.st", vec![3, 4], &w[..12]), &mut d).unwrap_err();
        assert!(
            e.contains("param \"w\"") && e.contains("c64") && e.contains("[3, 4, 2]"),
            "{e}"
        );
    }

    #[test]
    fn c128_inputs_and_params_are_bound_as_re_im_pairs_on_the_cpu() {
        let mut g = Graph::new("c128");
        let x = g.input("x", Shape::new(&[3], DType::C128));
        let w = g.param("w", Shape::new(&[3], DType::C128));
        let y = g.cast(x, DType::C64);
        let z = g.cast(w, DType::C64);
        g.set_outputs(vec![y, z, x]);
        let d = random_data(&g, 2).unwrap();
        assert_eq!((d.inputs[0].1.len(), d.params[0].1.len()), (6, 6));
        let d = ModelData {
            inputs: vec![("x".into(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
            params: vec![("w".into(), vec![-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])],
        };
        let e = execute(Device::Cpu, &g, &d, 1).unwrap();
        assert_eq!(e.outputs[0], d.inputs[0].1);
        assert_eq!(e.outputs[1], d.params[0].1);
        assert_eq!(e.outputs[2], d.inputs[0].1);
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
