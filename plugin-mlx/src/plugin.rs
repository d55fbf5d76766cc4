//! The plugin: descriptor, registration (the lowering table) and compile.

use crate::executable::MlxExecutable;
use crate::lower;
use rlx_plugin_api::{
    CompileOptions, CustomOpRegistry, DType, Descriptor, Executable, LoweringEntry, Plugin,
    PluginResult,
};
use std::sync::Arc;

pub struct MlxPlugin;

impl MlxPlugin {
    pub fn new() -> Self {
        MlxPlugin
    }
}

impl Default for MlxPlugin {
    fn default() -> Self {
        Self::new()
    }
}

impl Plugin for MlxPlugin {
    fn descriptor(&self) -> Descriptor {
        Descriptor {
            name: "mlx".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Apple MLX backend (CPU) for RLX".into(),
            devices: vec!["cpu".into()],
            build_info: vec![
                ("mlx.version".into(), rlx_mlx_shim::mlx_version()),
                ("mlx.library".into(), rlx_mlx_shim::info::mlx_library_path()),
                ("blas".into(), crate::blas::describe()),
                ("rlx-ir".into(), rlx_ir::rlxmodel::RLX_VERSION.into()),
            ],
            opsets: vec![rlx_ir::rlxmodel::OPSET],
        }
    }

    fn init(&self, _custom_ops: &CustomOpRegistry) -> PluginResult<Vec<LoweringEntry>> {
        rlx_mlx_shim::init().map_err(|e| rlx_plugin_api::PluginError::internal(e.to_string()))?;
        let entries: Vec<LoweringEntry> = lower::table()
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
}
