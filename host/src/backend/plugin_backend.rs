//! The rlx-runtime `Backend` a registered plugin is: compile through the
//! pipeline, then the plugin (or, with fallback, a split with the CPU).

use super::*;
use crate::partition::Side;
use rlx_ir::lir::LirModule;
use rlx_ir::{Graph, OpKind};
use rlx_runtime::{Backend, CompileOptions, Device, ExecutableGraph};

pub(super) struct PluginBackend {
    pub(super) reg: Registration,
    pub(super) pipeline: Pipeline,
}

/// rlx-ir's `RngBackend` as the ABI numbers it (`tables::rng_policy`).
pub fn rng_policy_number(b: rlx_ir::RngBackend) -> u32 {
    use rlx_plugin_api::tables::rng_policy;
    match b {
        rlx_ir::RngBackend::Philox => rng_policy::PHILOX,
        rlx_ir::RngBackend::Ort => rng_policy::ORT,
        rlx_ir::RngBackend::Bnns => rng_policy::BNNS,
        rlx_ir::RngBackend::Zero => rng_policy::ZERO,
    }
}

impl PluginBackend {
    /// What a compile here depends on besides the graph, for the compile
    /// cache: the plugin, the device, the mode this thread compiles in,
    /// and every setting and option that reaches the plugin.
    pub(super) fn cache_context(&self, options: &CompileOptions) -> compile_cache::Context {
        let r = &self.reg;
        compile_cache::Context::new(format_args!(
            "{} {} {:?} {:?} {} {:?} {:?} {options:?}",
            r.plugin.path().display(),
            self.pipeline.device,
            plugin_mode(self.pipeline.device).unwrap_or(r.mode),
            r.fallback,
            r.resident,
            r.plugin_device,
            r.memory_limit,
        ))
    }

    /// `compile` through the compile cache: `graph` compiled before in this
    /// context is cloned; a graph that goes to the plugin whole is kept.
    fn compile_cached(
        &self,
        graph: Option<&Graph>,
        options: &CompileOptions,
        compile: impl FnOnce() -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError>,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        let key = graph
            .and_then(compile_cache::key_bytes)
            .map(|b| (self.cache_context(options), b));
        if let Some((context, bytes)) = &key {
            if let Some(exe) = compile_cache::lookup(context, bytes) {
                return Ok(Box::new(exe));
            }
        }
        let exe = compile()?;
        if let Some((context, bytes)) = key {
            if let Some(g) = exe
                .executable_as_any()
                .and_then(|a| a.downcast_ref::<PluginGraph>())
            {
                compile_cache::store(context, bytes, g);
            }
        }
        Ok(exe)
    }

    /// May nodes the plugin does not take run on the CPU backend?
    pub(super) fn falls_back(&self) -> bool {
        // A plugin registered for the CPU device itself has nothing to fall back to.
        self.reg.fallback == Fallback::Cpu && self.pipeline.device != Device::Cpu
    }

    /// The graph as rlx-runtime's pipeline prepares it, and where each of
    /// its nodes runs. `lower` runs the pipeline for a claim set. The
    /// plugin's claims come first: a graph the pipeline can fit to them
    /// (decomposing what the plugin lacks) goes to the plugin whole, unless
    /// a node's dtype is not claimed. When it cannot, and fallback is
    /// allowed, the pipeline runs again for the plugin's and the CPU
    /// backend's claims together, and the nodes the plugin does not take go
    /// to the CPU.
    pub(super) fn placed(
        &self,
        options: &CompileOptions,
        lower: &Staged<'_>,
    ) -> Result<(Graph, crate::partition::Plan), rlx_ir::hir::LowerError> {
        let g = if !self.falls_back() {
            lower(&self.pipeline, options)?
        } else {
            match crate::guard::catch_raw(|| lower(&self.pipeline, options)) {
                Ok(r) => r?,
                Err(why) => {
                    log::debug!(
                        "{} plugin cannot take the graph whole: {why}",
                        self.pipeline.label
                    );
                    let both = Pipeline {
                        ops: union_claims(self.reg.ops),
                        ..self.pipeline.clone()
                    };
                    lower(&both, options)?
                }
            }
        };
        let plan = crate::partition::Plan::new(&g, &self.reg.claims);
        Ok((g, plan))
    }

    /// The plan's executable: the plugin's alone when it takes every node
    /// (or fallback is off: then its compile names the first node it
    /// refuses), else the partitions on the plugin and the CPU backend.
    pub(super) fn compile_placed(
        &self,
        options: &CompileOptions,
        lower: &Staged<'_>,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        let (graph, plan) = self.placed(options, lower)?;
        super::observe::compiled(self.pipeline.device, &plan);
        if plan.is_whole() {
            return Ok(self.build(graph, options.rng));
        }
        if !self.falls_back() {
            // The first node the plugin does not take, and why.
            let p = plan.placements.iter().find(|p| p.side == Some(Side::Cpu));
            let why = p.map_or(String::new(), |p| {
                format!("%{} {:?}: {}", p.node.0, p.kind, p.why)
            });
            self.pipeline.fail(format!(
                "fallback is off, and the graph has a node the plugin does not take: {why}"
            ));
        }
        log::info!(
            "{} plugin: the graph runs split with the CPU backend:\n{plan}",
            self.pipeline.label
        );
        let cpu = rlx_runtime::registry::backend_for(Device::Cpu).unwrap_or_else(|| {
            self.pipeline
                .fail("no CPU backend is registered to fall back to")
        });
        Ok(Box::new(crate::partition::SplitGraph::compile(
            &graph,
            &plan,
            |sub| self.build(sub, options.rng),
            |sub| cpu.compile(sub, options),
        )))
    }

    /// [`Self::compile_placed`] for `compile_hir` and `compile_module`:
    /// rlx-runtime's stages for the input under the plugin's options and
    /// the claim set tried, then the post-fusion steps.
    pub(super) fn compile_staged(
        &self,
        options: &CompileOptions,
        stages: impl Fn(&CompileOptions) -> Result<rlx_opt::CompileResult, rlx_ir::hir::LowerError>,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        self.compile_placed(options, &|l: &Pipeline, o: &CompileOptions| {
            let o = &rlx_runtime::stages::options_with_supported_ops(&l.options(o), l.ops);
            let result = l.stage(|| stages(o))?;
            rlx_runtime::stages::maybe_log_fusion(&result.fusion);
            Ok(l.prepare(result.lir, o))
        })
    }

    pub(super) fn build(&self, graph: Graph, rng: rlx_ir::RngOptions) -> Box<dyn ExecutableGraph> {
        Box::new(self.build_graph(graph, rng))
    }

    /// [`Self::build`]'s executable as the plugin's own.
    pub(super) fn build_graph(&self, graph: Graph, rng: rlx_ir::RngOptions) -> PluginGraph {
        let name = &self.pipeline.label;
        crate::cpu_bridge::bridge_graph(&self.reg.plugin, &graph)
            .unwrap_or_else(|e| self.pipeline.fail(e));
        if log::log_enabled!(log::Level::Trace) {
            match rlx_ir::rlxmodel::to_text(&graph) {
                Ok(text) => log::trace!("graph sent to plugin {name}:\n{text}"),
                Err(e) => log::trace!("graph sent to plugin {name}: no text ({e})"),
            }
        }
        let mode = plugin_mode(self.pipeline.device).unwrap_or(self.reg.mode);
        log::debug!(
            "compiling {} nodes on plugin {name} in {} mode",
            graph.len(),
            mode.name()
        );
        // rlx-runtime's RNG options travel in the compile options, so random
        // ops draw the stream the CPU backend would.
        let options = rlx_plugin_api::CompileOptions {
            mode,
            rng_policy: rng_policy_number(rng.backend),
            rng_seed: rng.seed,
            // The device set for it, else the plugin's default: its GPU when it
            // has one.
            device: self.reg.plugin_device,
            // The per-tensor limit as set for the device now.
            memory_limit: registry()
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(&self.pipeline.device)
                .and_then(|r| r.memory_limit),
        };
        let exe = self
            .reg
            .plugin
            .compile_graph(&graph, &options)
            .unwrap_or_else(|e| self.pipeline.fail(e));
        PluginGraph::new(exe, name.clone())
            .with_rng(rng)
            .with_state(self.reg.resident)
    }
}

impl Backend for PluginBackend {
    fn compile(&self, graph: Graph, options: &CompileOptions) -> Box<dyn ExecutableGraph> {
        self.compile_cached(Some(&graph), options, || {
            self.compile_placed(options, &|l: &Pipeline, o: &CompileOptions| {
                Ok(l.lower(graph.clone(), o))
            })
        })
        .unwrap_or_else(|e| self.pipeline.fail(e))
    }

    fn compile_hir(
        &self,
        hir: rlx_ir::hir::HirModule,
        device: Device,
        options: &CompileOptions,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        self.compile_staged(options, |o| {
            rlx_runtime::stages::compile_hir_stages(device, hir.clone(), o)
        })
    }

    fn compile_module(
        &self,
        module: rlx_ir::GraphModule,
        device: Device,
        options: &CompileOptions,
    ) -> Result<Box<dyn ExecutableGraph>, rlx_ir::hir::LowerError> {
        let graph = module.as_mir().map(|m| m.as_graph());
        self.compile_cached(graph, options, || {
            self.compile_staged(options, |o| {
                rlx_runtime::stages::compile_module_stages(device, module.clone(), o)
            })
        })
    }

    fn compile_lir(&self, lir: LirModule, options: &CompileOptions) -> Box<dyn ExecutableGraph> {
        self.compile_placed(options, &|l: &Pipeline, o: &CompileOptions| {
            Ok(l.prepare(lir.clone(), o))
        })
        .unwrap_or_else(|e| self.pipeline.fail(e))
    }

    fn supported_ops(&self) -> &'static [OpKind] {
        self.reg.ops
    }
}
