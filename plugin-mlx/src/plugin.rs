//! The plugin: descriptor, registration (the lowering table) and compile.

use crate::executable::MlxExecutable;
use crate::graph_source::GraphSource;
use rlx_plugin_api::{
    CompileOptions, CustomOpRegistry, DType, Descriptor, Executable, LoweringEntry, MemoryUsage,
    Offers, Plugin, PluginError, PluginResult,
};
use std::sync::Arc;

pub struct MlxPlugin;

impl MlxPlugin {
    pub fn new() -> Self {
        // Before MLX computes anything: it reads MLX_ENABLE_TF32 once, and
        // MLX_PTX_CACHE_DIR on its first generated kernel.
        crate::devices::choose_tf32();
        if crate::devices::build() == crate::devices::Build::Cuda {
            crate::contraction::choose();
        }
        MlxPlugin
    }
}

impl Default for MlxPlugin {
    fn default() -> Self {
        Self::new()
    }
}

impl Plugin for MlxPlugin {
    fn availability(&self) -> PluginResult<()> {
        match crate::devices::unusable_reason() {
            Some(why) => Err(rlx_plugin_api::PluginError::unsupported(why)),
            None => Ok(()),
        }
    }

    fn descriptor(&self) -> Descriptor {
        let build = crate::devices::build();
        let devices = crate::devices::available();
        let mut build_info = vec![
            ("mlx.version".into(), rlx_mlx_shim::mlx_version()),
            ("mlx.library".into(), rlx_mlx_shim::info::mlx_library_path()),
            ("mlx.backend".into(), format!("{build:?}").to_lowercase()),
            ("blas".into(), crate::blas::describe()),
            ("rlx-ir".into(), rlx_ir::rlxmodel::RLX_VERSION.into()),
        ];
        if build == crate::devices::Build::Cuda {
            build_info.push(("mlx.tf32".into(), crate::devices::choose_tf32().into()));
            build_info.push((
                "mlx.fma_contraction".into(),
                crate::contraction::choose().into(),
            ));
            build_info.push((
                "mlx.kernel_builder".into(),
                crate::executable::kernel_builder_info(),
            ));
            build_info.push((
                "mlx.gpu_fallback".into(),
                "f64 values and linalg (DenseSolve, BatchedDenseSolve) run on the CPU stream"
                    .into(),
            ));
        }
        Descriptor {
            name: build.plugin_name().into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: match build {
                crate::devices::Build::Cpu => "Apple MLX backend (CPU) for RLX".into(),
                crate::devices::Build::Cuda => {
                    "Apple MLX backend (CUDA GPU and CPU) for RLX".into()
                }
            },
            devices: devices.iter().map(|d| d.label()).collect(),
            build_info,
            opsets: vec![rlx_ir::rlxmodel::OPSET],
            device_infos: devices.to_vec(),
        }
    }

    fn init(&self, custom_ops: &'static CustomOpRegistry) -> PluginResult<Vec<LoweringEntry>> {
        rlx_mlx_shim::init().map_err(|e| rlx_plugin_api::PluginError::internal(e.to_string()))?;
        crate::custom::install::install(custom_ops)?;
        let entries: Vec<LoweringEntry> = crate::table::table()
            .iter()
            .map(|l| {
                let name = l.name();
                let op = name.clone();
                LoweringEntry {
                    op_kind: name,
                    dtypes: l
                        .dtypes
                        .iter()
                        .filter_map(|d| crate::dtype::ir_to_abi(*d))
                        .collect::<Vec<DType>>(),
                    strategy: l.strategy,
                    note: l.note.into(),
                    execute: l.lower.map(|_| {
                        Arc::new(move |text: &str, ins: &[rlx_plugin_api::HostTensor]| {
                            crate::eager::execute_single(&op, text, ins)
                        }) as rlx_plugin_api::ExecuteOp
                    }),
                }
            })
            .collect();
        log::info!(
            "MLX {} plugin ready: {} lowerings; BLAS: {}",
            rlx_mlx_shim::mlx_version(),
            entries.len(),
            crate::blas::describe()
        );
        Ok(entries)
    }

    fn compile(&self, graph: &str, options: &CompileOptions) -> PluginResult<Box<dyn Executable>> {
        Ok(Box::new(MlxExecutable::compile(graph, options)?))
    }

    fn graph_forms(&self) -> Vec<String> {
        crate::graph_source::forms()
    }

    fn compile_form(
        &self,
        form: &str,
        graph: &[u8],
        options: &CompileOptions,
    ) -> PluginResult<Box<dyn Executable>> {
        let source = GraphSource::from_form(form, graph)?;
        Ok(Box::new(MlxExecutable::compile_source(source, options)?))
    }

    fn offers(&self) -> Offers {
        Offers {
            state: true,
            row_feeds: true,
            state_from: true,
            clone: true,
            share_params: true,
            submit: true,
            param_range: true,
            set_rng: true,
            active_extent: true,
            memory_usage: true,
            dma_map: true,
        }
    }

    /// On a GPU the range is page-locked, and the copies of inputs read
    /// from it and of outputs written into it run on the copy engine
    /// (`shim/src/host_memory.cc`); on the CPU, where MLX reads host
    /// memory in place, the mapping only records the range.
    fn dma_map(&self, data: *mut u8, len: usize) -> PluginResult<()> {
        use rlx_mlx_shim::host_memory::{dma_map, DmaError};
        dma_map(data, len).map_err(|e| match e {
            DmaError::Overlaps => PluginError::invalid_argument(format!(
                "dma_map: the {len} bytes at {data:p} overlap a mapped range"
            )),
            DmaError::OutOfMemory => PluginError::resource_exhausted(format!(
                "dma_map: the GPU driver cannot page-lock {len} more bytes"
            )),
            other => PluginError::internal(format!("dma_map of {len} bytes: {other:?}")),
        })
    }

    fn dma_unmap(&self, data: *mut u8) -> PluginResult<()> {
        use rlx_mlx_shim::host_memory::{dma_unmap, DmaError};
        dma_unmap(data).map_err(|e| match e {
            DmaError::NotMapped => {
                PluginError::not_found(format!("dma_unmap: no mapped range starts at {data:p}"))
            }
            other => PluginError::internal(format!("dma_unmap at {data:p}: {other:?}")),
        })
    }

    fn memory_usage(&self) -> PluginResult<MemoryUsage> {
        use rlx_mlx_shim::info;
        Ok(MemoryUsage {
            active_bytes: info::active_memory() as u64,
            peak_bytes: info::peak_memory() as u64,
            cached_bytes: info::cache_memory() as u64,
        })
    }
}
