//! rlx-runtime's compile stages for a plugin's claim set, and the messages
//! that name what a plugin does not claim.

use rlx_ir::lir::LirModule;
use rlx_ir::{Graph, OpKind};
use rlx_opt::pass::Pass as _;
use rlx_runtime::{CompileOptions, Device};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// rlx-runtime's compile pipeline for one device and one claim set, as
/// the plugin backend runs it before handing the graph to the plugin.
/// Failures panic with `"<label> plugin: <one line>"`.
#[derive(Clone)]
pub struct Pipeline {
    pub device: Device,
    pub ops: &'static [OpKind],
    /// The plugin's name, for messages.
    pub label: String,
}

impl Pipeline {
    pub(super) fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!("{} plugin: {msg}", self.label)
    }

    pub(super) fn claims(&self, k: OpKind) -> bool {
        self.ops.contains(&k)
    }

    /// Run one of rlx-runtime's stages; its panic (a legalize failure
    /// lists the unclaimed ops one per line) is re-raised as this plugin's,
    /// on one line.
    pub(super) fn stage<T>(&self, f: impl FnOnce() -> T) -> T {
        crate::guard::catch_raw(f).unwrap_or_else(|e| {
            self.fail(match summarize_legalize_error(&e) {
                Some(s) => format!("rlx-runtime's {} pipeline left {s}", self.device),
                None => format!(
                    "rlx-runtime's {} compile pipeline failed: {}",
                    self.device,
                    crate::guard::one_line(&e)
                ),
            })
        })
    }

    /// The session's options, adjusted for a plugin.
    ///
    /// rlx-runtime's `FuseSharedInputMatMul` (QKV, gate/up) rewrites
    /// sibling matmuls into one `MatMul` against `Concat` of their weights,
    /// then `Narrow`s. The plugin runs a matmul on its weights where they
    /// lie; the concatenation is a second copy of those weights, which the
    /// plugin either keeps (hoisted, within a memory budget) or makes again
    /// every run past it: a 155 M-parameter Llama decoded at 225 ms a token
    /// with it, 24 ms without, and held 775 MB against 505 MB. So that
    /// fusion is off for plugins (`FusionOptions::no_weight_concat`, the
    /// `RLX_NO_WEIGHT_CONCAT_FUSION` knob): the matmuls read their weights
    /// in place. (A plugin that does not claim `Concat` and `Narrow` could
    /// not take the fused form at all.)
    pub fn options(&self, options: &CompileOptions) -> CompileOptions {
        let mut o = options.clone();
        o.fusion_opts.no_weight_concat = true;
        o
    }

    /// Fusion + legalization (`stages::compile_graph_stages_for_backend`)
    /// with the claim set.
    pub fn stages(&self, graph: Graph, options: &CompileOptions) -> LirModule {
        let options = &self.options(options);
        let result = self.stage(|| {
            rlx_runtime::stages::compile_graph_stages_for_backend(
                self.device,
                graph,
                options,
                self.ops,
            )
        });
        rlx_runtime::stages::maybe_log_fusion(&result.fusion);
        result.lir
    }

    /// The post-fusion steps rlx-runtime's built-in backends run on LIR
    /// (`backend/mlx_backend.rs::compile_lir` and `prepare_fused_graph`),
    /// then a last check that every node's kind is claimed.
    pub fn prepare(&self, lir: LirModule, options: &CompileOptions) -> Graph {
        let ops = self.ops;
        let (graph, report) = self.stage(|| {
            let mut graph = lir.into_graph();
            // A plugin that runs While keeps loops (and If, when claimed)
            // intact: unrolling is only for plugins without a loop.
            graph = if !ops.contains(&OpKind::While) {
                rlx_opt::LowerControlFlow.run(graph)
            } else if !ops.contains(&OpKind::If) {
                rlx_opt::LowerIf.run(graph)
            } else {
                graph
            };
            graph = rlx_opt::rlx_autodiff::decompose_backward_ops_except(graph, ops);
            rlx_opt::prepare_graph_for_backend_with_report(
                graph,
                &self.label,
                ops,
                options.kernel_dispatch,
            )
        });
        rlx_opt::maybe_log_dispatch_report(&report);
        if !report.compile_ready {
            log::debug!("{}", rlx_opt::format_dispatch_report(&report));
            self.fail(format!(
                "rlx-runtime's {} pipeline left {}",
                self.device,
                unclaimed_message(&graph, &report.still_unsupported)
            ));
        }
        let graph = self.stage(|| {
            let mut graph = rlx_runtime::precompile::post_fusion_cleanup(graph, options);
            if let Some(p) = options.policy.clone() {
                graph = rlx_opt::AutoMixedPrecision::new(p).run(graph);
            }
            graph
        });
        // The last word before the plugin sees it. Legalization should
        // guarantee this; if a later cleanup introduced something, say so.
        let unclaimed: Vec<(rlx_ir::NodeId, OpKind)> = graph
            .nodes()
            .iter()
            .filter(|n| !self.claims(n.op.kind()))
            .map(|n| (n.id, n.op.kind()))
            .collect();
        if !unclaimed.is_empty() {
            self.fail(format!(
                "rlx-runtime's {} cleanup after legalization produced {}",
                self.device,
                unclaimed_message(&graph, &unclaimed)
            ));
        }
        graph
    }

    /// [`Self::stages`] then [`Self::prepare`]: the graph the plugin would
    /// be sent.
    ///
    /// The outputs keep the names the graph gave them: rlx-runtime's stages
    /// keep the outputs in order but drop their names, which the plugin
    /// reports in its signature and state feeds refer to.
    pub fn lower(&self, graph: Graph, options: &CompileOptions) -> Graph {
        let names = graph.output_names().to_vec();
        let n = graph.outputs.len();
        let lir = self.stages(graph, options);
        let mut lowered = self.prepare(lir, options);
        if lowered.output_names().is_empty() && lowered.outputs.len() == n {
            lowered.set_output_names(names);
        }
        lowered
    }
}

/// The graph a plugin claiming `ops` would receive for `graph` compiled on
/// `device` with default options, or the one-line reason it cannot.
/// No plugin is involved: this shows what rlx-runtime's pipeline does.
pub fn lower_for_claims(
    device: Device,
    graph: Graph,
    ops: &'static [OpKind],
    label: &str,
) -> Result<Graph, String> {
    let l = Pipeline {
        device,
        ops,
        label: label.to_string(),
    };
    crate::guard::catch_quiet(|| l.lower(graph, &CompileOptions::default()))
}

/// rlx-opt's legalize panic (`backend "mlx" doesn't claim support for N op
/// kind(s):` then `  - node NodeId(i): Kind` per node) as one line that
/// counts nodes per kind: "5 node(s) of op kinds the plugin does not claim:
/// Gather x1, RmsNorm x3, Rope x1". `None` for any other message.
pub fn summarize_legalize_error(msg: &str) -> Option<String> {
    if !msg.contains("doesn't claim support") {
        return None;
    }
    let pairs: Vec<String> = msg
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- node "))
        .filter_map(|rest| rest.rsplit_once(": ").map(|(_, k)| k.trim().to_string()))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    Some(count_kinds(pairs.len(), pairs.iter().map(String::as_str)))
}

/// "N node(s) of op kinds the plugin does not claim: A x2, B x1".
pub(super) fn count_kinds<'a>(total: usize, kinds: impl Iterator<Item = &'a str>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for k in kinds {
        match counts.iter_mut().find(|(c, _)| *c == k) {
            Some((_, n)) => *n += 1,
            None => counts.push((k, 1)),
        }
    }
    format!(
        "{total} node(s) of op kinds the plugin does not claim: {}",
        counts
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// [`count_kinds`] for (node, kind) pairs, plus the first node of each.
pub(super) fn unclaimed_message(graph: &Graph, nodes: &[(rlx_ir::NodeId, OpKind)]) -> String {
    let names: Vec<String> = nodes.iter().map(|(_, k)| format!("{k:?}")).collect();
    let first = nodes
        .first()
        .and_then(|(id, _)| graph.nodes().get(id.0 as usize))
        .map(|n| format!(" (first: node {} = {})", n.id, n.op))
        .unwrap_or_default();
    format!(
        "{}{first}",
        count_kinds(nodes.len(), names.iter().map(String::as_str))
    )
}

/// The stages of a [`Pipeline`] for one claim set, from the
/// input a compile entry point was given to the graph the plugin would get.
pub(super) type Staged<'a> =
    dyn Fn(&Pipeline, &CompileOptions) -> Result<Graph, rlx_ir::hir::LowerError> + 'a;

/// The plugin's claims and the CPU backend's together, leaked once per
/// claim set (rlx-runtime wants a `&'static` list).
pub(super) fn union_claims(plugin: &'static [OpKind]) -> &'static [OpKind] {
    static CACHE: OnceLock<Mutex<HashMap<usize, &'static [OpKind]>>> = OnceLock::new();
    let mut map = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    map.entry(plugin.as_ptr() as usize).or_insert_with(|| {
        let mut all = plugin.to_vec();
        if let Some(cpu) = rlx_runtime::registry::backend_for(Device::Cpu) {
            for k in cpu.supported_ops() {
                if !all.contains(k) {
                    all.push(*k);
                }
            }
        }
        Box::leak(all.into_boxed_slice())
    })
}
