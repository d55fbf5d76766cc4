//! The coordinator side of `rlx-host dist`: a model cut into pipeline
//! stages and run on the workers, and the digits MLP trained data-parallel
//! on them. The workers are `rlx-host worker` processes
//! ([`rlx_plugin_host::dist::serve`]).

use crate::digits;
use crate::run::{self, ModelData};
use rand::SeedableRng;
use rlx_ir::Graph;
use rlx_plugin_host::dist::{split, Coordinator, ResidentTrainSpec, TrainResult};
use rlx_runtime::dist::{DataRef, StageSpec, TrainSpec, WeightRef};
use rlx_runtime::Device;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the coordinator waits.
#[derive(Clone, Debug)]
pub struct Waits {
    /// For every rank to join.
    pub connect: Duration,
    /// For any one answer (a compile, a batch's output, a gradient).
    pub answer: Duration,
}

/// `rlx-host dist pipeline`'s options.
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// A builtin name or a `.rlxmodel` file (one input, one output).
    pub model: String,
    pub seed: u64,
    pub params: Option<PathBuf>,
    pub inputs: Option<PathBuf>,
    pub output: Option<PathBuf>,
    /// The stages' device directive (`mlx`, `auto`, `cpu`).
    pub device: String,
    /// Batches timed through the pipeline (0: one batch, untimed).
    pub batches: usize,
    /// Also time the whole model in this process on the plugin (`--plugin`
    /// discovery; this mode), for the throughput comparison.
    pub local_mode: Option<rlx_plugin_api::Mode>,
    pub plugins: Vec<PathBuf>,
    pub waits: Waits,
}

/// What a pipeline run did.
#[derive(Clone, Debug)]
pub struct PipelineReport {
    pub stages: Vec<(usize, String)>,
    /// Max abs / rel error against rlx-runtime's CPU backend in this
    /// process, and whether within the demo's tolerance.
    pub vs_cpu: (f64, f64, bool),
    pub pipeline_batches_per_s: Option<f64>,
    pub local_batches_per_s: Option<f64>,
}

/// Cut the model into one stage per worker, ship them (weights by URI:
/// the `--params` file, or a safetensors file of the seeded params
/// written beside the coordinator, which the workers must be able to
/// read), run the input through and compare with the CPU backend.
pub fn pipeline(opts: &PipelineOptions) -> Result<PipelineReport, String> {
    let model = crate::bench::builtins::resolve(&opts.model)?;
    let graph = model.graph;
    let mut data: ModelData = run::random_data(&graph, opts.seed)?;
    if let Some(p) = &opts.params {
        run::load_params(&graph, p, &mut data)?;
    }
    if let Some(p) = &opts.inputs {
        crate::tensor_files::load_inputs(&graph, p, &mut data)?;
    }
    if data.inputs.len() != 1 {
        return Err(format!(
            "a pipeline takes a model of one input; {} has {}",
            opts.model,
            data.inputs.len()
        ));
    }
    // The weights the workers read: the given file, else the seeded ones
    // written here.
    let dir = tempfile::Builder::new()
        .prefix("rlx-dist-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let weights = match &opts.params {
        Some(p) => std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => {
            let p = dir.path().join("params.safetensors");
            crate::tensor_files::write_f32_safetensors(&p, &data.params)?;
            p
        }
    };
    let co = Coordinator::from_env(opts.waits.connect, opts.waits.answer)?;
    let n = co.workers.len();
    let parts = split::split_even(&graph, n)?;
    let specs: Vec<StageSpec> = parts
        .iter()
        .map(|g| {
            let input = if g.name.ends_with("#stage0") {
                data.inputs[0].0.clone()
            } else {
                split::STAGE_INPUT.to_string()
            };
            let mut spec = StageSpec::new(g.clone(), input, "out", opts.device.clone());
            for p in split::param_names(g) {
                let uri = format!("safetensors://{}#{p}", weights.display());
                spec = spec.weight(p, uri);
            }
            spec
        })
        .collect();
    let stages: Vec<usize> = parts.iter().map(|g| g.len()).collect();
    let pipe = co.pipeline(specs)?;
    let x = &data.inputs[0].1;
    let y = pipe.run(x)?;
    let reference = run::execute(Device::Cpu, &graph, &data, 1)?;
    let want = &reference.outputs[0];
    let (abs, rel) = run::errors(&y, want)?;
    let ok = crate::demo::close(&y, want);
    if let Some(p) = &opts.output {
        crate::tensor_files::write_outputs(&graph, std::slice::from_ref(&y), p)?;
    }
    let mut report = PipelineReport {
        stages: stages.into_iter().zip(pipe.devices.clone()).collect(),
        vs_cpu: (abs, rel, ok),
        pipeline_batches_per_s: None,
        local_batches_per_s: None,
    };
    if opts.batches > 0 {
        let xs = vec![x.clone(); opts.batches];
        pipe.run(x)?; // warm
        let t = Instant::now();
        pipe.run_many(&xs)?;
        report.pipeline_batches_per_s = Some(opts.batches as f64 / t.elapsed().as_secs_f64());
    }
    drop(pipe);
    co.end();
    if let (Some(mode), true) = (opts.local_mode, opts.batches > 0) {
        rlx_plugin_host::install(&rlx_plugin_host::Options {
            plugins: opts.plugins.clone(),
            mode,
            ..Default::default()
        })?;
        let exec = run::execute(Device::Mlx, &graph, &data, opts.batches + 1)?;
        report.local_batches_per_s = Some(1000.0 / exec.steady_run_ms());
    }
    Ok(report)
}

/// `rlx-host dist train`'s options: SGD with momentum (what
/// `rlx_runtime::dist::run_train` applies), each worker on an equal shard
/// of the training rows, `batch` rows per worker per step.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub data: PathBuf,
    pub epochs: usize,
    pub batch: usize,
    pub lr: f32,
    pub momentum: f32,
    pub device: String,
    /// Push each worker its shard and init params over the wire (no
    /// shared filesystem) instead of naming files both can read.
    pub push_data: bool,
    /// Keep training on the device: rlx-runtime's `ResidentTrainer` (Adam
    /// in the step) on every worker, the gradients summed inside each
    /// step by MLX's collectives, instead of `run_train` with the
    /// coordinator averaging (SGD with momentum).
    pub resident: bool,
    pub output: Option<PathBuf>,
    pub waits: Waits,
}

impl TrainOptions {
    /// Defaults that take the digits MLP past 95 % held-out accuracy.
    pub fn digits(data: PathBuf, waits: Waits) -> TrainOptions {
        TrainOptions {
            data,
            epochs: 20,
            batch: 64,
            lr: 0.1,
            momentum: 0.9,
            device: "mlx".into(),
            push_data: false,
            resident: false,
            output: None,
            waits,
        }
    }
}

/// What a training run did.
#[derive(Clone, Debug)]
pub struct TrainReport {
    pub workers: Vec<TrainResult>,
    pub steps: usize,
    pub steps_per_s: f64,
    pub held_out_accuracy: f64,
    /// The largest difference between two workers' final params (they
    /// apply the same averaged gradients, so it should be 0).
    pub worker_spread: f64,
}

/// The files a digits training job reads: `x`, `labels` (the training
/// rows, raw f32) and each init param, under `dir`.
pub struct DigitsFiles {
    pub x: PathBuf,
    pub labels: PathBuf,
    pub params: Vec<(String, PathBuf)>,
}

pub use rlx_plugin_host::dist::write_f32;

/// Write the training rows and init params as raw f32 files.
pub fn write_digits_files(train: &digits::Part, dir: &Path) -> Result<DigitsFiles, String> {
    let x = dir.join("x.f32");
    let labels = dir.join("labels.f32");
    write_f32(&x, &train.x)?;
    write_f32(&labels, &train.labels)?;
    let mut params = Vec::new();
    for (name, v) in digits::init() {
        let p = dir.join(format!("{name}.f32"));
        write_f32(&p, &v)?;
        params.push((name.to_string(), p));
    }
    Ok(DigitsFiles { x, labels, params })
}

/// Rows each of `workers` trains on: an equal share, whole batches.
pub fn shard_rows(rows: usize, workers: usize, batch: usize) -> usize {
    rows / workers / batch * batch
}

/// The training spec of worker `w` of `workers` (its shard: rows
/// `w * shard .. (w + 1) * shard`).
pub fn digits_spec(
    files: &DigitsFiles,
    w: usize,
    workers: usize,
    opts: &TrainOptions,
) -> TrainSpec {
    let shard = shard_rows(digits::TRAIN, workers, opts.batch);
    let uri = |p: &Path| format!("file://{}", p.display());
    TrainSpec {
        graph: digits::train_graph(opts.batch),
        params: files
            .params
            .iter()
            .map(|(n, p)| WeightRef {
                name: n.clone(),
                uri: uri(p),
                packed: false,
            })
            .collect(),
        grad_start: 1,
        loss_index: 0,
        data: vec![
            DataRef {
                input: "x".into(),
                uri: uri(&files.x),
                elem: digits::D,
                shard_start: w * shard,
                shard_len: shard,
            },
            DataRef {
                input: "labels".into(),
                uri: uri(&files.labels),
                elem: 1,
                shard_start: w * shard,
                shard_len: shard,
            },
        ],
        seed_input: Some("d_output".into()),
        momentum: opts.momentum,
        lr_per_epoch: vec![opts.lr; opts.epochs],
        batch: opts.batch,
        device: opts.device.clone(),
        grad_group: 0,
        push_data: opts.push_data,
    }
}

/// The resident training spec of worker `w` of `workers`: the replica
/// graph ([`digits::replica_loss_graph`]), Adam at `opts.lr`, its shard.
pub fn digits_resident_spec(
    files: &DigitsFiles,
    w: usize,
    workers: usize,
    opts: &TrainOptions,
) -> ResidentTrainSpec {
    let plain = digits_spec(files, w, workers, opts);
    let (graph, _) = digits::replica_loss_graph(opts.batch, workers);
    let adam = rlx_runtime::train::AdamSpec::new(opts.lr);
    ResidentTrainSpec {
        graph,
        params: plain.params,
        data: plain.data,
        batch: opts.batch,
        epochs: opts.epochs,
        lr: adam.lr,
        beta1: adam.beta1,
        beta2: adam.beta2,
        eps: adam.eps,
        weight_decay: adam.weight_decay,
        device: opts.device.clone(),
    }
}

/// Train the digits MLP on the workers; check and report.
pub fn train(opts: &TrainOptions) -> Result<TrainReport, String> {
    let (pixels, labels) = digits::load(&opts.data)?;
    let (train_rows, held_out) = digits::split(&pixels, &labels);
    let dir = tempfile::Builder::new()
        .prefix("rlx-dist-train-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let files = write_digits_files(&train_rows, dir.path())?;
    if opts.resident {
        // The replica's graph reads the params through the plugin's
        // `mlx.grad_sum`: its custom ops must be rlx-ir ops here.
        rlx_plugin_host::install(&rlx_plugin_host::Options::default())?;
    }
    let co = Coordinator::from_env(opts.waits.connect, opts.waits.answer)?;
    let n = co.workers.len();
    if shard_rows(digits::TRAIN, n, opts.batch) == 0 {
        return Err(format!(
            "batch {} is larger than a worker's share of the {} training rows",
            opts.batch,
            digits::TRAIN
        ));
    }
    let t = Instant::now();
    let results = if opts.resident {
        let specs: Vec<ResidentTrainSpec> = (0..n)
            .map(|w| digits_resident_spec(&files, w, n, opts))
            .collect();
        co.train_resident(&specs)?
    } else {
        let specs: Vec<TrainSpec> = (0..n).map(|w| digits_spec(&files, w, n, opts)).collect();
        co.train(&specs)?
    };
    let wall = t.elapsed().as_secs_f64();
    co.end();
    let mut results = results;
    if opts.resident {
        // The replicas' losses are divided by the number of workers (so
        // the summed gradients are the mean loss's): report the mean loss.
        for r in &mut results {
            r.first_loss *= n as f32;
            r.last_loss *= n as f32;
        }
    }
    let steps = opts.epochs * shard_rows(digits::TRAIN, n, opts.batch) / opts.batch;
    let mut spread = 0f64;
    for r in &results[1..] {
        for ((_, a), (_, b)) in r.params.iter().zip(&results[0].params) {
            for (x, y) in a.iter().zip(b) {
                spread = spread.max((x - y).abs() as f64);
            }
        }
    }
    let params = results[0].params.clone();
    let acc = rlx_plugin_host::guard::catch("evaluating on the CPU backend", || {
        digits::accuracy(Device::Cpu, &params, &held_out)
    })?;
    if let Some(p) = &opts.output {
        crate::tensor_files::write_f32_safetensors(p, &params)?;
    }
    Ok(TrainReport {
        workers: results,
        steps,
        steps_per_s: steps as f64 / wall,
        held_out_accuracy: acc,
        worker_spread: spread,
    })
}

/// The training rows in the order one process over the whole batch takes
/// them: for each step, every worker's rows of that step, worker by worker
/// (`batch * workers` rows a step).
fn whole_batch_rows(train: &digits::Part, workers: usize, batch: usize) -> digits::Part {
    let shard = shard_rows(digits::TRAIN, workers, batch);
    let steps = shard / batch;
    train.rows((0..steps).flat_map(move |s| {
        (0..workers).flat_map(move |w| {
            let start = w * shard + s * batch;
            start..start + batch
        })
    }))
}

/// [`digits_reference`] for resident training: `ResidentTrainer` alone on
/// `device` (Adam at `opts.lr`) over the whole batch, `batch * workers`
/// rows a step in the workers' order, from the same initial params.
pub fn digits_resident_reference(
    opts: &TrainOptions,
    workers: usize,
    device: Device,
) -> Result<Vec<(String, Vec<f32>)>, String> {
    let (pixels, labels) = digits::load(&opts.data)?;
    let (train_rows, _) = digits::split(&pixels, &labels);
    let rows = whole_batch_rows(&train_rows, workers, opts.batch);
    let big = opts.batch * workers;
    let (graph, params) = digits::loss_graph(big);
    let wrt: Vec<rlx_runtime::train::TrainableParam> = ["w1", "b1", "w2", "b2"]
        .iter()
        .zip(&params)
        .map(|(n, id)| rlx_runtime::train::TrainableParam {
            name: n.to_string(),
            node: *id,
        })
        .collect();
    let initial = digits::init()
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let mut trainer = rlx_runtime::train::ResidentTrainer::new(
        &graph,
        &wrt,
        &initial,
        &rlx_runtime::train::AdamSpec::new(opts.lr),
        device,
    )
    .map_err(|e| format!("{e:?}"))?;
    for _ in 0..opts.epochs {
        for s in 0..rows.len() / big {
            let x = &rows.x[s * big * digits::D..(s + 1) * big * digits::D];
            let labels = &rows.labels[s * big..(s + 1) * big];
            trainer.step(&[("x", x), ("labels", labels)]);
        }
    }
    let mut p: Vec<(String, Vec<f32>)> = trainer.params().into_iter().collect();
    p.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(p)
}

/// The same training in one process over the whole batch: at step `s` the
/// rows every worker would use at its step `s` (shard by shard), `batch *
/// workers` rows at once, through `rlx_runtime::dist::run_train` alone on
/// `device`. What the data-parallel run must match.
pub fn digits_reference(
    opts: &TrainOptions,
    workers: usize,
    device: &str,
    dir: &Path,
) -> Result<Vec<(String, Vec<f32>)>, String> {
    let (pixels, labels) = digits::load(&opts.data)?;
    let (train_rows, _) = digits::split(&pixels, &labels);
    let rows = whole_batch_rows(&train_rows, workers, opts.batch);
    let files = write_digits_files(&rows, dir)?;
    let whole = TrainOptions {
        batch: opts.batch * workers,
        device: device.into(),
        push_data: false,
        ..opts.clone()
    };
    let spec = digits_spec(&files, 0, 1, &whole);
    let (_, params) =
        rlx_runtime::dist::run_train(&spec, 1, |_| Vec::new(), |b: &[f32]| b.to_vec(), false)?;
    Ok(params)
}

/// `n` values uniform in ±1/sqrt(fan_in).
fn uniform(rng: &mut rand::rngs::StdRng, n: usize, fan_in: usize) -> Vec<f32> {
    use rand::Rng;
    let s = 1.0 / (fan_in as f32).sqrt();
    (0..n).map(|_| rng.gen_range(-s..s)).collect()
}

/// A 2-layer MLP `y = relu(x w1 + b1) w2 + b2`, `x [batch, d]`, hidden `h`.
#[derive(Clone, Debug)]
pub struct MlpWeights {
    pub batch: usize,
    pub d: usize,
    pub h: usize,
    pub w1: Vec<f32>,
    pub b1: Vec<f32>,
    pub w2: Vec<f32>,
    pub b2: Vec<f32>,
}

impl MlpWeights {
    /// Seeded weights, scaled by 1/sqrt(fan_in).
    pub fn seeded(batch: usize, d: usize, h: usize, seed: u64) -> MlpWeights {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        MlpWeights {
            batch,
            d,
            h,
            w1: uniform(&mut rng, d * h, d),
            b1: uniform(&mut rng, h, d),
            w2: uniform(&mut rng, h * d, h),
            b2: uniform(&mut rng, d, h),
        }
    }

    /// A seeded input `x [batch, d]` for it, uniform in ±1/sqrt(batch·d).
    pub fn seeded_input(&self, seed: u64) -> Vec<f32> {
        let n = self.batch * self.d;
        uniform(&mut rand::rngs::StdRng::seed_from_u64(seed), n, n)
    }

    /// The whole MLP as one graph (params `w1`, `b1`, `w2`, `b2`).
    pub fn graph(&self) -> Graph {
        let (mut g, y, _) =
            crate::models::relu_mlp("mlp_whole", self.batch, self.d, self.h, self.d);
        g.set_outputs(vec![y]);
        g
    }

    /// Worker `r` of `n`'s share, tensor parallel: `w1` (and `b1`) split
    /// by columns; then either `w2` split by rows and the partial products
    /// summed (`mlx.all_sum`), or (`gather`) the hidden columns gathered
    /// (`mlx.all_gather` of the transposed hidden, along axis 0) and
    /// multiplied by the whole `w2`. Its weights are written under `dir`
    /// (the worker reads them from there). Needs the plugin's custom ops
    /// registered with rlx-ir (the plugin installed in this process).
    pub fn tensor_parallel_stage(
        &self,
        r: usize,
        n: usize,
        gather: bool,
        dir: &Path,
    ) -> Result<StageSpec, String> {
        use rlx_ir::infer::GraphExt;
        let (d, h) = (self.d, self.h);
        if h % n != 0 {
            return Err(format!("hidden {h} does not divide by {n} workers"));
        }
        let hw = h / n;
        let f = |dims: &[usize]| rlx_ir::Shape::new(dims, rlx_ir::DType::F32);
        let mut g = Graph::new(format!("mlp_tp{r}"));
        let x = g.input("x", f(&[self.batch, d]));
        let w1 = g.param("w1", f(&[d, hw]));
        let b1 = g.param("b1", f(&[hw]));
        let b2 = g.param("b2", f(&[d]));
        let hid = g.mm(x, w1);
        let hid = g.add(hid, b1);
        let hid = g.relu(hid);
        let y = if gather {
            let w2 = g.param("w2", f(&[h, d]));
            let ht = g.transpose_(hid, vec![1, 0]);
            let all = g.custom_op(
                "mlx.all_gather",
                (n as i32).to_le_bytes().to_vec(),
                vec![ht],
            );
            let full = g.transpose_(all, vec![1, 0]);
            g.mm(full, w2)
        } else {
            let w2 = g.param("w2", f(&[hw, d]));
            let part = g.mm(hid, w2);
            g.custom_op("mlx.all_sum", vec![], vec![part])
        };
        let y = g.add(y, b2);
        g.set_outputs(vec![y]);
        let w1: Vec<f32> = (0..d)
            .flat_map(|i| self.w1[i * h + r * hw..i * h + (r + 1) * hw].to_vec())
            .collect();
        let w2 = if gather {
            self.w2.clone()
        } else {
            self.w2[r * hw * d..(r + 1) * hw * d].to_vec()
        };
        let mut spec = StageSpec::new(g, "x", "y", "mlx");
        for (name, v) in [
            ("w1", &w1[..]),
            ("b1", &self.b1[r * hw..(r + 1) * hw]),
            ("w2", &w2[..]),
            ("b2", &self.b2[..]),
        ] {
            let p = dir.join(format!(
                "{name}-rank{}-{}.f32",
                r + 1,
                if gather { "g" } else { "s" }
            ));
            spec = spec.weight(name, write_f32(&p, v)?);
        }
        Ok(spec)
    }
}

/// `rlx-host dist tensor-parallel`'s options.
#[derive(Clone, Debug)]
pub struct TensorParallelOptions {
    pub batch: usize,
    pub d: usize,
    pub h: usize,
    pub gather: bool,
    pub seed: u64,
    /// Batches timed (after one warm-up).
    pub batches: usize,
    /// The mode of the one-process comparison in this process.
    pub local_mode: rlx_plugin_api::Mode,
    pub plugins: Vec<PathBuf>,
    pub waits: Waits,
}

/// What a tensor-parallel run did.
#[derive(Clone, Debug)]
pub struct TensorParallelReport {
    pub devices: Vec<String>,
    /// Max abs / rel of every worker's output against the whole MLP on
    /// the plugin in this process, and whether within the demo's tolerance.
    pub vs_one_process: (f64, f64, bool),
    pub parallel_batches_per_s: f64,
    pub local_batches_per_s: f64,
}

/// The MLP split over the workers (one share each, joined by MLX's
/// collectives inside their graphs), against the whole MLP on the plugin
/// in this process.
pub fn tensor_parallel(opts: &TensorParallelOptions) -> Result<TensorParallelReport, String> {
    // The plugin here: its custom ops build the stages, and it runs the
    // one-process comparison.
    rlx_plugin_host::install(&rlx_plugin_host::Options {
        plugins: opts.plugins.clone(),
        mode: opts.local_mode,
        ..Default::default()
    })?;
    let m = MlpWeights::seeded(opts.batch, opts.d, opts.h, opts.seed);
    let x = m.seeded_input(opts.seed + 1);
    let dir = tempfile::Builder::new()
        .prefix("rlx-dist-tp-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let co = Coordinator::from_env(opts.waits.connect, opts.waits.answer)?;
    let n = co.workers.len();
    let stages = (0..n)
        .map(|r| m.tensor_parallel_stage(r, n, opts.gather, dir.path()))
        .collect::<Result<Vec<_>, _>>()?;
    let par = co.parallel(stages)?;
    let outs = par.run(&x)?;
    let t = Instant::now();
    for _ in 0..opts.batches {
        par.run(&x)?;
    }
    let parallel = opts.batches as f64 / t.elapsed().as_secs_f64();
    let devices = par.devices.clone();
    drop(par);
    co.end();
    let whole = m.graph();
    let data = ModelData {
        inputs: vec![("x".into(), x.clone())],
        params: vec![
            ("w1".into(), m.w1.clone()),
            ("b1".into(), m.b1.clone()),
            ("w2".into(), m.w2.clone()),
            ("b2".into(), m.b2.clone()),
        ],
    };
    let exec = run::execute(Device::Mlx, &whole, &data, opts.batches.max(1) + 1)?;
    let want = &exec.outputs[0];
    let (mut abs, mut rel, mut ok) = (0f64, 0f64, true);
    for y in &outs {
        let (a, r) = run::errors(y, want)?;
        abs = abs.max(a);
        rel = rel.max(r);
        ok &= crate::demo::close(y, want);
    }
    Ok(TensorParallelReport {
        devices,
        vs_one_process: (abs, rel, ok),
        parallel_batches_per_s: parallel,
        local_batches_per_s: 1000.0 / exec.steady_run_ms(),
    })
}
